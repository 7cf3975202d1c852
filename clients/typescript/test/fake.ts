/** A tiny in-process fake of onceqd's HTTP API, for unit tests of request
 * encoding, answer decoding and the worker's routing: it records every
 * request and answers from a script. It knows nothing of leases or keys. */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { sleep } from "./support.js";

export type Answer = [status: number, doc: unknown];

export class FakeBroker {
  /** `(method, path, body)` of every request, in order. */
  readonly requests: Array<{ method: string; path: string; body: any }> = [];
  /** What the next consumes hand out, in order (see `delivery`). */
  deliveries: Array<Record<string, any>> = [];
  /** The answer to a POST /v1/ack; default: `defaultAck`. */
  onAck: ((body: any) => Answer) | undefined;
  url = "";
  private offset = 100;
  private readonly server: Server;

  private constructor() {
    this.server = createServer((req, res) => void this.handle(req, res));
  }

  static async start(): Promise<FakeBroker> {
    const f = new FakeBroker();
    await new Promise<void>((r) => f.server.listen(0, "127.0.0.1", r));
    f.url = `http://127.0.0.1:${(f.server.address() as AddressInfo).port}`;
    return f;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  /** Queues one delivery for the next consume and returns it. */
  delivery(topic: string, value = "v", opts: { key?: string; envelope?: Record<string, unknown> } = {}): Record<string, any> {
    this.offset++;
    const d = {
      topic,
      partition: 0,
      offset: this.offset,
      attempts: 1,
      key: opts.key ?? "",
      value,
      last_error: "",
      envelope: opts.envelope ?? {},
      lease_expires_at_ms: Date.now() + 30000,
      fencing_token: this.offset + 1000,
    };
    this.deliveries.push(d);
    return d;
  }

  bodies(path: string): any[] {
    return this.requests.filter((r) => r.path.split("?")[0] === path).map((r) => r.body);
  }

  static producedFor(messages: Array<{ topic: string }>): unknown[] {
    return messages.map((m, i) => ({ topic: m.topic, partition: 0, offset: i, duplicate: false }));
  }

  defaultAck(body: any): Answer {
    if (Array.isArray(body.acks)) {
      return [200, {
        results: body.acks.map((a: any) => ({
          partition: a.partition,
          offset: a.offset,
          status: "acked",
          ...(a.produce ? { produced: FakeBroker.producedFor(a.produce) } : {}),
        })),
      }];
    }
    if (body.produce) return [200, { status: "acked", produced: FakeBroker.producedFor(body.produce) }];
    return [204, undefined];
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = raw ? JSON.parse(raw) : undefined;
    const path = req.url ?? "";
    this.requests.push({ method: req.method ?? "", path, body });
    const [status, doc] = await this.route(req.method ?? "", path, body);
    if (status === 204) {
      res.writeHead(204).end();
      return;
    }
    const text = typeof doc === "string" ? doc : JSON.stringify(doc);
    res.writeHead(status, { "content-type": typeof doc === "string" ? "application/x-ndjson" : "application/json" }).end(text);
  }

  private async route(method: string, path: string, body: any): Promise<Answer> {
    if (method === "GET" && path.startsWith("/v1/topics/")) {
      return [200, { name: path.slice(11), partitions: 1, settings: { lease_ms: 30000 }, groups: {} }];
    }
    if (path === "/v1/consume") return this.consume(body);
    if (path === "/v1/ack") return this.onAck ? this.onAck(body) : this.defaultAck(body);
    if (path === "/v1/nack") return [204, undefined];
    if (path === "/v1/extend") return [200, { lease_expires_at_ms: Date.now() + 30000 }];
    return [404, { error: "NOT_FOUND", message: "fake: no such path" }];
  }

  private async consume(body: any): Promise<Answer> {
    const lines: unknown[] = [];
    if (body.acks?.length) {
      lines.push({ acks: body.acks.map((a: any) => ({ partition: a.partition, offset: a.offset, status: "acked" })) });
    }
    const got = this.deliveries.splice(0, body.max_messages ?? 1);
    if (!got.length && !lines.length) await sleep(Math.min(body.wait_ms ?? 0, 50)); // a short long poll
    lines.push(...got);
    return [200, lines.map((l) => JSON.stringify(l) + "\n").join("")];
  }
}
