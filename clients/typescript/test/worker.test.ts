/** The Worker in-process against a real onceqd: acks carried on consume,
 * results committed, nacks with reasons and backoff, Retry and Fail, lease
 * extension, lost leases, stale acks, concurrency, stop and drain. */

import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import * as onceq from "../src/index.js";
import { Client, Fail, Job, Retry, Worker } from "../src/index.js";
import { type Server, sleep, startServer, unique, waitUntil } from "./support.js";

class SpyClient extends Client {
  calls: Array<{ method: string; path: string; body: any }> = [];
  slowExtends = 0;
  stallMs = 0;
  protected override async request(method: string, path: string, opts: any = {}) {
    this.calls.push({ method, path, body: opts.body });
    if (path === "/v1/extend" && this.slowExtends > 0) {
      this.slowExtends--;
      await sleep(this.stallMs); // a network partition or a GC pause
    }
    return super.request(method, path, opts);
  }
}

const quiet = { info() {}, warn() {}, error() {} };

describe("worker", () => {
  let server: Server;
  let c: Client;
  let topic: string;
  let running: Array<{ w: Worker; p: Promise<void> }> = [];
  before(async () => {
    server = await startServer();
    c = new Client(server.url);
  });
  after(async () => server.stop());
  beforeEach(() => {
    topic = unique("jobs");
    running = [];
  });
  afterEach(async () => {
    for (const r of running) {
      r.w.stop();
      await r.p.catch(() => {});
    }
  });

  function start(w: Worker): () => Promise<void> {
    const p = w.run();
    running.push({ w, p });
    return async () => {
      w.stop();
      await p;
    };
  }
  const key = (k: string, group = "g") => c.getKey(topic, group, k);

  it("returned values are committed, with acks carried on the next consume", async () => {
    await c.createTopic(topic);
    await c.produceBatch(topic, [0, 1, 2, 3, 4].map((i) => ({ value: { n: i }, idempotencyKey: `k${i}` })));
    const spy = new SpyClient(server.url);
    const w = new Worker(spy, topic, "g", { owner: "w1", waitMs: 500, handleSignals: false });
    const seen: Job[] = [];
    w.handler(async (job) => {
      seen.push(job);
      return { double: job.json<{ n: number }>().n * 2 };
    });
    const stop = start(w);
    assert.ok(await waitUntil(() => w.stats.acked === 4, 10000));
    await stop();
    for (let i = 0; i < 5; i++) {
      const k = await key(`k${i}`);
      assert.deepEqual([k.state, k.result, k.owner], ["committed", { double: 2 * i }, "w1"]);
    }
    const carried = spy.calls.filter((x) => x.path === "/v1/consume").reduce((n, x) => n + (x.body.acks?.length ?? 0), 0);
    const direct = spy.calls.filter((x) => x.path === "/v1/ack");
    assert.ok(carried >= 4, `carried ${carried}`);
    assert.ok(direct.length <= 1);
    assert.equal(w.stats.acked, 5);
    const j = seen[0]!;
    assert.deepEqual([j.attempts, j.idempotencyKey, j.key, j.offset, j.stepId], [1, "k0", "", 0, `${topic}/g/0/0`]);
    assert.equal(j.leaseLost, false);
    assert.equal((await c.getTopic(topic)).groups.g!.acked, 5);
  });

  it("a throw nacks with its message and the topic's backoff", async () => {
    await c.createTopic(topic, { backoffMs: 400 });
    await c.produce(topic, "x", { idempotencyKey: "k" });
    const w = new Worker(c, topic, "g", { owner: "w1", waitMs: 300, handleSignals: false, logger: quiet });
    const jobs: Array<[number, Job]> = [];
    w.handler(async (job) => {
      jobs.push([Date.now(), job]);
      if (job.attempts === 1) throw new Error("payment gateway timeout");
      return "ok";
    });
    const stop = start(w);
    assert.ok(await waitUntil(async () => (await key("k")).state === "committed", 10000));
    await stop();
    const [[t1, j1], [t2, j2]] = jobs as [[number, Job], [number, Job]];
    assert.deepEqual([j2.attempts, j2.lastError], [2, "payment gateway timeout"]);
    assert.ok(t2 - t1 >= 350, `${t2 - t1} ms`);
    assert.equal(j1.stepId, j2.stepId);
    assert.ok(j2.fencingToken > j1.fencingToken);
    assert.deepEqual([w.stats.nacked, w.stats.acked], [1, 1]);
  });

  it("Retry sets the delay; Fail gives up for good", async () => {
    await c.createTopic(topic);
    await c.produce(topic, "retry-me", { idempotencyKey: "r" });
    await c.produce(topic, "declined", { idempotencyKey: "f", envelope: { step_id: "charge-f" } });
    const w = new Worker(c, topic, "g", { owner: "w1", waitMs: 300, handleSignals: false, logger: quiet });
    const calls: Array<{ t: number; value: string; attempts: number; lastError: string; stepId: string }> = [];
    w.handler(async (job) => {
      calls.push({ t: Date.now(), value: job.value, attempts: job.attempts, lastError: job.lastError, stepId: job.stepId });
      if (job.value === "declined") throw new Fail("card declined");
      if (job.attempts === 1) return new Retry(600, "rate limited");
      return "paid";
    });
    const stop = start(w);
    assert.ok(await waitUntil(async () => (await key("r")).state === "committed" && (await key("f")).state === "committed", 10000));
    await sleep(300);
    await stop();
    assert.deepEqual((await key("f")).result, { failed: "card declined" });
    assert.equal((await key("r")).result, "paid");
    const retried = calls.filter((x) => x.value === "retry-me");
    assert.deepEqual(retried.map((x) => x.attempts), [1, 2]);
    assert.equal(retried[1]!.lastError, "rate limited");
    assert.ok(retried[1]!.t - retried[0]!.t >= 550);
    assert.deepEqual(calls.filter((x) => x.value === "declined").map((x) => x.stepId), ["charge-f"]);
    assert.equal(w.stats.failed, 1);
  });

  it("a handler running three leases is extended and not redelivered", async () => {
    await c.createTopic(topic, { leaseMs: 1000 });
    await c.produce(topic, "slow", { idempotencyKey: "slow" });
    const w = new Worker(c, topic, "g", { owner: "w1", waitMs: 300, handleSignals: false });
    const ran: Job[] = [];
    w.handler(async (job) => {
      ran.push(job);
      await sleep(3200);
      return { leaseLost: job.leaseLost };
    });
    const stop = start(w);
    assert.ok(await waitUntil(() => ran.length > 0, 5000));
    const other: onceq.Delivery[] = [];
    const deadline = Date.now() + 3500;
    while (Date.now() < deadline && (await key("slow")).state !== "committed") {
      other.push(...(await c.consume(topic, "g", "w2", { maxMessages: 1, waitMs: 250 })).messages);
    }
    assert.ok(await waitUntil(async () => (await key("slow")).state === "committed", 5000));
    await stop();
    assert.deepEqual(other, []);
    const k = await key("slow");
    assert.deepEqual([k.owner, k.attempts, k.result], ["w1", 1, { leaseLost: false }]);
    assert.equal(ran.length, 1);
    assert.ok(w.stats.extended >= 6, `extended ${w.stats.extended}`);
    const g = (await c.getTopic(topic)).groups.g!;
    assert.deepEqual([g.redelivered, g.acked], [0, 1]);
  });

  it("a stale worker's ack is refused and reported", async () => {
    await c.createTopic(topic, { leaseMs: 600 });
    await c.produce(topic, "charge", { idempotencyKey: "charge:1" });
    let started = false;
    let resume!: () => void;
    const resumed = new Promise<void>((r) => (resume = r));
    const stale: Array<[Job, onceq.OnceqError]> = [];
    const warnings: string[] = [];
    const w = new Worker(c, topic, "g", {
      owner: "slow",
      waitMs: 300,
      autoExtend: false,
      handleSignals: false,
      onStale: (job, err) => stale.push([job, err]),
      logger: { info() {}, warn: (m) => warnings.push(m), error() {} },
    });
    w.handler(async () => {
      started = true;
      await resumed; // paused past its lease
      return { by: "slow" };
    });
    const stop = start(w);
    assert.ok(await waitUntil(() => started, 5000));
    const d = (await c.consume(topic, "g", "fast", { maxMessages: 1, waitMs: 5000 })).messages[0]!;
    assert.equal(d.attempts, 2);
    await c.ack(topic, "g", "fast", { ...d, result: { by: "fast" } });
    resume();
    assert.ok(await waitUntil(() => stale.length > 0, 10000));
    await stop();
    const [job, err] = stale[0]!;
    assert.ok(err instanceof onceq.Fenced);
    assert.equal(job.leaseLost, true);
    assert.deepEqual([w.stats.stale, w.stats.acked], [1, 0]);
    assert.ok(warnings.some((m) => m.includes("refused")), warnings.join("\n"));
    assert.deepEqual((await key("charge:1")).result, { by: "fast" });
  });

  it("a fenced extend tells the handler its lease is lost", async () => {
    await c.createTopic(topic, { leaseMs: 600 });
    await c.produce(topic, "x", { idempotencyKey: "x" });
    const spy = new SpyClient(server.url);
    spy.slowExtends = 1;
    spy.stallMs = 1500; // the first extend arrives after the lease ran out
    const w = new Worker(spy, topic, "g", { owner: "paused", waitMs: 300, handleSignals: false, logger: quiet });
    const told: boolean[] = [];
    let started = false;
    w.handler(async (job) => {
      started = true;
      await new Promise<void>((r) => {
        job.signal.addEventListener("abort", () => r(), { once: true });
        setTimeout(r, 8000);
      });
      told.push(job.leaseLost);
      assert.throws(() => job.check(), onceq.LeaseLost);
      return "too late";
    });
    const stop = start(w);
    assert.ok(await waitUntil(() => started, 5000));
    const d = (await c.consume(topic, "g", "other", { maxMessages: 1, waitMs: 5000, leaseMs: 10000 })).messages[0]!;
    assert.equal(d.attempts, 2);
    assert.ok(await waitUntil(() => told.length > 0, 10000));
    assert.deepEqual(told, [true]);
    assert.ok(await waitUntil(() => w.stats.stale === 1, 5000));
    await stop();
    assert.equal(w.stats.leaseLost, 1);
    const k = await key("x");
    assert.deepEqual([k.state, k.owner], ["leased", "other"]); // the late ack changed nothing
    await c.ack(topic, "g", "other", { ...d, result: "right" });
    assert.equal((await key("x")).result, "right");
  });

  it("concurrency runs N handlers at once", async () => {
    await c.createTopic(topic);
    await c.produceBatch(topic, [0, 1, 2, 3, 4, 5, 6, 7].map((i) => `m${i}`));
    const w = new Worker(c, topic, "g", { owner: "w1", concurrency: 4, waitMs: 300, handleSignals: false });
    let now = 0;
    let peak = 0;
    w.handler(async () => {
      peak = Math.max(peak, ++now);
      await sleep(400);
      now--;
    });
    const t0 = Date.now();
    const stop = start(w);
    assert.ok(await waitUntil(() => w.stats.received === 8 && now === 0, 10000));
    await stop();
    assert.equal(peak, 4);
    assert.ok(Date.now() - t0 < 3000);
    assert.equal((await c.getTopic(topic)).groups.g!.acked, 8);
  });

  it("stop finishes the running handler and takes no more", async () => {
    await c.createTopic(topic);
    await c.produceBatch(topic, [0, 1, 2].map((i) => ({ value: `m${i}`, idempotencyKey: `k${i}` })));
    let started = false;
    const w = new Worker(c, topic, "g", { owner: "w1", waitMs: 300, handleSignals: false });
    w.handler(async (job) => {
      started = true;
      await sleep(800);
      return { stopping: job.stopping };
    });
    const p = w.run();
    assert.ok(await waitUntil(() => started, 5000));
    w.stop();
    await p;
    assert.deepEqual((await key("k0")).result, { stopping: true });
    const g = (await c.getTopic(topic)).groups.g!;
    assert.deepEqual([g.acked, g.backlog, g.inflight], [1, 2, 0]);
  });

  it("an AbortSignal stops the worker", async () => {
    await c.createTopic(topic);
    await c.produce(topic, "m", { idempotencyKey: "k" });
    const ctl = new AbortController();
    const w = new Worker(c, topic, "g", { owner: "w1", waitMs: 300, handleSignals: false, signal: ctl.signal });
    w.handler(async () => {
      ctl.abort();
      await sleep(200);
      return "done";
    });
    await w.run();
    assert.equal((await key("k")).result, "done");
  });

  it("a handler still running after the drain timeout is released", async () => {
    await c.createTopic(topic);
    await c.produce(topic, "stuck", { idempotencyKey: "stuck" });
    let started = false;
    let unblock!: () => void;
    const blocked = new Promise<void>((r) => (unblock = r));
    let aborted = false;
    const w = new Worker(c, topic, "g", { owner: "w1", waitMs: 300, drainTimeoutMs: 300, handleSignals: false, logger: quiet });
    w.handler(async (job) => {
      started = true;
      job.signal.addEventListener("abort", () => (aborted = true));
      await blocked;
      return "late";
    });
    const p = w.run();
    assert.ok(await waitUntil(() => started, 5000));
    const t0 = Date.now();
    w.stop();
    await p;
    assert.ok(Date.now() - t0 < 3000);
    assert.equal(w.stats.released, 1);
    assert.equal(aborted, true);
    const d = (await c.consume(topic, "g", "w2", { maxMessages: 1, waitMs: 1000 })).messages[0]!;
    assert.deepEqual([d.attempts, d.lastError], [2, "worker stopped before the handler finished"]);
    unblock();
    await sleep(200);
    assert.equal((await key("stuck")).state, "leased");
  });

  it("an unknown topic rejects run() with the error", async () => {
    const w = new Worker(c, unique("missing"), "g", { handleSignals: false, handler: () => undefined });
    await assert.rejects(w.run(), onceq.InvalidArgument);
  });
});
