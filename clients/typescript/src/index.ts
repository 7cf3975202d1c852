/**
 * @onceq/client: client, producer and worker for the onceq broker, on
 * Node 20's built-in fetch (no runtime dependencies).
 *
 * ```ts
 * import { Client, Worker } from "@onceq/client";
 * const worker = new Worker(new Client("http://127.0.0.1:8080"), "orders", "billing");
 * worker.handler(async (job) => ({ chargeId: await pay(job.json(), job.idempotencyKey ?? job.stepId) }));
 * await worker.run();
 * ```
 */
export { Client, VERSION } from "./client.js";
export type { ClientOptions } from "./client.js";
export {
  Conflict,
  Fenced,
  Forbidden,
  InternalError,
  InvalidArgument,
  MethodNotAllowed,
  NotFound,
  OnceqError,
  PayloadTooLarge,
  ResourceExhausted,
  TransportError,
  Unauthorized,
  Unavailable,
} from "./errors.js";
export { ackItemOf } from "./types.js";
export type * from "./types.js";
export { Complete, Fail, Job, LeaseLost, Retry, Worker, defaultOwner } from "./worker.js";
export type { Handler, Logger, WorkerOptions, WorkerStats } from "./worker.js";
