/**
 * Orders paid through a (simulated) payment API, with a worker killed
 * mid-payment: nobody is charged twice.
 *
 *   node dist/examples/payments.js demo [--url http://127.0.0.1:8080]
 *
 * runs the whole story against a running onceqd: it starts a fake payment
 * API (which, like Stripe's, remembers each Idempotency-Key), produces five
 * orders and a duplicate, starts a worker, kills it with SIGKILL in the
 * middle of a payment (after the API charged the card, before the worker
 * heard back), starts a second worker, and prints the ledger.
 *
 *   node dist/examples/payments.js worker --url URL --payments URL --topic T
 *
 * is one worker (what you would deploy); the demo runs it as a subprocess.
 * (In your code, import from "@onceq/client" instead of "../src/index.js".)
 */

import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { Client, Worker, defaultOwner, type Job } from "../src/index.js";

const GROUP = "billing";

interface Order {
  order_id: string;
  customer: string;
  amount_cents: number;
}

// -- the worker ------------------------------------------------------------------

async function chargeCard(paymentsUrl: string, order: Order, idempotencyKey: string, signal: AbortSignal) {
  const resp = await fetch(`${paymentsUrl}/charges`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": idempotencyKey },
    body: JSON.stringify(order),
    signal,
  });
  if (!resp.ok) throw new Error(`payment API answered ${resp.status}`);
  return (await resp.json()) as { charge_id: string };
}

async function runWorker(url: string, paymentsUrl: string, topic: string, name: string): Promise<void> {
  const worker = new Worker(new Client(url), topic, GROUP, { owner: name, waitMs: 1000 });
  worker.handler(async (job: Job) => {
    const order = job.json<Order>();
    console.log(`  ${name}: paying ${order.order_id} (attempt ${job.attempts})`);
    // The payment is the side effect that must not happen twice: the
    // message's idempotency key goes to the payment API, so a redelivery
    // after a crash replays the first charge.
    const charge = await chargeCard(paymentsUrl, order, job.idempotencyKey ?? job.stepId, job.signal);
    return { charge_id: charge.charge_id };
  });
  await worker.run();
  console.log(`  ${name}: stopped (${worker.stats.acked} acked)`);
}

// -- the fake payment API -----------------------------------------------------------

class PaymentApi {
  readonly charges = new Map<string, Order & { charge_id: string }>();
  readonly attempts: string[] = [];
  killOn: string | undefined;
  victim: ChildProcess | undefined;
  killed = false;
  url = "";
  private onKilled: () => void = () => {};
  readonly whenKilled = new Promise<void>((r) => (this.onKilled = r));
  readonly server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const key = String(req.headers["idempotency-key"]);
      const order = JSON.parse(body) as Order;
      this.attempts.push(order.order_id);
      const replay = this.charges.has(key);
      if (!replay) this.charges.set(key, { charge_id: `ch_${this.charges.size + 1}`, ...order });
      const charge = this.charges.get(key)!;
      if (replay) console.log(`[payments] ${order.order_id}: key ${key} seen before -> ${charge.charge_id} replayed, card NOT charged again`);
      else console.log(`[payments] ${order.order_id}: charged $${(order.amount_cents / 100).toFixed(2)} -> ${charge.charge_id}`);
      if (order.order_id === this.killOn && this.victim && !this.killed) {
        console.log(`[payments] ...and worker pid ${this.victim.pid} is killed (SIGKILL) before it hears back`);
        this.killed = true;
        this.victim.once("exit", () => this.onKilled());
        this.victim.kill("SIGKILL");
        req.socket.destroy();
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(charge));
    });
  });

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
}

// -- the demo ------------------------------------------------------------------------

async function demo(url: string): Promise<number> {
  const client = new Client(url);
  const topic = `orders-demo-${process.pid}`;
  // A short lease so that the killed worker's payment comes back in 2 s.
  await client.createTopic(topic, { partitions: 1, leaseMs: 2000 });
  const api = new PaymentApi();
  api.killOn = "order-3";
  await api.start();
  console.log(`payment API on ${api.url}; onceq at ${url}; topic ${topic}`);

  const orders: Order[] = [1, 2, 3, 4, 5].map((i) => ({ order_id: `order-${i}`, customer: `customer-${i}`, amount_cents: 1000 * i }));
  for (const o of orders) await client.produce(topic, o, { key: o.customer, idempotencyKey: `charge:${o.order_id}` });
  await client.produce(topic, orders[1], { key: orders[1]!.customer, idempotencyKey: "charge:order-2" }); // a double click
  console.log(`produced ${orders.length} orders and a duplicate of order-2`);

  const self = fileURLToPath(import.meta.url);
  const start = (name: string) =>
    spawn(process.execPath, [self, "worker", "--url", url, "--payments", api.url, "--topic", topic, "--name", name], { stdio: "inherit" });

  const first = (api.victim = start("worker-1"));
  const timeout = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 30000).unref());
  if ((await Promise.race([api.whenKilled, timeout])) === "timeout") {
    first.kill("SIGKILL");
    console.log("FAIL: the first worker never reached order-3");
    return 1;
  }
  const second = start("worker-2");
  const secondExit = new Promise((r) => second.once("exit", r));
  try {
    for (const o of orders) {
      const k = await client.getKey(topic, GROUP, `charge:${o.order_id}`, { waitMs: 20000 });
      if (k.state !== "committed") {
        console.log(`FAIL: ${o.order_id} not committed: ${JSON.stringify(k)}`);
        return 1;
      }
    }
  } finally {
    second.kill("SIGTERM");
    await secondExit;
    api.server.close();
  }

  console.log("\nledger (payment API):");
  const perOrder = new Map<string, number>();
  for (const ch of [...api.charges.values()].sort((a, b) => a.charge_id.localeCompare(b.charge_id))) {
    perOrder.set(ch.order_id, (perOrder.get(ch.order_id) ?? 0) + 1);
    console.log(`  ${ch.charge_id}  ${ch.order_id}  $${(ch.amount_cents / 100).toFixed(2)}`);
  }
  const g = (await client.getTopic(topic)).groups[GROUP]!;
  console.log(`payment attempts: ${api.attempts.length} (order-3 twice: once by the killed worker, once replayed)`);
  console.log(`onceq: acked ${g.acked}, duplicates auto-acked ${g.autoAcked}, redelivered ${g.redelivered}`);
  await client.deleteTopic(topic);
  const twice = [...perOrder].filter(([, n]) => n > 1).map(([o]) => o);
  if (twice.length || perOrder.size !== orders.length) {
    console.log(`FAIL: charged twice: ${twice}; charged orders: ${[...perOrder.keys()]}`);
    return 1;
  }
  console.log(`OK: ${orders.length} orders, ${api.charges.size} charges: nobody was charged twice`);
  return 0;
}

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    url: { type: "string", default: process.env.ONCEQ_URL ?? "http://127.0.0.1:8080" },
    payments: { type: "string" },
    topic: { type: "string" },
    name: { type: "string" },
  },
});
if (positionals[0] === "demo") {
  process.exitCode = await demo(values.url!);
} else if (positionals[0] === "worker" && values.payments && values.topic) {
  await runWorker(values.url!, values.payments, values.topic, values.name ?? defaultOwner());
} else {
  console.error("usage: payments.js demo [--url URL] | worker --url URL --payments URL --topic T [--name N]");
  process.exitCode = 2;
}
