/** Typed results of the onceq client: the answers of docs/API.md, with
 * camelCase field names. */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The envelope as sent on the wire (snake_case, docs/API.md). */
export type Envelope = Record<string, unknown>;

export interface Health {
  ok: boolean;
  status: string;
  reason: string;
}

export interface Version {
  version: string;
  commit: string;
  walEnabled: boolean;
}

/** Topic settings of `POST /v1/topics`; only the ones given are sent. */
export interface TopicSettings {
  partitions?: number;
  leaseMs?: number;
  maxAttempts?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  keyTtlMs?: number;
  dedupWindowMs?: number;
  retentionMs?: number;
  maxBacklogMessages?: number;
  maxBacklogBytes?: number;
  maxInflight?: number;
  idempotencyKeyFields?: string[];
  idempotencyKeyIncludeTopic?: boolean;
  idempotencyKeyOptional?: boolean;
  dedupByContent?: boolean;
  keyConflict?: "hold" | "supersede";
  keyHistory?: boolean;
  /** `"key"`: within a group, at most one message per `key` is leased at a time, in offset order. Default `"none"`. */
  ordering?: "none" | "key";
}

export interface TopicCreated {
  name: string;
  partitions: number;
  status: string;
}

export interface GroupCounters {
  backlog: number;
  inflight: number;
  acked: number;
  autoAcked: number;
  redelivered: number;
  deadLettered: number;
  superseded: number;
}

export interface TopicInfo {
  name: string;
  partitions: number;
  /** The settings as the server reports them, camelCased (`leaseMs`, ...). */
  settings: Record<string, unknown>;
  groups: Record<string, GroupCounters>;
}

/** One group's commit of an idempotency key (`skipIfCommitted`). */
export interface Commit {
  committedAtMs: number;
  owner: string;
  result?: Json;
}

/**
 * The answer to one produced message: `status` is `"produced"` (with
 * `partition`, `offset`, and `duplicate` when the dedup window answered an
 * earlier copy) or `"already_committed"` (nothing stored; `committed` holds
 * each `skipIfCommitted` group's commit). `msgId` is the dedup id sent,
 * the same on every retry.
 */
export interface ProduceResult {
  status: "produced" | "already_committed";
  alreadyCommitted: boolean;
  topic: string;
  partition?: number;
  offset?: number;
  duplicate: boolean;
  committed: Record<string, Commit>;
  msgId?: string;
}

export interface ProduceOptions {
  key?: string;
  idempotencyKey?: string;
  /** Groups: if the key is committed in every one, nothing is stored. */
  skipIfCommitted?: string[];
  /** The dedup id; default a random UUID, kept across retries. */
  msgId?: string;
  /** false: send no dedup id, and do not retry network errors. */
  dedup?: boolean;
  tenantId?: string;
  partition?: number;
  delayMs?: number;
  keyTtlMs?: number;
  headers?: Record<string, string>;
  /** Any other envelope field, snake_case as on the wire (`step_id`, `retry_policy`, ...). */
  envelope?: Envelope;
}

/** A message of `produceBatch`. A value that is not a string is sent as JSON text. */
export interface MessageInput {
  value: unknown;
  key?: string;
  idempotencyKey?: string;
  msgId?: string;
  envelope?: Envelope;
}

/**
 * A message an ack produces: a workflow step's next message, stored in the
 * same atomic step as the ack (`AckItem.produce`, `client.ack`'s `produce`,
 * `Complete`, `job.produce`). Shaped like a single produce: a value that
 * is not a string is sent as JSON text; no dedup id is added (the ack is
 * the step's once-only guard).
 */
export interface StepMessage extends MessageInput {
  topic: string;
}

/**
 * Where one message an ack produced went, in the ack's `produce` order:
 * `status` `"produced"` (with `partition`, `offset`, and `duplicate` when
 * the target topic's dedup window answered an earlier copy) or `"pending"`
 * (its target shard could not take it yet; the broker's outbox delivers
 * it later). Either way it is stored with the ack.
 */
export interface Produced {
  topic: string;
  status: "produced" | "pending";
  pending: boolean;
  partition?: number;
  offset?: number;
  duplicate: boolean;
}

/** One consumed message. */
export interface Delivery {
  topic: string;
  partition: number;
  offset: number;
  attempts: number;
  key: string;
  value: string;
  lastError: string;
  envelope: Envelope;
  leaseExpiresAtMs: number;
  fencingToken: number;
}

/** One item of a batch ack, or of the acks carried on a consume. */
export interface AckItem {
  partition: number;
  offset: number;
  attempts?: number;
  fencingToken?: number;
  /** Stored with the committed key; left out when undefined. */
  result?: Json;
  /**
   * Messages stored with this ack, atomically (at most 1000); left out
   * when undefined. `ack` and `ackBatch` take it; the acks carried on a
   * consume do not.
   */
  produce?: StepMessage[];
}

/**
 * One item's outcome: `error` holds the code when `status` is "error";
 * `produced`, where the item's `produce` messages went (present when the
 * answer has it: the item carried `produce`).
 */
export interface AckResult {
  partition: number;
  offset: number;
  status: "acked" | "error";
  ok: boolean;
  error?: string;
  produced?: Produced[];
}

export interface ConsumeOptions {
  /** 1..1000, default 1. */
  maxMessages?: number;
  /** How long to wait for the first message, 0..60000; default 0. */
  waitMs?: number;
  leaseMs?: number;
  deadlineMs?: number;
  /** The previous batch's acks, applied first in the same round trip. */
  acks?: AckItem[];
  signal?: AbortSignal;
}

export interface ConsumeResult {
  messages: Delivery[];
  /** The results of the carried acks, in order ([] when none). */
  acks: AckResult[];
}

export interface DeliveryRef {
  partition: number;
  offset: number;
  attempts?: number;
  fencingToken?: number;
}

export interface KeyState {
  state: "none" | "leased" | "committed" | "failed";
  owner?: string;
  partition?: number;
  offset?: number;
  attempts?: number;
  fencingToken?: number;
  leaseExpiresAtMs?: number;
  committedAtMs?: number;
  expiresAtMs?: number;
  result?: Json;
}

export interface KeyEvent {
  event: string;
  atMs: number;
  owner?: string;
  partition?: number;
  offset?: number;
  attempts?: number;
  fencingToken?: number;
  reason?: string;
  resultBytes?: number;
}

/** `AckItem` for a delivery, fenced on its attempt and token; with `produce`, the messages stored with the ack. */
export function ackItemOf(d: Delivery, result?: Json, produce?: StepMessage[]): AckItem {
  const item: AckItem = { partition: d.partition, offset: d.offset, attempts: d.attempts, fencingToken: d.fencingToken };
  if (result !== undefined) item.result = result;
  if (produce !== undefined) item.produce = produce;
  return item;
}
