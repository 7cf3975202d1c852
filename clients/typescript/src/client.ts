/** `Client`: every endpoint of docs/API.md as a method, on Node's fetch. */

import { randomUUID } from "node:crypto";

import { OnceqError, TransportError, Unavailable, makeError } from "./errors.js";
import type {
  AckItem,
  AckResult,
  ConsumeOptions,
  ConsumeResult,
  Delivery,
  DeliveryRef,
  Envelope,
  GroupCounters,
  Health,
  Json,
  KeyEvent,
  KeyState,
  MessageInput,
  ProduceOptions,
  ProduceResult,
  Produced,
  StepMessage,
  TopicCreated,
  TopicInfo,
  TopicSettings,
  Version,
} from "./types.js";

export const VERSION = "0.1.0";

export interface ClientOptions {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** Per request, on top of any `waitMs`. Default 30000. */
  timeoutMs?: number;
  /** Extra attempts on 429, 503 and network errors. Default 3. */
  retries?: number;
  /** The most one retry waits for `Retry-After`. Default 5000. */
  maxRetryWaitMs?: number;
  /** A fetch to use instead of the global one (e.g. with a custom TLS agent). */
  fetch?: typeof fetch;
}

interface RequestOptions {
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  waitMs?: number;
  retryNetwork?: boolean;
  signal?: AbortSignal | undefined;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

const camel = (s: string) => s.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
const snake = (s: string) => s.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());

function camelKeys(o: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) out[camel(k)] = v;
  return out;
}

function defined<T extends Record<string, unknown>>(o: T): Partial<T> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out as Partial<T>;
}

function valueText(v: unknown): string {
  if (typeof v === "string") return v;
  if (v instanceof Uint8Array) return new TextDecoder().decode(v);
  return JSON.stringify(v);
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function toDelivery(d: Record<string, any>): Delivery {
  return {
    topic: d.topic,
    partition: d.partition,
    offset: d.offset,
    attempts: d.attempts,
    key: d.key ?? "",
    value: d.value ?? "",
    lastError: d.last_error ?? "",
    envelope: d.envelope ?? {},
    leaseExpiresAtMs: d.lease_expires_at_ms ?? 0,
    fencingToken: d.fencing_token ?? 0,
  };
}

function toProduced(d: Record<string, any>): Produced {
  // A stored message's answer has no status of its own (or another word for it, such as "stored").
  const status = d.status === "pending" ? "pending" : "produced";
  return {
    topic: d.topic ?? "",
    status,
    pending: status === "pending",
    ...(d.partition !== undefined ? { partition: d.partition } : {}),
    ...(d.offset !== undefined ? { offset: d.offset } : {}),
    duplicate: Boolean(d.duplicate),
  };
}

function toAckResult(d: Record<string, any>): AckResult {
  const r: AckResult = { partition: d.partition, offset: d.offset, status: d.status, ok: d.status === "acked" };
  if (d.error) r.error = d.error;
  if (Array.isArray(d.produced)) r.produced = d.produced.map(toProduced);
  return r;
}

/**
 * @internal The wire form of one message of an ack's `produce`: a single
 * produce body. Throws TypeError for a message without a topic.
 */
export function stepMessageJson(m: StepMessage): Record<string, unknown> {
  if (!m || typeof m.topic !== "string" || !m.topic) throw new TypeError("onceq: a message an ack produces needs its topic");
  if (m.value === undefined) throw new TypeError(`onceq: a message for ${m.topic} has no value`);
  const env: Envelope = { ...m.envelope, ...defined({ idempotency_key: m.idempotencyKey, msg_id: m.msgId }) };
  const out: Record<string, unknown> = { topic: m.topic, value: valueText(m.value) };
  if (m.key !== undefined) out.key = m.key;
  if (Object.keys(env).length) out.envelope = env;
  return out;
}

/** A delivery's reference as the wire spells it; the fences only when set. */
function refJson(r: DeliveryRef): Record<string, unknown> {
  return defined({ partition: r.partition, offset: r.offset, attempts: r.attempts, fencing_token: r.fencingToken });
}

function ackItemJson(a: AckItem): Record<string, unknown> {
  const out: Record<string, unknown> = { ...refJson(a), ...defined({ result: a.result }) };
  if (a.produce !== undefined) out.produce = a.produce.map(stepMessageJson);
  return out;
}

function toProduceResult(d: Record<string, any>, topic: string, msgId: string | undefined): ProduceResult {
  const committed: ProduceResult["committed"] = {};
  for (const [g, c] of Object.entries<Record<string, any>>(d.committed ?? {})) {
    committed[g] = { committedAtMs: c.committed_at_ms, owner: c.owner, ...(c.result !== undefined ? { result: c.result } : {}) };
  }
  const status = d.status ?? "produced";
  return {
    status,
    alreadyCommitted: status === "already_committed",
    topic: d.topic ?? topic,
    ...(d.partition !== undefined ? { partition: d.partition } : {}),
    ...(d.offset !== undefined ? { offset: d.offset } : {}),
    duplicate: Boolean(d.duplicate),
    committed,
    ...(msgId !== undefined ? { msgId } : {}),
  };
}

/**
 * A client of one onceqd server. Safe to share: fetch pools kept-alive
 * connections. `https://` URLs use TLS (a private CA: NODE_EXTRA_CA_CERTS,
 * or pass your own `fetch`).
 *
 * Retries: 429 and 503 answers are retried up to `retries` times after the
 * server's `Retry-After` (at most `maxRetryWaitMs` each); so are network
 * errors, except on a produce sent with `dedup: false`. Every other error
 * is thrown at once as its class from errors.ts.
 */
export class Client {
  readonly url: string;
  readonly timeoutMs: number;
  retries: number;
  maxRetryWaitMs: number;
  private readonly base: string;
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;

  constructor(url = "http://127.0.0.1:8080", opts: ClientOptions = {}) {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`onceq: expected an http(s) URL, got ${url}`);
    this.url = url;
    this.base = url.replace(/\/+$/, "");
    this.timeoutMs = opts.timeoutMs ?? 30000;
    this.retries = opts.retries ?? 3;
    this.maxRetryWaitMs = opts.maxRetryWaitMs ?? 5000;
    this.fetch = opts.fetch ?? globalThis.fetch;
    this.headers = { "user-agent": `onceq-typescript/${VERSION}` };
    if (opts.token) this.headers["authorization"] = `Bearer ${opts.token}`;
  }

  // -- plumbing ---------------------------------------------------------------

  private async once(method: string, path: string, body: string | undefined, headers: Record<string, string>, timeoutMs: number, signal?: AbortSignal): Promise<Answer> {
    const timeout = AbortSignal.timeout(timeoutMs);
    const sig = signal ? AbortSignal.any([signal, timeout]) : timeout;
    try {
      const resp = await this.fetch(this.base + path, { method, headers, body: body ?? null, signal: sig });
      return { status: resp.status, headers: resp.headers, text: await resp.text() };
    } catch (e) {
      if (signal?.aborted) throw e; // the caller's own abort: not a transport fault
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      const what = timeout.aborted ? `timed out after ${timeoutMs} ms` : `${(e as Error).message}${cause ? `: ${cause.code ?? ""} ${cause.message ?? ""}` : ""}`;
      throw new TransportError(`${method} ${path}: ${what}`, e);
    }
  }

  /** @internal One request with the retry policy; resolves on 2xx. */
  protected async request(method: string, path: string, opts: RequestOptions = {}): Promise<Answer> {
    if (opts.query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(opts.query)) if (v !== undefined) q.set(k, String(v));
      path += "?" + q.toString();
    }
    const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const headers = { ...this.headers, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...opts.headers };
    const timeoutMs = this.timeoutMs + (opts.waitMs ?? 0);
    for (let attempt = 0; ; attempt++) {
      let answer: Answer;
      try {
        answer = await this.once(method, path, body, headers, timeoutMs, opts.signal);
      } catch (e) {
        if (!(e instanceof TransportError) || opts.retryNetwork === false || attempt >= this.retries) throw e;
        await sleep(this.backoff(attempt));
        continue;
      }
      if (answer.status < 300) return answer;
      const err = Client.error(answer);
      if (err instanceof Unavailable && attempt < this.retries && !opts.signal?.aborted) {
        await sleep(Math.min(Math.max(err.retryAfterMs, this.backoff(attempt)), this.maxRetryWaitMs));
        continue;
      }
      throw err;
    }
  }

  private backoff(attempt: number): number {
    return Math.min(50 * 2 ** attempt, 2000) * (0.5 + Math.random() / 2);
  }

  private static error(a: Answer): OnceqError {
    let code = "";
    let message = "";
    let retryAfterMs: number | undefined;
    try {
      const doc = JSON.parse(a.text || "{}");
      if (doc && typeof doc === "object") {
        code = String(doc.error ?? "");
        message = String(doc.message ?? "");
        if (Number.isInteger(doc.retry_after_ms)) retryAfterMs = doc.retry_after_ms;
      }
    } catch {
      message = a.text.slice(0, 200);
    }
    const ra = a.headers.get("retry-after");
    if (retryAfterMs === undefined && ra && /^\d+$/.test(ra)) retryAfterMs = Number(ra) * 1000;
    return makeError(message || `HTTP ${a.status}`, {
      code,
      status: a.status,
      requestId: a.headers.get("x-request-id") ?? undefined,
      retryAfterMs,
    });
  }

  private static json(a: Answer): any {
    return a.text ? JSON.parse(a.text) : undefined;
  }

  // -- health -------------------------------------------------------------------

  /** `GET /v1/healthz`; a 503 is `ok: false` with the `reason`, not an error. */
  async healthz(): Promise<Health> {
    const a = await this.once("GET", "/v1/healthz", undefined, this.headers, this.timeoutMs);
    const d = Client.json(a) ?? {};
    return { ok: a.status === 200, status: d.status ?? "", reason: d.reason ?? "" };
  }

  async version(): Promise<Version> {
    const d = Client.json(await this.request("GET", "/v1/version"));
    return { version: d.version ?? "", commit: d.commit ?? "", walEnabled: Boolean(d.wal_enabled) };
  }

  /** The server's OpenAPI 3.1 document. */
  async openapi(): Promise<Record<string, any>> {
    return Client.json(await this.request("GET", "/v1/openapi.json"));
  }

  /** `GET /metrics`: Prometheus text. */
  async metrics(): Promise<string> {
    return (await this.request("GET", "/metrics")).text;
  }

  // -- topics -------------------------------------------------------------------

  /**
   * `POST /v1/topics`; again with the same settings succeeds, with others
   * throws Conflict. `ordering: "key"`: one message per key leased at a time.
   */
  async createTopic(name: string, settings: TopicSettings = {}): Promise<TopicCreated> {
    const body: Record<string, unknown> = { name };
    for (const [k, v] of Object.entries(settings)) if (v !== undefined) body[snake(k)] = v;
    const d = Client.json(await this.request("POST", "/v1/topics", { body }));
    return { name: d.name, partitions: d.partitions, status: d.status ?? "created" };
  }

  async listTopics(): Promise<string[]> {
    return Client.json(await this.request("GET", "/v1/topics")).topics;
  }

  /** Settings and per-group counters; NotFound for an unknown topic. */
  async getTopic(name: string): Promise<TopicInfo> {
    const d = Client.json(await this.request("GET", "/v1/topics/" + encodeURIComponent(name)));
    const groups: Record<string, GroupCounters> = {};
    for (const [g, c] of Object.entries<Record<string, number>>(d.groups ?? {})) {
      groups[g] = {
        backlog: c.backlog ?? 0,
        inflight: c.inflight ?? 0,
        acked: c.acked ?? 0,
        autoAcked: c.auto_acked ?? 0,
        redelivered: c.redelivered ?? 0,
        deadLettered: c.dead_lettered ?? 0,
        superseded: c.superseded ?? 0,
      };
    }
    return { name: d.name, partitions: d.partitions, settings: camelKeys(d.settings ?? {}), groups };
  }

  async deleteTopic(name: string): Promise<void> {
    await this.request("DELETE", "/v1/topics/" + encodeURIComponent(name));
  }

  // -- produce ------------------------------------------------------------------

  /**
   * `POST /v1/produce` of one message. A value that is not a string is sent
   * as its JSON text. The call gets a dedup id (`msgId`, a random UUID
   * unless given) once and sends it on every retry after a network error
   * or a 503, so a retried produce is stored once. With `skipIfCommitted`,
   * a key already committed in every listed group stores nothing: the
   * result's `alreadyCommitted` is true, with each group's commit.
   */
  async produce(topic: string, value: unknown, opts: ProduceOptions = {}): Promise<ProduceResult> {
    const env: Envelope = {
      ...opts.envelope,
      ...defined({
        idempotency_key: opts.idempotencyKey,
        tenant_id: opts.tenantId,
        partition_override: opts.partition,
        delay_ms: opts.delayMs,
        key_ttl_ms: opts.keyTtlMs,
        headers: opts.headers,
      }),
    };
    let msgId: string | undefined;
    if (opts.dedup !== false) {
      msgId = opts.msgId ?? (env.msg_id as string | undefined) ?? randomUUID();
      env.msg_id = msgId;
    } else {
      msgId = env.msg_id as string | undefined;
    }
    const body: Record<string, unknown> = { topic, value: valueText(value) };
    if (opts.key !== undefined) body.key = opts.key;
    if (Object.keys(env).length) body.envelope = env;
    if (opts.skipIfCommitted?.length) body.skip_if_committed = opts.skipIfCommitted;
    const a = await this.request("POST", "/v1/produce", { body, retryNetwork: msgId !== undefined });
    return toProduceResult(Client.json(a), topic, msgId);
  }

  /** `POST /v1/produce` of 1..1000 messages, stored atomically, each with its own dedup id. */
  async produceBatch(topic: string, messages: Array<string | MessageInput>, opts: { skipIfCommitted?: string[]; dedup?: boolean } = {}): Promise<ProduceResult[]> {
    const ids: Array<string | undefined> = [];
    const items = messages.map((m) => {
      const msg: MessageInput = typeof m === "string" ? { value: m } : m;
      const env: Envelope = { ...msg.envelope, ...defined({ idempotency_key: msg.idempotencyKey, msg_id: msg.msgId }) };
      if (opts.dedup !== false && env.msg_id === undefined) env.msg_id = randomUUID();
      ids.push(env.msg_id as string | undefined);
      const item: Record<string, unknown> = { value: valueText(msg.value) };
      if (msg.key !== undefined) item.key = msg.key;
      if (Object.keys(env).length) item.envelope = env;
      return item;
    });
    const body: Record<string, unknown> = { topic, messages: items };
    if (opts.skipIfCommitted?.length) body.skip_if_committed = opts.skipIfCommitted;
    const d = Client.json(await this.request("POST", "/v1/produce", { body, retryNetwork: ids.every((i) => i !== undefined) }));
    return (d.results as Record<string, any>[]).map((r, i) => toProduceResult(r, d.topic ?? topic, ids[i]));
  }

  // -- consume ------------------------------------------------------------------

  /**
   * `POST /v1/consume` as a long-poll batch: up to `maxMessages`, waiting
   * up to `waitMs` for the first. `acks` are applied first, in the same
   * round trip; their results come back in `acks`. They cannot carry
   * `produce` (TypeError): ack those with `ack` or `ackBatch`.
   */
  async consume(topic: string, group: string, owner: string, opts: ConsumeOptions = {}): Promise<ConsumeResult> {
    if (opts.acks?.some((a) => a.produce !== undefined))
      throw new TypeError("onceq: acks carried on a consume cannot produce; send them with ack() or ackBatch()");
    const waitMs = opts.waitMs ?? 0;
    const body: Record<string, unknown> = {
      topic,
      group,
      owner,
      max_messages: opts.maxMessages ?? 1,
      wait_ms: waitMs,
      ...defined({ lease_ms: opts.leaseMs, deadline_ms: opts.deadlineMs }),
    };
    if (opts.acks?.length) body.acks = opts.acks.map(ackItemJson);
    const a = await this.request("POST", "/v1/consume", { body, waitMs, signal: opts.signal });
    const messages: Delivery[] = [];
    let acks: AckResult[] = [];
    for (const line of a.text.split("\n")) {
      if (!line.trim()) continue;
      const d = JSON.parse(line);
      if (Array.isArray(d.acks) && d.offset === undefined) acks = d.acks.map(toAckResult);
      else messages.push(toDelivery(d));
    }
    return { messages, acks };
  }

  /**
   * `GET /v1/consume` in stream mode (DriftQ's): yields deliveries as they
   * come until you `break` (or `signal` aborts). Each must still be acked.
   */
  async *stream(topic: string, group: string, owner: string, opts: { leaseMs?: number; signal?: AbortSignal } = {}): AsyncGenerator<Delivery> {
    const q = new URLSearchParams(defined({ topic, group, owner, lease_ms: opts.leaseMs?.toString() }) as Record<string, string>);
    const ctl = new AbortController();
    const sig = opts.signal ? AbortSignal.any([opts.signal, ctl.signal]) : ctl.signal;
    let resp: Response;
    try {
      resp = await this.fetch(`${this.base}/v1/consume?${q}`, { headers: this.headers, signal: sig });
    } catch (e) {
      if (opts.signal?.aborted) return;
      throw new TransportError(`GET /v1/consume: ${(e as Error).message}`, e);
    }
    if (resp.status >= 300) throw Client.error({ status: resp.status, headers: resp.headers, text: await resp.text() });
    const reader = resp.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    try {
      for (;;) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (e) {
          if (sig.aborted) return;
          throw new TransportError(`GET /v1/consume: ${(e as Error).message}`, e);
        }
        if (chunk.done) return;
        buf += chunk.value;
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.trim()) yield toDelivery(JSON.parse(line));
        }
      }
    } finally {
      ctl.abort();
    }
  }

  // -- ack / nack / extend --------------------------------------------------------

  /**
   * `POST /v1/ack`: the delivery is done; its idempotency key (if any) is
   * committed with `result`. Throws Fenced if you no longer hold it.
   *
   * `produce`: messages (at most 1000) stored in the same atomic step as
   * the ack, both or neither. Resolves to where each went, in order
   * (`pending` ones are delivered later by the broker's outbox); `[]`
   * without `produce`, and for a repeated ack whose message had no
   * idempotency key. A refused ack stores none of them: Fenced (409),
   * InvalidArgument (a bad message), NotFound (unknown target topic),
   * Forbidden, ResourceExhausted (a target's backlog).
   */
  async ack(topic: string, group: string, owner: string, ref: DeliveryRef & { result?: Json; produce?: StepMessage[] }): Promise<Produced[]> {
    const a = await this.request("POST", "/v1/ack", { body: { topic, group, owner, ...ackItemJson(ref) } });
    const d = a.status === 204 ? undefined : Client.json(a);
    return Array.isArray(d?.produced) ? d.produced.map(toProduced) : [];
  }

  /** `POST /v1/ack` with `acks`: each acked on its own, with its own status (and `produced` for an item with `produce`). */
  async ackBatch(topic: string, group: string, owner: string, acks: AckItem[]): Promise<AckResult[]> {
    const a = await this.request("POST", "/v1/ack", { body: { topic, group, owner, acks: acks.map(ackItemJson) } });
    return (Client.json(a).results as Record<string, any>[]).map(toAckResult);
  }

  /** `POST /v1/nack`: redelivered after `delayMs` (default: the topic's backoff); `reason` becomes `lastError`. */
  async nack(topic: string, group: string, owner: string, ref: DeliveryRef & { reason?: string; delayMs?: number }): Promise<void> {
    const body = { topic, group, owner, ...refJson(ref), ...defined({ reason: ref.reason, delay_ms: ref.delayMs }) };
    await this.request("POST", "/v1/nack", { body });
  }

  /** `POST /v1/extend`: the lease ends `leaseMs` from now; returns the new `leaseExpiresAtMs`. Throws Fenced if lost. */
  async extend(topic: string, group: string, owner: string, ref: DeliveryRef & { leaseMs: number }): Promise<number> {
    const body = { topic, group, owner, ...refJson(ref), lease_ms: ref.leaseMs };
    return Client.json(await this.request("POST", "/v1/extend", { body })).lease_expires_at_ms;
  }

  // -- keys, DLQ ------------------------------------------------------------------

  /** `GET /v1/keys`; with `waitMs`, waits up to that long for a commit. */
  async getKey(topic: string, group: string, key: string, opts: { tenantId?: string; waitMs?: number } = {}): Promise<KeyState> {
    const a = await this.request("GET", "/v1/keys", {
      query: { topic, group, key, tenant_id: opts.tenantId, wait_ms: opts.waitMs },
      waitMs: opts.waitMs ?? 0,
    });
    return camelKeys(Client.json(a)) as unknown as KeyState;
  }

  /** `GET /v1/keys/history` (topics created with `keyHistory: true`). */
  async keyHistory(topic: string, group: string, key: string, opts: { tenantId?: string } = {}): Promise<KeyEvent[]> {
    const a = await this.request("GET", "/v1/keys/history", { query: { topic, group, key, tenant_id: opts.tenantId } });
    return (Client.json(a).events as Record<string, unknown>[]).map((e) => camelKeys(e) as unknown as KeyEvent);
  }

  /** `POST /v1/dlq/redrive`: moves messages of `dlq.<topic>` back; returns how many. */
  async redrive(topic: string, opts: { maxMessages?: number } = {}): Promise<number> {
    const a = await this.request("POST", "/v1/dlq/redrive", { body: defined({ topic, max_messages: opts.maxMessages }) });
    return Client.json(a).moved;
  }
}
