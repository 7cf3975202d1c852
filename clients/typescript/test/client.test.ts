/** Every Client method against a real onceqd. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";

import * as onceq from "../src/index.js";
import { Client, ackItemOf } from "../src/index.js";
import { type Server, sleep, startServer, unique } from "./support.js";

describe("client", () => {
  let server: Server;
  let c: Client;
  let topic: string;
  before(async () => {
    server = await startServer();
    c = new Client(server.url);
  });
  after(async () => server.stop());
  beforeEach(async () => {
    topic = unique("orders");
    await c.createTopic(topic, { partitions: 1 });
  });

  async function consumeOne(group = "g", owner = "w1", opts: onceq.ConsumeOptions = {}) {
    const b = await c.consume(topic, group, owner, { maxMessages: 1, waitMs: 2000, ...opts });
    assert.equal(b.messages.length, 1);
    return b.messages[0]!;
  }

  it("healthz, version, openapi, metrics", async () => {
    const h = await c.healthz();
    assert.deepEqual([h.ok, h.status], [true, "ok"]);
    const v = await c.version();
    assert.ok(v.version);
    assert.equal(typeof v.walEnabled, "boolean");
    assert.equal((await c.openapi()).info.title, "onceq");
    assert.match(await c.metrics(), /onceq_/);
  });

  it("topics: create, again, conflict, list, get, delete", async () => {
    const name = unique("topic");
    const created = await c.createTopic(name, { partitions: 2, leaseMs: 1500, maxAttempts: 3, keyHistory: true });
    assert.deepEqual(created, { name, partitions: 2, status: "created" });
    await c.createTopic(name, { partitions: 2, leaseMs: 1500, maxAttempts: 3, keyHistory: true });
    const err = await c.createTopic(name, { partitions: 4 }).catch((e) => e);
    assert.ok(err instanceof onceq.Conflict && !(err instanceof onceq.Fenced));
    assert.equal(err.code, "ALREADY_EXISTS");
    assert.ok((await c.listTopics()).includes(name));
    const info = await c.getTopic(name);
    assert.equal(info.partitions, 2);
    assert.equal(info.settings.leaseMs, 1500);
    assert.equal(info.settings.maxAttempts, 3);
    await c.deleteTopic(name);
    assert.ok(!(await c.listTopics()).includes(name));
    const nf = await c.getTopic(name).catch((e) => e);
    assert.ok(nf instanceof onceq.NotFound);
    assert.equal(nf.status, 404);
    assert.ok(nf.requestId);
  });

  it("produce, consume, ack commits the key with the result", async () => {
    const r = await c.produce(topic, { order: 7 }, { key: "customer-42", idempotencyKey: "charge:order-7", tenantId: "acme", headers: { "trace-id": "t1" } });
    assert.deepEqual([r.status, r.partition, r.offset, r.duplicate, r.alreadyCommitted], ["produced", 0, 0, false, false]);
    assert.ok(r.msgId);
    const d = await consumeOne("g", "w1", { leaseMs: 10000 });
    assert.deepEqual([d.topic, d.partition, d.offset, d.attempts, d.key, d.lastError], [topic, 0, 0, 1, "customer-42", ""]);
    assert.deepEqual(JSON.parse(d.value), { order: 7 });
    assert.equal(d.envelope.idempotency_key, "charge:order-7");
    assert.deepEqual(d.envelope.headers, { "trace-id": "t1" });
    assert.equal(d.envelope.msg_id, r.msgId);
    assert.ok(d.fencingToken > 0);
    assert.ok(d.leaseExpiresAtMs > Date.now() + 5000);
    const leased = await c.getKey(topic, "g", "charge:order-7", { tenantId: "acme" });
    assert.deepEqual([leased.state, leased.owner, leased.fencingToken], ["leased", "w1", d.fencingToken]);
    await c.ack(topic, "g", "w1", { partition: 0, offset: 0, fencingToken: d.fencingToken, result: { charge_id: "ch_1" } });
    await c.ack(topic, "g", "w1", { partition: 0, offset: 0 }); // repeated by its owner: accepted
    const k = await c.getKey(topic, "g", "charge:order-7", { tenantId: "acme" });
    assert.deepEqual([k.state, k.owner, k.attempts, k.offset], ["committed", "w1", 1, 0]);
    assert.deepEqual(k.result, { charge_id: "ch_1" });
    assert.ok(k.expiresAtMs! > k.committedAtMs!);
    assert.equal((await c.getKey(topic, "g", "nope")).state, "none");
    const g = (await c.getTopic(topic)).groups.g!;
    assert.deepEqual([g.acked, g.backlog, g.inflight], [1, 0, 0]);
  });

  it("a message with a committed key is auto-acked", async () => {
    await c.produce(topic, "a", { idempotencyKey: "k1" });
    const d = await consumeOne();
    await c.ack(topic, "g", "w1", d);
    await c.produce(topic, "a again", { idempotencyKey: "k1" });
    assert.equal((await c.consume(topic, "g", "w1", { maxMessages: 5, waitMs: 300 })).messages.length, 0);
    assert.equal((await c.getTopic(topic)).groups.g!.autoAcked, 1);
  });

  it("the same msgId is stored once; each call gets its own", async () => {
    const a = await c.produce(topic, "x", { msgId: "req-1" });
    const b = await c.produce(topic, "x", { msgId: "req-1" });
    assert.deepEqual([a.msgId, a.duplicate, b.duplicate, b.offset], ["req-1", false, true, a.offset]);
    const c1 = await c.produce(topic, "x");
    const c2 = await c.produce(topic, "x");
    assert.notEqual(c1.msgId, c2.msgId);
    assert.equal(c2.duplicate, false);
    assert.equal((await c.produce(topic, "y", { dedup: false })).msgId, undefined);
  });

  it("skipIfCommitted answers alreadyCommitted with the result", async () => {
    await c.produce(topic, "pay", { idempotencyKey: "charge:9" });
    const d = await consumeOne("billing");
    await c.ack(topic, "billing", "w1", { ...d, result: { charge_id: "ch_9" } });
    const r = await c.produce(topic, "pay", { idempotencyKey: "charge:9", skipIfCommitted: ["billing"] });
    assert.equal(r.alreadyCommitted, true);
    assert.equal(r.offset, undefined);
    assert.deepEqual(r.committed.billing!.result, { charge_id: "ch_9" });
    assert.equal(r.committed.billing!.owner, "w1");
    const r2 = await c.produce(topic, "pay", { idempotencyKey: "charge:9", skipIfCommitted: ["billing", "audit"] });
    assert.equal(r2.status, "produced");
  });

  it("produceBatch and ackBatch", async () => {
    const rs = await c.produceBatch(topic, ["a", { value: { n: 2 }, key: "k", idempotencyKey: "b2" }, { value: "c", envelope: { tenant_id: "t" } }]);
    assert.deepEqual(rs.map((r) => r.offset), [0, 1, 2]);
    assert.ok(rs.every((r) => r.msgId));
    const batch = await c.consume(topic, "g", "w1", { maxMessages: 10, waitMs: 1000 });
    assert.deepEqual(batch.messages.map((m) => m.value), ["a", '{"n":2}', "c"]);
    assert.equal(batch.messages[2]!.envelope.tenant_id, "t");
    const results = await c.ackBatch(topic, "g", "w1", batch.messages.map((m, i) => ackItemOf(m, { i })));
    assert.ok(results.every((r) => r.ok));
    const rs2 = await c.produceBatch(topic, [{ value: "b", idempotencyKey: "b2" }, { value: "d", idempotencyKey: "d4" }], { skipIfCommitted: ["g"] });
    assert.equal(rs2[0]!.alreadyCommitted, true);
    assert.deepEqual(rs2[0]!.committed.g!.result, { i: 1 });
    assert.equal(rs2[1]!.offset, 3);
  });

  it("a long poll waits, then answers empty; a produce wakes it", async () => {
    let t0 = Date.now();
    const empty = await c.consume(topic, "g", "w1", { maxMessages: 5, waitMs: 400 });
    assert.deepEqual([empty.messages, empty.acks], [[], []]);
    assert.ok(Date.now() - t0 >= 350);
    setTimeout(() => void c.produce(topic, "late"), 300);
    t0 = Date.now();
    const b = await c.consume(topic, "g", "w1", { maxMessages: 5, waitMs: 10000 });
    assert.deepEqual(b.messages.map((m) => m.value), ["late"]);
    assert.ok(Date.now() - t0 < 5000);
  });

  it("consume carries the previous batch's acks", async () => {
    await c.produceBatch(topic, [{ value: "a", idempotencyKey: "ka" }, { value: "b", idempotencyKey: "kb" }]);
    const first = await c.consume(topic, "g", "w1", { maxMessages: 1, waitMs: 1000 });
    const second = await c.consume(topic, "g", "w1", {
      maxMessages: 1,
      waitMs: 1000,
      acks: [ackItemOf(first.messages[0]!, "done-a"), { partition: 0, offset: 99 }],
    });
    assert.deepEqual(second.acks.map((a) => [a.offset, a.status]), [[0, "acked"], [99, "error"]]);
    assert.equal(second.acks[1]!.error, "FAILED_PRECONDITION");
    assert.deepEqual(second.messages.map((m) => m.value), ["b"]);
    assert.equal((await c.getKey(topic, "g", "ka")).result, "done-a");
    const third = await c.consume(topic, "g", "w1", { maxMessages: 1, waitMs: 100, acks: [ackItemOf(second.messages[0]!)] });
    assert.deepEqual([third.acks.map((a) => a.status), third.messages], [["acked"], []]);
  });

  it("ack, extend, nack by another owner or token are Fenced", async () => {
    await c.produce(topic, "x");
    const d = await consumeOne();
    const e1 = await c.ack(topic, "g", "w2", { partition: 0, offset: 0 }).catch((e) => e);
    assert.ok(e1 instanceof onceq.Fenced && e1 instanceof onceq.Conflict);
    assert.deepEqual([e1.status, e1.code], [409, "FAILED_PRECONDITION"]);
    await assert.rejects(c.ack(topic, "g", "w1", { partition: 0, offset: 0, fencingToken: d.fencingToken + 1000 }), onceq.Fenced);
    await assert.rejects(c.extend(topic, "g", "w2", { partition: 0, offset: 0, leaseMs: 1000 }), onceq.Fenced);
    await assert.rejects(c.nack(topic, "g", "w1", { partition: 0, offset: 0, attempts: 7 }), onceq.Fenced);
    await c.ack(topic, "g", "w1", { partition: 0, offset: 0, attempts: 1, fencingToken: d.fencingToken });
  });

  it("nack redelivers with the reason after the delay", async () => {
    await c.produce(topic, "x");
    const d = await consumeOne();
    await c.nack(topic, "g", "w1", { ...d, reason: "gateway timeout", delayMs: 500 });
    const t0 = Date.now();
    assert.equal((await c.consume(topic, "g", "w1", { maxMessages: 1, waitMs: 200 })).messages.length, 0);
    const d2 = await consumeOne();
    assert.ok(Date.now() - t0 >= 400);
    assert.deepEqual([d2.attempts, d2.lastError], [2, "gateway timeout"]);
    assert.ok(d2.fencingToken > d.fencingToken);
  });

  it("extend moves the lease", async () => {
    await c.produce(topic, "x");
    const d = await consumeOne("g", "w1", { leaseMs: 500 });
    const until = await c.extend(topic, "g", "w1", { partition: 0, offset: 0, leaseMs: 5000, fencingToken: d.fencingToken });
    assert.ok(until > d.leaseExpiresAtMs + 3000);
    await sleep(700);
    assert.equal((await c.consume(topic, "g", "w2", { maxMessages: 1 })).messages.length, 0);
  });

  it("getKey waits for the commit; keyHistory", async () => {
    const t = unique("hist");
    await c.createTopic(t, { keyHistory: true });
    await c.produce(t, "x", { idempotencyKey: "k" });
    const d = (await c.consume(t, "g", "w1", { maxMessages: 1, waitMs: 1000 })).messages[0]!;
    setTimeout(() => void c.ack(t, "g", "w1", { partition: 0, offset: 0, result: 42 }), 300);
    const k = await c.getKey(t, "g", "k", { waitMs: 5000 });
    assert.deepEqual([k.state, k.result], ["committed", 42]);
    const events = await c.keyHistory(t, "g", "k");
    assert.deepEqual(events.map((e) => e.event), ["leased", "committed"]);
    assert.equal(events[0]!.fencingToken, d.fencingToken);
    await assert.rejects(c.keyHistory(topic, "g", "k"), onceq.Fenced);
  });

  it("dead letter and redrive", async () => {
    const t = unique("dlq");
    await c.createTopic(t, { maxAttempts: 1 });
    await c.produce(t, "poison", { idempotencyKey: "p" });
    const d = (await c.consume(t, "g", "w1", { maxMessages: 1, waitMs: 1000 })).messages[0]!;
    await c.nack(t, "g", "w1", { ...d, reason: "bad input" });
    const dead = (await c.consume("dlq." + t, "ops", "me", { maxMessages: 1, waitMs: 2000 })).messages[0]!;
    const dlq = dead.envelope.dlq as Record<string, unknown>;
    assert.deepEqual([dlq.original_topic, dlq.last_error], [t, "bad input"]);
    assert.equal((await c.getKey(t, "g", "p")).state, "failed");
    assert.equal(await c.redrive(t, { maxMessages: 10 }), 1);
    const again = (await c.consume(t, "g", "w1", { maxMessages: 1, waitMs: 2000 })).messages;
    assert.deepEqual(again.map((m) => m.value), ["poison"]);
  });

  it("stream yields deliveries until the loop breaks", async () => {
    await c.produceBatch(topic, ["s1", "s2"]);
    const got: onceq.Delivery[] = [];
    for await (const d of c.stream(topic, "g", "w1")) {
      got.push(d);
      await c.ack(topic, "g", "w1", d);
      if (got.length === 2) break;
    }
    assert.deepEqual(got.map((d) => d.value), ["s1", "s2"]);
  });

  it("errors by class", async () => {
    const e = await c.produce(unique("missing"), "x").catch((err) => err);
    assert.ok(e instanceof onceq.InvalidArgument);
    assert.deepEqual([e.status, e.code], [400, "INVALID_ARGUMENT"]);
    assert.ok(e.message);
    await assert.rejects(c.createTopic("bad name!"), onceq.InvalidArgument);
    await assert.rejects(c.ack(unique("missing"), "g", "w", { partition: 0, offset: 0 }), onceq.NotFound);
    await assert.rejects(c.deleteTopic(unique("missing")), onceq.NotFound);
    await assert.rejects(c.ack(topic, "g", "w", { partition: 0, offset: 5 }), onceq.Fenced);
  });

  it("a full topic throws ResourceExhausted with retryAfterMs", async () => {
    const t = unique("full");
    await c.createTopic(t, { maxBacklogMessages: 1 });
    await c.produce(t, "a");
    const e = await new Client(server.url, { retries: 0 }).produce(t, "b").catch((err) => err);
    assert.ok(e instanceof onceq.ResourceExhausted && e instanceof onceq.Unavailable);
    assert.deepEqual([e.status, e.code], [429, "RESOURCE_EXHAUSTED"]);
    assert.ok(e.retryAfterMs > 0);
  });

  it("TransportError when nothing listens", async () => {
    const dead = new Client("http://127.0.0.1:9", { retries: 1, timeoutMs: 2000 });
    await assert.rejects(dead.listTopics(), onceq.TransportError);
  });
});

describe("auth", () => {
  let server: Server;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "onceq-ts-auth-"));
    const file = join(dir, "auth.json");
    writeFileSync(file, JSON.stringify({ tokens: [
      { name: "ops", token: "ops-secret", scopes: ["admin", "produce", "consume", "metrics"], topics: ["*"] },
      { name: "reader", token: "reader-secret", scopes: ["consume"], topics: ["orders"] },
    ] }));
    server = await startServer(["--auth-file", file]);
  });
  after(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("token scopes: 401, 403, 200", async () => {
    const ops = new Client(server.url, { token: "ops-secret" });
    await ops.createTopic("orders");
    assert.equal((await ops.produce("orders", "x")).offset, 0);
    assert.equal((await new Client(server.url).healthz()).ok, true);
    const e = await new Client(server.url).listTopics().catch((err) => err);
    assert.ok(e instanceof onceq.Unauthorized);
    assert.equal(e.status, 401);
    await assert.rejects(new Client(server.url, { token: "wrong" }).listTopics(), onceq.Unauthorized);
    const reader = new Client(server.url, { token: "reader-secret" });
    const f = await reader.produce("orders", "x").catch((err) => err);
    assert.ok(f instanceof onceq.Forbidden);
    assert.equal(f.code, "PERMISSION_DENIED");
    assert.equal((await reader.consume("orders", "g", "r", { maxMessages: 1, waitMs: 1000 })).messages.length, 1);
  });
});

describe("tls", () => {
  let server: Server;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "onceq-ts-tls-"));
    const cert = join(dir, "cert.pem");
    const key = join(dir, "key.pem");
    execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
      "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert], { stdio: "ignore" });
    server = await startServer([], { cert, key });
  });
  after(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("https with the server's CA (NODE_EXTRA_CA_CERTS) in a child process", async () => {
    assert.ok(server.url.startsWith("https://"));
    const script = `
      import { Client } from ${JSON.stringify(new URL("../src/index.js", import.meta.url).href)};
      const c = new Client(process.argv[1]);
      await c.createTopic("tls");
      await c.produce("tls", "over tls");
      const b = await c.consume("tls", "g", "w", { maxMessages: 1, waitMs: 1000 });
      console.log(b.messages.map((m) => m.value).join(","));`;
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", script, server.url], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, "cert.pem") },
    });
    assert.equal(out.toString().trim(), "over tls");
  });

  it("an unknown certificate is refused", async () => {
    const e = await new Client(server.url, { retries: 0 }).listTopics().catch((err) => err);
    assert.ok(e instanceof onceq.TransportError);
    assert.match(String(e.message) + String((e as any).cause?.cause?.code ?? ""), /CERT|certificate|self.signed/i);
  });
});
