/** Workers as real processes: kill -9 mid-handler, and SIGTERM draining. */

import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Client } from "../src/index.js";
import { type Server, WorkerProcess, sleep, startServer, unique, waitUntil } from "./support.js";

describe("worker processes", () => {
  let server: Server;
  let c: Client;
  let topic: string;
  let procs: WorkerProcess[] = [];
  before(async () => {
    server = await startServer();
    c = new Client(server.url);
  });
  after(async () => server.stop());
  beforeEach(() => {
    topic = unique("orders");
    procs = [];
  });
  afterEach(async () => {
    for (const p of procs) await p.kill();
  });
  const worker = (owner: string, ...args: string[]) => {
    const w = new WorkerProcess(server.url, topic, "billing", owner, ...args);
    procs.push(w);
    return w;
  };
  const committed = async (k: string) => (await c.getKey(topic, "billing", k)).state === "committed";

  it("a worker killed -9 mid-handler is replaced and the key committed once", async () => {
    await c.createTopic(topic, { leaseMs: 1000 });
    await c.produce(topic, "order 7", { idempotencyKey: "charge:order-7" });
    const a = worker("worker-a", "--sleep", "60000");
    const first = await a.waitEvent("started");
    assert.equal(first.attempts, 1);
    await a.kill();
    assert.equal(a.proc.signalCode, "SIGKILL");
    await c.produce(topic, "order 7 again", { idempotencyKey: "charge:order-7" }); // a duplicate upstream
    const b = worker("worker-b");
    const second = await b.waitEvent("started");
    assert.deepEqual([second.offset, second.attempts], [first.offset, 2]);
    assert.ok(second.token > first.token);
    assert.ok(await waitUntil(() => committed("charge:order-7"), 10000));
    const k = await c.getKey(topic, "billing", "charge:order-7");
    assert.deepEqual([k.owner, k.attempts, k.result], ["worker-b", 2, { by: "worker-b", offset: 0 }]);
    assert.ok(await waitUntil(async () => (await c.getTopic(topic)).groups.billing!.autoAcked === 1, 5000));
    await sleep(500);
    assert.deepEqual(b.events.filter((e) => e.event === "started").map((e) => e.offset), [0]);
    const g = (await c.getTopic(topic)).groups.billing!;
    assert.deepEqual([g.acked, g.autoAcked, g.backlog, g.inflight], [1, 1, 0, 0]);
  });

  it("SIGTERM finishes the running handler, then exits", async () => {
    await c.createTopic(topic);
    await c.produceBatch(topic, [0, 1, 2].map((i) => ({ value: `m${i}`, idempotencyKey: `k${i}` })));
    const w = worker("worker-t", "--sleep", "1500");
    await w.waitEvent("started");
    const t0 = Date.now();
    w.signal("SIGTERM");
    assert.equal(await w.wait(15000), 0);
    assert.ok(Date.now() - t0 < 5000);
    const finished = await w.waitEvent("finished", 1000);
    assert.deepEqual([finished.offset, finished.stopping, finished.leaseLost], [0, true, false]);
    const stopped = await w.waitEvent("stopped", 1000);
    assert.deepEqual([stopped.acked, stopped.received, stopped.released], [1, 1, 0]);
    assert.deepEqual(w.events.filter((e) => e.event === "started").map((e) => e.offset), [0]);
    assert.ok(await committed("k0"));
    const g = (await c.getTopic(topic)).groups.billing!;
    assert.deepEqual([g.acked, g.backlog, g.inflight], [1, 2, 0]);
  });

  it("a second signal releases running jobs at once", async () => {
    await c.createTopic(topic);
    await c.produce(topic, "m", { idempotencyKey: "k" });
    const w = worker("worker-2x", "--sleep", "60000");
    await w.waitEvent("started");
    w.signal("SIGTERM"); // drain: the handler has 30 s to finish
    await sleep(500);
    const t0 = Date.now();
    w.signal("SIGTERM"); // now
    assert.equal(await w.wait(10000), 0);
    assert.ok(Date.now() - t0 < 3000);
    assert.equal((await w.waitEvent("stopped", 1000)).released, 1);
    const d = (await c.consume(topic, "billing", "other", { maxMessages: 1, waitMs: 2000 })).messages[0]!;
    assert.deepEqual([d.attempts, d.lastError], [2, "worker stopped before the handler finished"]);
  });

  it("a second Ctrl-C cuts the long poll", async () => {
    await c.createTopic(topic);
    const w = worker("worker-idle", "--wait-ms", "30000");
    await w.waitEvent("ready");
    await sleep(500); // in its long poll
    w.signal("SIGINT");
    await sleep(300);
    const t0 = Date.now();
    w.signal("SIGINT");
    assert.equal(await w.wait(10000), 0);
    assert.ok(Date.now() - t0 < 3000);
  });

  it("SIGINT drains too", async () => {
    await c.createTopic(topic);
    await c.produce(topic, "m", { idempotencyKey: "k" });
    const w = worker("worker-i", "--sleep", "500");
    await w.waitEvent("started");
    w.signal("SIGINT");
    assert.equal(await w.wait(15000), 0);
    assert.ok(await committed("k"));
  });
});
