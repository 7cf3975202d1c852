/** produce() keeps one dedup id across its retries: a produce retried after
 * a connection error or a 503 is stored once. A proxy in front of the real
 * server breaks the connection or answers 503 on cue. */

import assert from "node:assert/strict";
import { createServer, request, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, beforeEach, describe, it } from "node:test";

import * as onceq from "../src/index.js";
import { Client } from "../src/index.js";
import { type Server, startServer, unique } from "./support.js";

type Action = "pass" | "drop" | "503-after" | "503";

class FaultyProxy {
  readonly bodies: any[] = [];
  readonly http: HttpServer;
  url = "";

  constructor(upstreamPort: number, readonly plan: Action[]) {
    this.http = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks);
        let action: Action = "pass";
        if (req.url === "/v1/produce") {
          this.bodies.push(JSON.parse(body.toString()));
          action = this.plan.shift() ?? "pass";
        }
        const answer503 = (msg: string) => {
          res.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
          res.end(JSON.stringify({ error: "UNAVAILABLE", message: msg, retry_after_ms: 200 }));
        };
        if (action === "503") return answer503("test");
        const headers = { ...req.headers };
        delete headers.host;
        delete headers.connection;
        const up = request({ host: "127.0.0.1", port: upstreamPort, method: req.method, path: req.url, headers }, (ur) => {
          const out: Buffer[] = [];
          ur.on("data", (c) => out.push(c));
          ur.on("end", () => {
            if (action === "drop") return req.socket.destroy();
            if (action === "503-after") return answer503("fsync failed");
            res.writeHead(ur.statusCode ?? 500, ur.headers);
            res.end(Buffer.concat(out));
          });
        });
        up.end(body);
      });
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.http.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.http.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.http.closeAllConnections();
    await new Promise((r) => this.http.close(r));
  }
}

describe("produce retries", () => {
  let server: Server;
  let direct: Client;
  let topic: string;
  const proxies: FaultyProxy[] = [];
  before(async () => {
    server = await startServer();
    direct = new Client(server.url);
  });
  after(async () => {
    for (const p of proxies) await p.close();
    await server.stop();
  });
  beforeEach(async () => {
    topic = unique("retry");
    await direct.createTopic(topic);
  });

  async function proxy(plan: Action[]): Promise<[FaultyProxy, Client]> {
    const p = new FaultyProxy(server.port, plan);
    await p.start();
    proxies.push(p);
    return [p, new Client(p.url, { retries: 4 })];
  }

  const stored = async () =>
    (await direct.consume(topic, "check", "c", { maxMessages: 100, waitMs: 200 })).messages.map((m) => m.value);

  it("a connection dropped after the store is retried and stored once", async () => {
    const [p, c] = await proxy(["drop", "drop", "pass"]);
    const r = await c.produce(topic, "pay order 1", { idempotencyKey: "charge:1" });
    assert.equal(p.bodies.length, 3);
    assert.deepEqual([...new Set(p.bodies.map((b) => b.envelope.msg_id))], [r.msgId]);
    assert.equal(r.duplicate, true);
    assert.deepEqual(await stored(), ["pay order 1"]);
  });

  it("a 503 after the store is retried after Retry-After and stored once", async () => {
    const [p, c] = await proxy(["503-after", "pass"]);
    const t0 = Date.now();
    const r = await c.produce(topic, "x");
    assert.ok(Date.now() - t0 >= 180);
    assert.equal(new Set(p.bodies.map((b) => b.envelope.msg_id)).size, 1);
    assert.equal(r.duplicate, true);
    assert.deepEqual(await stored(), ["x"]);
  });

  it("503s past the retries throw Unavailable with retryAfterMs", async () => {
    const [p, c] = await proxy(Array(10).fill("503"));
    c.retries = 2;
    const e = await c.produce(topic, "x").catch((err) => err);
    assert.ok(e instanceof onceq.Unavailable);
    assert.deepEqual([e.status, e.retryAfterMs], [503, 200]);
    assert.equal(p.bodies.length, 3);
    assert.deepEqual(await stored(), []);
  });

  it("skipIfCommitted survives a retry", async () => {
    await direct.produce(topic, "p", { idempotencyKey: "charge:2" });
    const d = (await direct.consume(topic, "billing", "w", { maxMessages: 1, waitMs: 1000 })).messages[0]!;
    await direct.ack(topic, "billing", "w", { ...d, result: { ok: 1 } });
    const [, c] = await proxy(["drop", "pass"]);
    const r = await c.produce(topic, "p", { idempotencyKey: "charge:2", skipIfCommitted: ["billing"] });
    assert.equal(r.alreadyCommitted, true);
    assert.deepEqual(r.committed.billing!.result, { ok: 1 });
  });

  it("without dedup a connection error is not retried", async () => {
    const [p, c] = await proxy(["drop"]);
    await assert.rejects(c.produce(topic, "x", { dedup: false }), onceq.TransportError);
    assert.equal(p.bodies.length, 1);
    assert.equal(p.bodies[0].envelope, undefined);
  });
});
