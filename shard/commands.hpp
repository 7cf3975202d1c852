#pragma once

// The typed seam between the edge and a shard: each command the HTTP layer
// sends to a shard is plain data (broker/commands.hpp), and command<Cmd>
// says what it answers and how the shard's broker runs it. shard::submit
// takes the command itself, not a closure over it, so that what crosses to
// a shard's loop is a value a reader (or a replicated log) can follow.
// Consume, long-poll and key waits have their own calls on shard (they
// park); topic creation and deletion also settle the placement map.

#include <cstdint>
#include <vector>

#include "broker/broker.hpp"

namespace onceq {

template <class Cmd>
struct command;  // reply: what it answers; run(broker&, const Cmd&)

template <>
struct command<produce_cmd> {
  using reply = produce_reply;
  static result<reply> run(broker& b, const produce_cmd& c) { return b.produce(c); }
};

template <>
struct command<ack_cmd> {
  using reply = void;
  static result<reply> run(broker& b, const ack_cmd& c) { return b.ack(c); }
};

template <>
struct command<ack_batch_cmd> {
  using reply = std::vector<ack_outcome>;
  static result<reply> run(broker& b, const ack_batch_cmd& c) { return b.ack_batch(c); }
};

template <>
struct command<nack_cmd> {
  using reply = void;
  static result<reply> run(broker& b, const nack_cmd& c) { return b.nack(c); }
};

template <>
struct command<extend_cmd> {
  using reply = millis;  // the new lease deadline
  static result<reply> run(broker& b, const extend_cmd& c) { return b.extend(c); }
};

template <>
struct command<redrive_cmd> {
  using reply = std::int64_t;  // messages moved
  static result<reply> run(broker& b, const redrive_cmd& c) { return b.redrive(c); }
};

template <>
struct command<key_query> {  // a key's history (GET /v1/keys/history)
  using reply = key_history;
  static result<reply> run(broker& b, const key_query& q) { return b.get_key_history(q); }
};

template <>
struct command<replay_cmd> {  // POST /v1/replay: a dry run, or one page re-delivered
  using reply = replay_reply;
  static result<reply> run(broker& b, const replay_cmd& c) { return b.replay(c); }
};

}  // namespace onceq
