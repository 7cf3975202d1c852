/** Workflow steps: an ack that produces the next messages in the same
 * atomic step (`produce` on POST /v1/ack), the worker's `Complete` and
 * `job.produce`, and the topic setting `ordering`.
 *
 * "steps: encoding" and "steps: worker routing" run against test/fake.ts (no
 * onceqd needed); "steps: against onceqd" skips, saying so, while the binary
 * does not have the feature yet. */

import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, describe, it, type TestContext } from "node:test";

import * as onceq from "../src/index.js";
import { Client, Complete, Fail, Retry, Worker, ackItemOf, type Delivery, type Job } from "../src/index.js";
import { FakeBroker } from "./fake.js";
import { type Server, sleep, startServer, unique, waitUntil } from "./support.js";

const quiet = { info() {}, warn() {}, error() {} };

class SpyClient extends Client {
  calls: Array<{ method: string; path: string; body: any }> = [];
  protected override async request(method: string, path: string, opts: any = {}) {
    this.calls.push({ method, path, body: opts.body });
    return super.request(method, path, opts);
  }
}

describe("steps: encoding", () => {
  let fake: FakeBroker;
  let c: Client;
  beforeEach(async () => {
    fake = await FakeBroker.start();
    c = new Client(fake.url, { retries: 0 });
  });
  afterEach(async () => fake.close());

  it("an ack with produce sends the list and resolves to where each went", async () => {
    fake.onAck = () => [200, {
      status: "acked",
      produced: [
        { topic: "charges", partition: 1, offset: 12, duplicate: false },
        { topic: "emails", status: "pending" },
      ],
    }];
    const produced = await c.ack("orders", "billing", "w1", {
      partition: 0,
      offset: 4,
      attempts: 1,
      fencingToken: 9,
      result: { ok: true },
      produce: [
        { topic: "charges", value: { order: 7 }, key: "customer-1", idempotencyKey: "charge:7", msgId: "m-1", envelope: { delay_ms: 500 } },
        { topic: "emails", value: "hi" },
      ],
    });
    assert.deepEqual(fake.bodies("/v1/ack"), [{
      topic: "orders", group: "billing", owner: "w1", partition: 0, offset: 4, attempts: 1, fencing_token: 9, result: { ok: true },
      produce: [
        { topic: "charges", key: "customer-1", value: '{"order":7}', envelope: { delay_ms: 500, idempotency_key: "charge:7", msg_id: "m-1" } },
        { topic: "emails", value: "hi" },
      ],
    }]);
    assert.deepEqual(produced, [
      { topic: "charges", status: "produced", pending: false, partition: 1, offset: 12, duplicate: false },
      { topic: "emails", status: "pending", pending: true, duplicate: false },
    ]);
  });

  it("an empty produce list is sent; an ack without one resolves to []", async () => {
    assert.deepEqual(await c.ack("t", "g", "w", { partition: 0, offset: 0, produce: [] }), []);
    assert.deepEqual(await c.ack("t", "g", "w", { partition: 0, offset: 1 }), []); // 204
    const [first, second] = fake.bodies("/v1/ack");
    assert.deepEqual(first.produce, []);
    assert.equal("produce" in second, false);
    fake.onAck = () => [204, undefined]; // a repeated ack of a message without an idempotency key
    assert.deepEqual(await c.ack("t", "g", "w", { partition: 0, offset: 0, produce: [{ topic: "t2", value: "x" }] }), []);
  });

  it("a batch ack carries produce per entry and decodes produced", async () => {
    const d: Delivery = { topic: "t", partition: 0, offset: 1, attempts: 1, key: "", value: "", lastError: "", envelope: {}, leaseExpiresAtMs: 0, fencingToken: 5 };
    const results = await c.ackBatch("t", "g", "w", [ackItemOf(d, { r: 1 }, [{ topic: "next", value: "x" }]), { partition: 0, offset: 2 }]);
    assert.deepEqual(fake.bodies("/v1/ack")[0].acks, [
      { partition: 0, offset: 1, attempts: 1, fencing_token: 5, result: { r: 1 }, produce: [{ topic: "next", value: "x" }] },
      { partition: 0, offset: 2 },
    ]);
    assert.deepEqual(results, [
      { partition: 0, offset: 1, status: "acked", ok: true, produced: [{ topic: "next", status: "produced", pending: false, partition: 0, offset: 0, duplicate: false }] },
      { partition: 0, offset: 2, status: "acked", ok: true },
    ]);
  });

  it("refusals are thrown by class; bad messages before any request", async () => {
    for (const [status, code, cls] of [
      [409, "FAILED_PRECONDITION", onceq.Fenced],
      [404, "NOT_FOUND", onceq.NotFound],
      [400, "INVALID_ARGUMENT", onceq.InvalidArgument],
      [403, "PERMISSION_DENIED", onceq.Forbidden],
    ] as const) {
      fake.onAck = () => [status, { error: code, message: "refused" }];
      await assert.rejects(c.ack("t", "g", "w", { partition: 0, offset: 0, produce: [{ topic: "t2", value: "x" }] }), cls);
    }
    const n = fake.requests.length;
    await assert.rejects(c.ack("t", "g", "w", { partition: 0, offset: 0, produce: [{ value: "x" } as any] }), TypeError);
    await assert.rejects(c.consume("t", "g", "w", { acks: [{ partition: 0, offset: 0, produce: [{ topic: "t2", value: "x" }] }] }), /ackBatch/);
    assert.equal(fake.requests.length, n);
  });

  it("createTopic sends ordering", async () => {
    await c.createTopic("t", { ordering: "key" }).catch(() => {}); // the fake has no /v1/topics
    assert.deepEqual(fake.bodies("/v1/topics"), [{ name: "t", ordering: "key" }]);
  });
});

describe("steps: worker routing", () => {
  let fake: FakeBroker;
  let c: Client;
  beforeEach(async () => {
    fake = await FakeBroker.start();
    c = new Client(fake.url, { retries: 0 });
  });
  afterEach(async () => fake.close());

  async function runWorker(handler: (job: Job) => unknown, until: (w: Worker) => boolean, opts: onceq.WorkerOptions = {}) {
    const w = new Worker(c, "orders", "billing", { owner: "w1", waitMs: 50, handleSignals: false, logger: quiet, handler, ...opts });
    const p = w.run();
    try {
      assert.ok(await waitUntil(() => until(w), 5000), JSON.stringify([w.stats, fake.requests]));
    } finally {
      w.stop();
      await p;
    }
    return w;
  }
  const paths = () => fake.requests.map((r) => r.path);

  it("Complete and staged messages go on the job's own ack", async () => {
    const d = fake.delivery("orders", '{"order_id": 7}');
    const w = await runWorker((job) => {
      job.produce("audit", { seen: 7 });
      job.produce({ topic: "emails", value: { n: 1 }, key: "k", idempotencyKey: "mail:7" });
      return new Complete({ chargeId: "ch_7" }, { produce: [{ topic: "charges", value: { orderId: 7 }, idempotencyKey: "charge:7" }] });
    }, (w) => w.stats.acked === 1);
    assert.deepEqual(fake.bodies("/v1/ack"), [{
      topic: "orders", group: "billing", owner: "w1", partition: 0, offset: d.offset, attempts: 1, fencing_token: d.fencing_token,
      result: { chargeId: "ch_7" },
      produce: [
        { topic: "audit", value: '{"seen":7}' },
        { topic: "emails", key: "k", value: '{"n":1}', envelope: { idempotency_key: "mail:7" } },
        { topic: "charges", value: '{"orderId":7}', envelope: { idempotency_key: "charge:7" } },
      ],
    }]);
    assert.ok(!paths().includes("/v1/produce"));
    assert.ok(!fake.bodies("/v1/consume").some((b) => b.acks));
    assert.deepEqual([w.stats.acked, w.stats.produced], [1, 3]);
  });

  it("jobs without messages keep riding on the next consume", async () => {
    fake.delivery("orders", "a");
    fake.delivery("orders", "b");
    const w = await runWorker(
      (job) => (job.value === "a" ? new Complete("ra", { produce: [{ topic: "charges", value: "next-a" }] }) : new Complete("rb")),
      (w) => w.stats.acked === 2,
    );
    const acks = fake.bodies("/v1/ack");
    assert.deepEqual(acks.filter((a) => a.produce).map((a) => a.result), ["ra"]);
    const carried = fake.bodies("/v1/consume").flatMap((b) => b.acks ?? []);
    const flushed = acks.flatMap((b) => b.acks ?? []);
    assert.deepEqual([...carried, ...flushed].map((a) => a.result), ["rb"]);
    assert.ok([...carried, ...flushed].every((a) => !("produce" in a)));
    assert.equal(w.stats.produced, 1);
  });

  it("a refused ack stores nothing and is never retried as a produce", async () => {
    fake.delivery("orders");
    fake.onAck = () => [409, { error: "FAILED_PRECONDITION", message: "lease lost" }];
    const stale: onceq.OnceqError[] = [];
    const w = await runWorker(
      (job) => {
        job.produce("charges", "x");
        return new Complete("r", { produce: [{ topic: "charges", value: "y" }] });
      },
      (w) => w.stats.stale === 1,
      { onStale: (_j, e) => stale.push(e) },
    );
    await sleep(200); // nothing more comes
    assert.equal(fake.bodies("/v1/ack").length, 1);
    assert.ok(!paths().includes("/v1/produce"));
    assert.ok(!paths().includes("/v1/nack"));
    assert.ok(stale[0] instanceof onceq.Fenced);
    assert.deepEqual([w.stats.acked, w.stats.produced], [0, 0]);
  });

  it("a refusal of the messages nacks the job with the reason", async () => {
    fake.delivery("orders");
    fake.onAck = () => [404, { error: "NOT_FOUND", message: "unknown topic 'chargez'" }];
    const w = await runWorker(() => new Complete("r", { produce: [{ topic: "chargez", value: "y" }] }), (w) => w.stats.nacked === 1);
    const [nack] = fake.bodies("/v1/nack");
    assert.match(nack.reason, /unknown topic 'chargez'/);
    assert.equal("delay_ms" in nack, false); // the topic's backoff
    assert.equal(fake.bodies("/v1/ack").length, 1);
    assert.ok(!paths().includes("/v1/produce"));
    assert.deepEqual([w.stats.acked, w.stats.produced], [0, 0]);
  });

  it("a failed handler sends none of its messages", async () => {
    for (const v of ["throw", "fail", "retry", "no-topic"]) fake.delivery("orders", v);
    const w = await runWorker(
      (job) => {
        job.produce("charges", "staged");
        if (job.value === "throw") throw new Error("boom");
        if (job.value === "fail") throw new Fail("declined");
        if (job.value === "retry") return new Retry(100);
        return new Complete("r", { produce: [{ value: "m" } as any] }); // no topic: nacked
      },
      (w) => w.stats.nacked === 3 && w.stats.acked === 1,
      { concurrency: 4 },
    );
    const acks = [...fake.bodies("/v1/ack").flatMap((b) => b.acks ?? [b]), ...fake.bodies("/v1/consume").flatMap((b) => b.acks ?? [])];
    assert.deepEqual(acks.map((a) => a.result), [{ failed: "declined" }]);
    assert.ok(acks.every((a) => !("produce" in a)));
    const reasons = fake.bodies("/v1/nack").map((b) => b.reason).sort();
    assert.equal(reasons[0], "boom");
    assert.match(reasons[1], /topic/);
    assert.ok(!paths().includes("/v1/produce"));
    assert.equal(w.stats.produced, 0);
  });
});

describe("steps: against onceqd", () => {
  let server: Server;
  let c: Client;
  let src: string;
  let dst: string;
  let hasSteps: boolean | undefined;
  let hasOrdering: boolean | undefined;
  let running: Array<{ w: Worker; p: Promise<void> }> = [];
  before(async () => {
    server = await startServer();
    c = new Client(server.url);
  });
  after(async () => server.stop());
  beforeEach(() => {
    src = unique("orders");
    dst = unique("charges");
    running = [];
  });
  afterEach(async () => {
    for (const r of running) {
      r.w.stop();
      await r.p.catch(() => {});
    }
  });

  /** False (and the test skipped) while this onceqd has no `produce` on acks. */
  async function steps(t: TestContext): Promise<boolean> {
    if (hasSteps === undefined) {
      const e = await c.ack(unique("probe"), "g", "w", { partition: 0, offset: 0, produce: [] }).then(() => undefined, (e) => e);
      hasSteps = !(e instanceof onceq.InvalidArgument && e.message.includes("unknown field 'produce'"));
    }
    if (!hasSteps) t.skip("this onceqd has no workflow steps yet (POST /v1/ack: unknown field 'produce')");
    return hasSteps;
  }

  async function ordering(t: TestContext): Promise<boolean> {
    if (hasOrdering === undefined) {
      const e = await c.createTopic(unique("probe"), { ordering: "none" }).then(() => undefined, (e) => e);
      hasOrdering = !(e instanceof onceq.InvalidArgument && e.message.includes("unknown field 'ordering'"));
    }
    if (!hasOrdering) t.skip("this onceqd has no topic setting 'ordering' yet");
    return hasOrdering;
  }

  /** Consumes and acks what is new in `topic` for `group`: waits up to
   * `waitMs` for the first (a pending message comes through the broker's
   * outbox), then takes what follows at once. */
  async function drain(topic: string, group = "check", waitMs = 2000): Promise<Delivery[]> {
    const out: Delivery[] = [];
    for (;;) {
      const b = await c.consume(topic, group, "checker", { maxMessages: 100, waitMs: out.length ? 300 : waitMs });
      if (!b.messages.length) return out;
      out.push(...b.messages);
      await c.ackBatch(topic, group, "checker", b.messages.map((m) => ackItemOf(m)));
    }
  }

  /** `produced` names `topics` in order; those stored (not pending: a target
   * on another shard may be) are at offsets 0, 1, ... of a fresh topic. */
  function assertProduced(produced: onceq.Produced[] | undefined, topics: string[]): void {
    assert.deepEqual(produced?.map((p) => p.topic), topics);
    produced!.forEach((p, i) => {
      assert.ok((p.status === "produced" || p.status === "pending") && !p.duplicate, JSON.stringify(produced));
      if (!p.pending) assert.deepEqual([p.partition, p.offset], [0, i]);
    });
  }

  function start(w: Worker): Worker {
    running.push({ w, p: w.run() });
    return w;
  }

  it("an ack stores its messages in the same step", async (t) => {
    if (!(await steps(t))) return;
    await c.createTopic(src, { partitions: 1 });
    await c.createTopic(dst, { partitions: 1 });
    await c.produce(src, { orderId: 7 }, { idempotencyKey: "order:7" });
    const d = (await c.consume(src, "billing", "w1", { maxMessages: 1, waitMs: 2000 })).messages[0]!;
    const msgs = [
      { topic: dst, value: { orderId: 7 }, key: "customer-1", idempotencyKey: "charge:7" },
      { topic: dst, value: "second", envelope: { tenant_id: "acme" } },
    ];
    const produced = await c.ack(src, "billing", "w1", { ...d, result: { charge: "ch_7" }, produce: msgs });
    assertProduced(produced, [dst, dst]);
    // Retried at once by its owner (its answer was lost): the same list (a
    // pending message may have its position by now), stored once.
    const again = await c.ack(src, "billing", "w1", { ...d, result: { charge: "ch_7" }, produce: msgs });
    assert.deepEqual(again.map((p) => p.topic), [dst, dst]);
    again.forEach((p, i) => {
      if (!p.pending && !produced[i]!.pending) assert.deepEqual(p, produced[i]);
    });
    assert.deepEqual((await c.getKey(src, "billing", "order:7")).result, { charge: "ch_7" });
    const got = await drain(dst);
    assert.deepEqual(got.map((m) => [m.value, m.key, m.envelope.idempotency_key]), [['{"orderId":7}', "customer-1", "charge:7"], ["second", "", undefined]]);
    assert.equal(got[1]!.envelope.tenant_id, "acme");
  });

  it("a batch ack produces per entry", async (t) => {
    if (!(await steps(t))) return;
    await c.createTopic(src, { partitions: 1 });
    await c.createTopic(dst, { partitions: 1 });
    await c.produceBatch(src, ["a", "b"]);
    const b = await c.consume(src, "g", "w1", { maxMessages: 2, waitMs: 2000 });
    const results = await c.ackBatch(src, "g", "w1", [ackItemOf(b.messages[0]!, "ra", [{ topic: dst, value: "from-a" }]), ackItemOf(b.messages[1]!, "rb")]);
    assert.deepEqual(results.map((r) => r.status), ["acked", "acked"]);
    assertProduced(results[0]!.produced, [dst]);
    assert.equal(results[1]!.produced, undefined);
    assert.deepEqual((await drain(dst)).map((m) => m.value), ["from-a"]);
  });

  it("a fenced ack stores none of its messages", async (t) => {
    if (!(await steps(t))) return;
    await c.createTopic(src, { partitions: 1 });
    await c.createTopic(dst, { partitions: 1 });
    await c.produce(src, "x", { idempotencyKey: "x" });
    const d1 = (await c.consume(src, "g", "slow", { maxMessages: 1, waitMs: 2000, leaseMs: 300 })).messages[0]!;
    const d2 = (await c.consume(src, "g", "fast", { maxMessages: 1, waitMs: 3000 })).messages[0]!;
    assert.equal(d2.attempts, 2);
    await assert.rejects(c.ack(src, "g", "slow", { ...d1, produce: [{ topic: dst, value: "stale" }] }), onceq.Fenced);
    assert.deepEqual(await drain(dst, "check", 1000), []);
    assert.equal((await c.getKey(src, "g", "x")).owner, "fast");
  });

  it("an unknown target topic, or over 1000 messages, refuses the ack", async (t) => {
    if (!(await steps(t))) return;
    await c.createTopic(src, { partitions: 1 });
    await c.produce(src, "x", { idempotencyKey: "x" });
    const d = (await c.consume(src, "g", "w1", { maxMessages: 1, waitMs: 2000 })).messages[0]!;
    await assert.rejects(c.ack(src, "g", "w1", { ...d, produce: [{ topic: unique("missing"), value: "y" }] }), onceq.NotFound);
    assert.equal((await c.getKey(src, "g", "x")).state, "leased"); // not acked
    const many = Array.from({ length: 1001 }, () => ({ topic: src, value: "y" }));
    await assert.rejects(c.ack(src, "g", "w1", { ...d, produce: many }), onceq.InvalidArgument);
    assert.equal((await c.getKey(src, "g", "x")).state, "leased");
  });

  it("a three-step pipeline with workers: order, charge, receipt", async (t) => {
    if (!(await steps(t))) return;
    const [orders, charges, receipts] = [unique("orders"), unique("charges"), unique("receipts")];
    for (const n of [orders, charges, receipts]) await c.createTopic(n, { partitions: 1 });
    const spies: SpyClient[] = [];
    const worker = (topic: string, group: string, handler: (job: Job) => unknown) => {
      const spy = new SpyClient(server.url);
      spies.push(spy);
      return start(new Worker(spy, topic, group, { owner: group, waitMs: 200, handleSignals: false, logger: quiet, handler }));
    };
    const w1 = worker(orders, "billing", (job) => {
      const { orderId } = job.json<{ orderId: number }>();
      const chargeId = `ch_${orderId}`;
      return new Complete({ chargeId }, { produce: [{ topic: charges, value: { orderId, chargeId }, idempotencyKey: `receipt:${orderId}` }] });
    });
    const w2 = worker(charges, "receipts", (job) => {
      const { orderId, chargeId } = job.json<{ orderId: number; chargeId: string }>();
      job.produce(receipts, { to: `customer-${orderId}`, chargeId }, { idempotencyKey: `mail:${orderId}` });
      return { receipt: `r_${orderId}` };
    });
    for (const n of [1, 2, 3]) await c.produce(orders, { orderId: n }, { idempotencyKey: `order:${n}` });
    assert.ok(await waitUntil(() => w2.stats.acked === 3, 15000), JSON.stringify([w1.stats, w2.stats]));
    const mails = await drain(receipts);
    assert.deepEqual(mails.map((m) => JSON.parse(m.value).chargeId).sort(), ["ch_1", "ch_2", "ch_3"]);
    assert.deepEqual(mails.map((m) => m.envelope.idempotency_key).sort(), ["mail:1", "mail:2", "mail:3"]);
    assert.deepEqual((await c.getKey(orders, "billing", "order:2")).result, { chargeId: "ch_2" });
    assert.deepEqual((await c.getKey(charges, "receipts", "receipt:2")).result, { receipt: "r_2" });
    assert.deepEqual([w1.stats.produced, w2.stats.produced], [3, 3]);
    for (const s of spies) assert.ok(!s.calls.some((x) => x.path === "/v1/produce"));
  });

  it("a stale worker's messages are never stored", async (t) => {
    if (!(await steps(t))) return;
    await c.createTopic(src, { partitions: 1, leaseMs: 500 });
    await c.createTopic(dst, { partitions: 1 });
    await c.produce(src, "charge", { idempotencyKey: "charge:1" });
    let started = false;
    let resume!: () => void;
    const resumed = new Promise<void>((r) => (resume = r));
    const spy = new SpyClient(server.url);
    const w = new Worker(spy, src, "g", { owner: "slow", waitMs: 200, autoExtend: false, handleSignals: false, logger: quiet });
    w.handler(async (job) => {
      job.produce(dst, "staged by the slow one");
      started = true;
      await resumed; // paused past its lease
      return new Complete({ by: "slow" }, { produce: [{ topic: dst, value: "returned by the slow one" }] });
    });
    start(w);
    assert.ok(await waitUntil(() => started, 5000));
    const d = (await c.consume(src, "g", "fast", { maxMessages: 1, waitMs: 5000 })).messages[0]!;
    await c.ack(src, "g", "fast", { ...d, result: { by: "fast" }, produce: [{ topic: dst, value: "by the fast one" }] });
    resume();
    assert.ok(await waitUntil(() => w.stats.stale === 1, 10000));
    assert.deepEqual((await drain(dst)).map((m) => m.value), ["by the fast one"]);
    assert.deepEqual((await c.getKey(src, "g", "charge:1")).result, { by: "fast" });
    assert.ok(!spy.calls.some((x) => x.path === "/v1/produce"));
    assert.equal(w.stats.produced, 0);
  });

  it("ordering key leases one message per key at a time", async (t) => {
    if (!(await ordering(t))) return;
    await c.createTopic(src, { partitions: 1, ordering: "key" });
    assert.equal((await c.getTopic(src)).settings.ordering, "key");
    await c.produce(src, "k1-first", { key: "k1" });
    await c.produce(src, "k1-second", { key: "k1" });
    await c.produce(src, "k2-first", { key: "k2" });
    const first = await c.consume(src, "g", "w1", { maxMessages: 3, waitMs: 1000 });
    assert.deepEqual(first.messages.map((m) => m.value), ["k1-first", "k2-first"]);
    assert.equal((await c.consume(src, "g", "w2", { maxMessages: 3, waitMs: 300 })).messages.length, 0);
    await c.ack(src, "g", "w1", first.messages[0]!);
    assert.deepEqual((await c.consume(src, "g", "w2", { maxMessages: 3, waitMs: 1000 })).messages.map((m) => m.value), ["k1-second"]);
    assert.deepEqual((await c.consume(src, "g2", "w3", { maxMessages: 3, waitMs: 1000 })).messages.map((m) => m.value), ["k1-first", "k2-first"]);
  });
});
