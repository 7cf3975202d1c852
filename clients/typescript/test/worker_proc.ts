/** A worker process for the tests: prints one JSON event per line.
 * usage: worker_proc.js URL TOPIC GROUP OWNER [--sleep MS] */

import { Client, Worker } from "../src/index.js";

const [url, topic, group, owner, ...rest] = process.argv.slice(2);
const sleepIdx = rest.indexOf("--sleep");
const sleepMs = sleepIdx >= 0 ? Number(rest[sleepIdx + 1]) : 0;
const waitIdx = rest.indexOf("--wait-ms");
const waitMs = waitIdx >= 0 ? Number(rest[waitIdx + 1]) : 1000;
const emit = (event: string, fields: Record<string, unknown> = {}) => process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");

const worker = new Worker(new Client(url), topic!, group!, { owner: owner!, waitMs });
worker.handler(async (job) => {
  emit("started", { offset: job.offset, attempts: job.attempts, token: job.fencingToken, key: job.idempotencyKey ?? null, value: job.value });
  // Sleeps like a well-behaved handler: until done, or until job.signal
  // aborts (the lease was lost, or the worker released the job).
  await new Promise<void>((r) => {
    const t = setTimeout(r, sleepMs);
    job.signal.addEventListener("abort", () => (clearTimeout(t), r()), { once: true });
  });
  emit("finished", { offset: job.offset, leaseLost: job.leaseLost, stopping: job.stopping });
  return { by: owner, offset: job.offset };
});
emit("ready", { owner: worker.owner });
await worker.run();
const s = worker.stats;
emit("stopped", { acked: s.acked, nacked: s.nacked, extended: s.extended, stale: s.stale, released: s.released, received: s.received });
