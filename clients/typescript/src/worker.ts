/**
 * `Worker`: consume, run an async handler, ack with its result.
 *
 * - One poller long-polls `POST /v1/consume` for as many messages as it has
 *   free handler slots (`concurrency`), carrying the acks of the handlers
 *   that finished since the last poll. A handler that finishes while the
 *   poller is inside a long poll acks at once with `POST /v1/ack` instead.
 * - While a handler runs, its lease is extended every third of the lease,
 *   fenced on the delivery's token. An extend answered 409 means another
 *   consumer has the message now: `job.leaseLost` becomes true and
 *   `job.signal` aborts.
 * - The handler's resolved value is acked as the committed `result`
 *   (`undefined` commits none). A throw nacks with its message as the
 *   `reason` and the topic's backoff; `Retry` nacks with its delay; `Fail`
 *   gives up for good (acked with `{failed: reason}` as the result).
 * - Every ack, nack and extend carries the delivery's fencing token; an ack
 *   refused because another delivery took over is reported (a warning,
 *   `stats.stale`, `onStale(job, error)`), never retried.
 * - Workflow steps: a handler returns `new Complete(result, { produce })`
 *   and/or stages messages with `job.produce(...)`; the ack of that job
 *   stores them with it, atomically, on its own `POST /v1/ack` (acks carried
 *   on a consume cannot produce; jobs without messages keep the path
 *   above). A refused ack stores none of them, and they are never sent
 *   again on their own: a 409 is reported as stale; a refusal of the
 *   messages (400, 403, 404, 413, a 429 past the retries) nacks the job
 *   with it as the reason. A throw, `Retry` or `Fail` sends none of them.
 * - `stop()`, the `signal` option aborting, SIGTERM or SIGINT stop taking
 *   work: the poll in flight ends (at most `waitMs`) and what it brought is
 *   released; running handlers get `drainTimeoutMs` to finish and ack; those
 *   still running are then released (nacked without delay) and their late
 *   results dropped. Then `run()` resolves. A second SIGTERM/SIGINT stops at
 *   once: the poll in flight is cut (what it leased comes back when the
 *   lease ends) and running jobs are released.
 */

import { hostname } from "node:os";

import { type Client, stepMessageJson } from "./client.js";
import {
  Fenced,
  Forbidden,
  InvalidArgument,
  NotFound,
  OnceqError,
  PayloadTooLarge,
  ResourceExhausted,
  Unauthorized,
} from "./errors.js";
import type { AckItem, Delivery, DeliveryRef, Envelope, Json, MessageInput, StepMessage } from "./types.js";

/** Throw (or return) from a handler to nack with an explicit delay. */
export class Retry extends Error {
  readonly delayMs: number | undefined;
  readonly reason: string;
  constructor(delayMs?: number, reason = "retry") {
    super(reason);
    this.name = "Retry";
    this.delayMs = delayMs;
    this.reason = reason;
  }
}

/** Throw (or return) from a handler to give up for good: acked with `{failed: reason}`, never retried. */
export class Fail extends Error {
  readonly reason: string;
  constructor(reason: string) {
    super(reason);
    this.name = "Fail";
    this.reason = reason;
  }
}

/** Thrown by `job.check()` once another consumer holds the message. */
export class LeaseLost extends Error {
  constructor(message = "lease lost") {
    super(message);
    this.name = "LeaseLost";
  }
}

/**
 * Return from a handler to ack with `result` and store `produce` (the
 * workflow's next messages) in the same atomic step:
 *
 * ```ts
 * return new Complete({ chargeId }, { produce: [{ topic: "receipts", value: { chargeId }, idempotencyKey: `receipt:${id}` }] });
 * ```
 *
 * They are stored with the ack or not at all (a refused ack: none); they
 * come after the messages staged with `job.produce`. `result` undefined
 * acks without a result.
 */
export class Complete {
  readonly result: unknown;
  readonly produce: StepMessage[];
  constructor(result?: unknown, opts: { produce?: StepMessage[] } = {}) {
    this.result = result;
    this.produce = [...(opts.produce ?? [])];
  }
}

/**
 * One delivery handed to a handler. `stepId` is stable across redeliveries
 * of the message (the envelope's `step_id`, else
 * `<topic>/<group>/<partition>/<offset>`): use it, or `idempotencyKey`, as
 * the idempotency key of your side effects. Pass `fencingToken` to your own
 * database writes (docs/CLIENTS.md).
 */
export class Job {
  readonly delivery: Delivery;
  readonly group: string;
  readonly leaseMs: number;
  leaseExpiresAtMs: number;
  private readonly ctl = new AbortController();
  private lost = false;
  private stoppingFlag = false;
  /** @internal */ done = false;
  /** @internal */ released = false;
  private readonly stagedMessages: StepMessage[] = [];

  constructor(delivery: Delivery, group: string, leaseMs: number) {
    this.delivery = delivery;
    this.group = group;
    this.leaseMs = leaseMs;
    this.leaseExpiresAtMs = delivery.leaseExpiresAtMs;
  }

  get topic(): string { return this.delivery.topic; }
  get partition(): number { return this.delivery.partition; }
  get offset(): number { return this.delivery.offset; }
  get attempts(): number { return this.delivery.attempts; }
  get key(): string { return this.delivery.key; }
  get value(): string { return this.delivery.value; }
  get envelope(): Envelope { return this.delivery.envelope; }
  get lastError(): string { return this.delivery.lastError; }
  get fencingToken(): number { return this.delivery.fencingToken; }
  /** What ack, nack and extend name this delivery by: partition, offset and both fences. */
  get ref(): DeliveryRef {
    return { partition: this.partition, offset: this.offset, attempts: this.attempts, fencingToken: this.fencingToken };
  }
  get idempotencyKey(): string | undefined { return this.delivery.envelope.idempotency_key as string | undefined; }
  get stepId(): string {
    const d = this.delivery;
    return (d.envelope.step_id as string | undefined) || `${d.topic}/${this.group}/${d.partition}/${d.offset}`;
  }
  /** True once an extend was refused: another consumer holds the message. Stop. */
  get leaseLost(): boolean { return this.lost; }
  /** True once the worker is shutting down: finish soon. */
  get stopping(): boolean { return this.stoppingFlag; }
  /** Aborts when the lease is lost or the worker gives the job back: pass it to your I/O. */
  get signal(): AbortSignal { return this.ctl.signal; }

  /** The value parsed as JSON. */
  json<T = unknown>(): T { return JSON.parse(this.delivery.value) as T; }

  /**
   * Stages a message to store with this job's ack, in the same atomic step:
   * `job.produce("emails", { to }, { idempotencyKey })` or
   * `job.produce({ topic: "emails", value: { to } })`. Nothing is sent now;
   * the ack sends every staged message (then those of a returned
   * `Complete`). If the job is nacked, fails, or its ack is refused, none
   * is stored. Throws TypeError for a message without a topic.
   */
  produce(message: StepMessage): void;
  produce(topic: string, value: unknown, opts?: Omit<MessageInput, "value">): void;
  produce(topicOrMessage: string | StepMessage, value?: unknown, opts: Omit<MessageInput, "value"> = {}): void {
    const m: StepMessage = typeof topicOrMessage === "string" ? { ...opts, topic: topicOrMessage, value } : topicOrMessage;
    stepMessageJson(m); // a bad message fails here, in the handler
    this.stagedMessages.push(m);
  }

  /** The messages staged with `produce` so far (a copy). */
  get staged(): StepMessage[] { return [...this.stagedMessages]; }

  /** Throws LeaseLost if `leaseLost`; call it between steps. */
  check(): void {
    if (this.lost) throw new LeaseLost(`${this.topic}/${this.partition}/${this.offset}: lease lost`);
  }

  /** @internal */ lose(): void {
    this.lost = true;
    this.ctl.abort(new LeaseLost());
  }
  /** @internal */ markStopping(): void { this.stoppingFlag = true; }
  /** @internal */ abort(reason: string): void { this.ctl.abort(new Error(reason)); }

  toString(): string {
    return `Job(${this.topic}/${this.partition}/${this.offset}, attempts=${this.attempts}, token=${this.fencingToken}, key=${JSON.stringify(this.idempotencyKey ?? null)})`;
  }
}

export type Handler = (job: Job) => unknown | Promise<unknown>;

export interface Logger {
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}

const defaultLogger: Logger = {
  info: () => {},
  warn: (m) => console.warn(m),
  error: (m) => console.error(m),
};

export interface WorkerStats {
  received: number;
  acked: number;
  nacked: number;
  failed: number;
  extended: number;
  leaseLost: number;
  stale: number;
  released: number;
  /** Messages stored with acks (`Complete`, `job.produce`). */
  produced: number;
}

export interface WorkerOptions {
  /** This consumer's name; default `<hostname>-<pid>`. */
  owner?: string;
  /** Handlers running at once. Default 1. */
  concurrency?: number;
  /** Default: the topic's (read from GET /v1/topics/{topic}, else from the first delivery). */
  leaseMs?: number;
  /** The long poll; also bounds how long a stop waits for the poll in flight. Default 5000. */
  waitMs?: number;
  /** How long a stop lets running handlers finish. Default 30000. */
  drainTimeoutMs?: number;
  /** false: leases are not extended (the lease is the handler's time limit). */
  autoExtend?: boolean;
  /** Stop on SIGTERM and SIGINT while `run()` runs. Default true. */
  handleSignals?: boolean;
  /** Aborting it stops the worker (gracefully, as `stop()`). */
  signal?: AbortSignal;
  /** Called when an ack or nack is refused because another delivery took over. */
  onStale?: (job: Job, err: OnceqError) => void;
  handler?: Handler;
  logger?: Logger;
}

export function defaultOwner(): string {
  return `${hostname()}-${process.pid}`;
}

interface Pending {
  job: Job;
  item: AckItem;
}

/** Runs `handler(job)` for each message of `topic` in `group`. */
export class Worker {
  readonly client: Client;
  readonly topic: string;
  readonly group: string;
  readonly owner: string;
  readonly concurrency: number;
  leaseMs: number | undefined;
  readonly waitMs: number;
  readonly drainTimeoutMs: number;
  readonly autoExtend: boolean;
  readonly stats: WorkerStats = { received: 0, acked: 0, nacked: 0, failed: 0, extended: 0, leaseLost: 0, stale: 0, released: 0, produced: 0 };
  private fn: Handler | undefined;
  private readonly opts: WorkerOptions;
  private readonly log: Logger;
  private free: number;
  private readonly inflight = new Set<Job>();
  private pending: Pending[] = [];
  private polling = false;
  private pollerDone = false;
  private stopped = false;
  private signals = 0;
  private started = false;
  private waiters: Array<() => void> = [];
  private readonly pollAbort = new AbortController();
  private readonly timers = new Map<Job, NodeJS.Timeout>();

  constructor(client: Client, topic: string, group: string, opts: WorkerOptions = {}) {
    if ((opts.concurrency ?? 1) < 1) throw new RangeError("concurrency must be >= 1");
    this.client = client;
    this.topic = topic;
    this.group = group;
    this.opts = opts;
    this.owner = opts.owner ?? defaultOwner();
    this.concurrency = opts.concurrency ?? 1;
    this.free = this.concurrency;
    this.leaseMs = opts.leaseMs;
    this.waitMs = opts.waitMs ?? 5000;
    this.drainTimeoutMs = opts.drainTimeoutMs ?? 30000;
    this.autoExtend = opts.autoExtend ?? true;
    this.fn = opts.handler;
    this.log = opts.logger ?? defaultLogger;
  }

  /** Registers the handler: `worker.handler(async (job) => ...)`. */
  handler<H extends Handler>(fn: H): H {
    this.fn = fn;
    return fn;
  }

  /** Stops taking new work; `run()` drains and resolves. Idempotent. */
  stop(): void {
    this.stopped = true;
    this.wake();
  }

  get stopping(): boolean {
    return this.stopped;
  }

  /**
   * Processes messages until `stop()` (or the `signal`, SIGTERM, SIGINT),
   * then drains and resolves. Rejects with the error if the server refuses
   * the worker for good (unknown topic, bad token).
   */
  async run(): Promise<void> {
    if (!this.fn) throw new Error("no handler: call worker.handler(fn) first");
    if (this.started) throw new Error("Worker.run() may be called once");
    this.started = true;
    const onSignal = (sig: NodeJS.Signals) => {
      this.signals++;
      if (!this.stopped)
        this.log.info(
          `onceq worker ${this.owner}: ${sig}: stopping (the poll in flight ends within ${this.waitMs} ms, ` +
            `running jobs get ${this.drainTimeoutMs} ms; a second signal stops at once)`,
        );
      // A second one means "now": cut the poll in flight (what it leased
      // comes back when the lease ends); the drain releases running jobs.
      if (this.signals >= 2) this.pollAbort.abort();
      this.stop();
    };
    const handleSignals = this.opts.handleSignals ?? true;
    if (handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const onAbort = () => this.stop();
    this.opts.signal?.addEventListener("abort", onAbort, { once: true });
    if (this.opts.signal?.aborted) this.stop();
    let fatal: unknown;
    try {
      await this.resolveLease();
      await this.pollLoop();
    } catch (e) {
      fatal = e;
      this.stopped = true;
    } finally {
      await this.drain();
      this.opts.signal?.removeEventListener("abort", onAbort);
      if (handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    if (fatal !== undefined) throw fatal;
  }

  // -- wake-ups -----------------------------------------------------------------

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const r of w) r();
  }

  private waitWake(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(t);
        self.waiters = self.waiters.filter((w) => w !== done);
        resolve();
      }
      this.waiters.push(done);
    });
  }

  // -- set-up -------------------------------------------------------------------

  private async resolveLease(): Promise<void> {
    if (this.leaseMs !== undefined) return;
    try {
      const l = (await this.client.getTopic(this.topic)).settings.leaseMs;
      if (typeof l === "number") this.leaseMs = l;
    } catch {
      // Without the admin scope the first delivery tells (leaseFor).
    }
  }

  private leaseFor(d: Delivery, recvMs: number): number {
    // Without the topic's settings: what is left of the lease on arrival
    // (an underestimate, so extends come early rather than late).
    return this.leaseMs ?? Math.max(100, d.leaseExpiresAtMs - recvMs);
  }

  // -- the poller ---------------------------------------------------------------

  private async pollLoop(): Promise<void> {
    let errors = 0;
    while (!this.stopped) {
      while (this.free === 0 && !this.stopped) await this.waitWake(1000);
      if (this.stopped) break;
      const carried = this.pending.splice(0);
      const n = this.free;
      this.polling = true;
      let batch;
      try {
        batch = await this.client.consume(this.topic, this.group, this.owner, {
          maxMessages: n,
          waitMs: this.waitMs,
          ...(this.leaseMs !== undefined ? { leaseMs: this.leaseMs } : {}),
          ...(carried.length ? { acks: carried.map((c) => c.item) } : {}),
          signal: this.pollAbort.signal,
        });
      } catch (e) {
        this.polling = false;
        this.pending.unshift(...carried);
        if (this.pollAbort.signal.aborted) break;
        if (e instanceof InvalidArgument || e instanceof Unauthorized || e instanceof Forbidden || e instanceof NotFound) throw e;
        if (!(e instanceof OnceqError)) throw e;
        errors++;
        const delay = Math.min(100 * 2 ** errors, 5000);
        this.log.warn(`onceq worker ${this.owner}: consume failed (${e.message}); retrying in ${delay} ms`);
        await this.waitWake(delay);
        continue;
      }
      this.polling = false;
      errors = 0;
      // The leases started just before the answer: timing extends from its
      // arrival errs on the early side.
      const recvMs = Date.now();
      batch.acks.forEach((res, i) => {
        const c = carried[i];
        if (c) this.ackOutcome(c.job, res.ok, res.error ?? "");
      });
      const jobs = batch.messages.map((d) => new Job(d, this.group, this.leaseFor(d, recvMs)));
      for (const job of jobs) {
        this.free--;
        this.inflight.add(job);
      }
      this.stats.received += jobs.length;
      if (this.stopped) {
        await Promise.all(jobs.map((j) => this.release(j, "worker stopping")));
        continue;
      }
      for (const job of jobs) {
        if (this.autoExtend) this.scheduleExtend(job, job.leaseMs / 3 - (Date.now() - recvMs));
        this.runOne(job).catch((e) => this.log.error(`onceq worker ${this.owner}: ${job}: ${e}`));
      }
    }
  }

  // -- handlers -----------------------------------------------------------------

  private async runOne(job: Job): Promise<void> {
    let result: Json | undefined;
    let produce: StepMessage[];
    try {
      let out = await this.fn!(job);
      if (out instanceof Retry || out instanceof Fail) throw out;
      produce = job.staged;
      if (out instanceof Complete) {
        produce.push(...out.produce);
        out = out.result;
      }
      result = out === undefined ? undefined : (out as Json);
      if (result !== undefined) JSON.stringify(result); // not JSON: nack now
      produce.forEach(stepMessageJson); // the same for the messages (no topic, a value that is not JSON)
    } catch (e) {
      if (e instanceof Retry) return this.finishNack(job, e.reason, e.delayMs);
      if (e instanceof Fail) {
        this.stats.failed++;
        this.log.warn(`onceq worker ${this.owner}: ${job} failed for good: ${e.reason}`);
        return this.finishAck(job, { failed: e.reason });
      }
      const reason = (e instanceof Error ? e.message || e.name : String(e)).slice(0, 1000);
      this.log.warn(`onceq worker ${this.owner}: ${job} threw (nacked): ${e instanceof Error && e.stack ? e.stack : reason}`);
      return this.finishNack(job, reason, undefined);
    }
    return this.finishAck(job, result, produce);
  }

  private async finishAck(job: Job, result: Json | undefined, produce: StepMessage[] = []): Promise<void> {
    this.stopExtending(job);
    if (job.released) return;
    job.done = true;
    this.free++;
    const item: AckItem = { ...job.ref };
    if (result !== undefined) item.result = result;
    // An ack with messages goes on its own POST /v1/ack: the acks carried
    // on a consume cannot produce.
    if (produce.length) {
      item.produce = produce;
      this.wake();
      return this.ackStep(job, item);
    }
    if (!this.polling && !this.pollerDone) {
      this.inflight.delete(job);
      this.pending.push({ job, item }); // carried on the next consume
      this.wake();
      return;
    }
    this.wake();
    try {
      const [res] = await this.client.ackBatch(this.topic, this.group, this.owner, [item]);
      this.ackOutcome(job, res!.ok, res!.error ?? "");
    } catch (e) {
      if (!(e instanceof OnceqError)) throw e;
      this.ackOutcome(job, false, e.code, e);
    } finally {
      this.inflight.delete(job); // only now: a drain waits for this ack too
      this.wake();
    }
  }

  /**
   * Acks `job` with its messages: both are stored, or neither. The messages
   * are never sent again on their own: a refused ack is reported (409) or
   * nacked (a refusal of the messages), and the redelivered job produces
   * them again.
   */
  private async ackStep(job: Job, item: AckItem): Promise<void> {
    const n = item.produce!.length;
    try {
      await this.client.ack(this.topic, this.group, this.owner, item);
      this.stats.acked++;
      this.stats.produced += n;
    } catch (e) {
      if (!(e instanceof OnceqError)) throw e;
      if (
        e instanceof InvalidArgument ||
        e instanceof Forbidden ||
        e instanceof NotFound ||
        e instanceof PayloadTooLarge ||
        e instanceof ResourceExhausted
      ) {
        // Nothing was stored. Waiting for the lease to end would only delay
        // the same refusal: nack, so the topic's backoff and max_attempts
        // (then the DLQ) apply, with the reason to read.
        this.log.warn(`onceq worker ${this.owner}: ack of ${job} with ${n} messages refused (${e.code}: ${e.message}); nacking it`);
        try {
          await this.client.nack(this.topic, this.group, this.owner, { ...job.ref, reason: `ack refused: ${e.code}: ${e.message}`.slice(0, 1000) });
          this.stats.nacked++;
        } catch (ne) {
          if (ne instanceof Fenced) this.reportStale(job, "nack", ne);
          else if (ne instanceof OnceqError) this.log.error(`onceq worker ${this.owner}: nack of ${job} failed: ${ne.message} (redelivered when its lease ends)`);
          else throw ne;
        }
      } else {
        this.ackOutcome(job, false, e.code, e);
      }
    } finally {
      this.inflight.delete(job); // only now: a drain waits for this ack too
      this.wake();
    }
  }

  private async finishNack(job: Job, reason: string, delayMs: number | undefined): Promise<void> {
    this.stopExtending(job);
    if (job.released) return;
    job.done = true;
    try {
      await this.client.nack(this.topic, this.group, this.owner, {
        ...job.ref,
        reason,
        ...(delayMs !== undefined ? { delayMs } : {}),
      });
      this.stats.nacked++;
    } catch (e) {
      if (e instanceof Fenced) this.reportStale(job, "nack", e);
      else if (e instanceof OnceqError) this.log.error(`onceq worker ${this.owner}: nack of ${job} failed: ${e.message} (redelivered when its lease ends)`);
      else throw e;
    } finally {
      this.inflight.delete(job);
      this.free++;
      this.wake();
    }
  }

  private ackOutcome(job: Job, ok: boolean, code: string, err?: OnceqError): void {
    if (ok) this.stats.acked++;
    else if (code === "FAILED_PRECONDITION")
      this.reportStale(job, "ack", err ?? new Fenced("ack refused: the delivery is held by another consumer now", { code, status: 409 }));
    else this.log.error(`onceq worker ${this.owner}: ack of ${job} failed: ${err?.message ?? code} (redelivered when its lease ends)`);
  }

  private reportStale(job: Job, what: string, err: OnceqError): void {
    this.stats.stale++;
    job.lose();
    this.log.warn(
      `onceq worker ${this.owner}: ${what} of ${job} refused (${err.code}: ${err.message}): another delivery holds the message now; ` +
        "the work may have run twice, the first commit's result stands",
    );
    try {
      this.opts.onStale?.(job, err);
    } catch (e) {
      this.log.error(`onceq worker: onStale threw: ${e}`);
    }
  }

  private async release(job: Job, reason: string): Promise<void> {
    this.stopExtending(job);
    if (job.done || job.released) return;
    job.released = true;
    job.markStopping();
    job.abort(reason);
    try {
      await this.client.nack(this.topic, this.group, this.owner, { ...job.ref, reason, delayMs: 0 });
      this.stats.released++;
    } catch (e) {
      this.log.warn(`onceq worker ${this.owner}: release of ${job} failed: ${(e as Error).message}`);
    }
    this.inflight.delete(job);
    this.free++;
    this.wake();
  }

  // -- leases -------------------------------------------------------------------

  private scheduleExtend(job: Job, inMs: number): void {
    const t = setTimeout(() => void this.extendOnce(job), Math.max(0, inMs));
    this.timers.set(job, t);
  }

  private stopExtending(job: Job): void {
    const t = this.timers.get(job);
    if (t) clearTimeout(t);
    this.timers.delete(job);
  }

  private async extendOnce(job: Job): Promise<void> {
    if (!this.timers.has(job)) return;
    const started = Date.now();
    let next = job.leaseMs / 3;
    try {
      job.leaseExpiresAtMs = await this.client.extend(this.topic, this.group, this.owner, { ...job.ref, leaseMs: job.leaseMs });
      this.stats.extended++;
    } catch (e) {
      if (e instanceof Fenced || e instanceof NotFound) {
        if (this.timers.has(job)) {
          this.timers.delete(job);
          this.stats.leaseLost++;
          job.lose();
          this.log.warn(`onceq worker ${this.owner}: extend of ${job} refused (${e.message}): lease lost`);
        }
        return;
      }
      next = job.leaseMs / 6; // transient: again sooner, before the lease can run out
      this.log.warn(`onceq worker ${this.owner}: extend of ${job} failed (${(e as Error).message}); retrying`);
    }
    if (this.timers.has(job)) this.scheduleExtend(job, next - (Date.now() - started));
  }

  // -- stopping -----------------------------------------------------------------

  private async drain(): Promise<void> {
    this.pollerDone = true;
    const carried = this.pending.splice(0);
    for (const job of this.inflight) job.markStopping();
    if (carried.length) {
      try {
        const results = await this.client.ackBatch(this.topic, this.group, this.owner, carried.map((c) => c.item));
        results.forEach((res, i) => this.ackOutcome(carried[i]!.job, res.ok, res.error ?? ""));
      } catch (e) {
        for (const c of carried) this.ackOutcome(c.job, false, (e as OnceqError).code ?? "", e as OnceqError);
      }
    }
    const deadline = Date.now() + this.drainTimeoutMs;
    const signalsAtStart = Math.max(this.signals, 1);
    while (this.inflight.size && Date.now() < deadline && this.signals <= signalsAtStart) {
      await this.waitWake(Math.min(100, deadline - Date.now()));
    }
    for (const job of [...this.inflight]) {
      this.log.warn(`onceq worker ${this.owner}: ${job} still running after ${this.drainTimeoutMs} ms: releasing it`);
      await this.release(job, "worker stopped before the handler finished");
    }
    for (const job of [...this.timers.keys()]) this.stopExtending(job);
  }
}
