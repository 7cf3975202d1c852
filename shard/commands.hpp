#pragma once

// The typed seam between the edge and a shard: each command the HTTP layer
// sends to a shard is plain data (broker/commands.hpp), and command<Cmd>
// says what it answers and how the shard's broker runs it. shard::submit
// takes the command itself, not a closure over it, so that what crosses to
// a shard's loop is a value a reader (or a replicated log) can follow.
// Consume, long-poll and key waits have their own calls on shard (they
// park); topic creation and deletion also settle the placement map on a
// single node. `writes`: the command changes state, and in a cluster is
// proposed to the shard's log (broker/log_entry.hpp); reply_of turns what
// its apply answered (log_reply) back into its reply.

#include <cstdint>
#include <vector>

#include <type_traits>
#include <utility>
#include <variant>

#include "broker/apply.hpp"
#include "broker/broker.hpp"
#include "broker/log_entry.hpp"

namespace onceq {

template <class Cmd>
struct command;  // reply: what it answers; run(broker&, const Cmd&)

template <>
struct command<produce_cmd> {
  using reply = produce_reply;
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const produce_cmd& c) { return b.produce(c); }
};

template <>
struct command<ack_cmd> {
  using reply = void;
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const ack_cmd& c) { return b.ack(c); }
};

template <>
struct command<ack_batch_cmd> {
  using reply = std::vector<ack_outcome>;
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const ack_batch_cmd& c) { return b.ack_batch(c); }
};

template <>
struct command<nack_cmd> {
  using reply = void;
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const nack_cmd& c) { return b.nack(c); }
};

template <>
struct command<extend_cmd> {
  using reply = millis;  // the new lease deadline
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const extend_cmd& c) { return b.extend(c); }
};

template <>
struct command<redrive_cmd> {
  using reply = std::int64_t;  // messages moved
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const redrive_cmd& c) { return b.redrive(c); }
};

template <>
struct command<key_query> {  // a key's history (GET /v1/keys/history)
  using reply = key_history;
  static constexpr bool writes = false;
  static result<reply> run(broker& b, const key_query& q) { return b.get_key_history(q); }
};

template <>
struct command<replay_cmd> {  // POST /v1/replay: a dry run, or one page re-delivered
  using reply = replay_reply;
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const replay_cmd& c) { return b.replay(c); }
};

template <>
struct command<create_topic_cmd> {
  using reply = topic_created;
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const create_topic_cmd& c) { return b.create_topic(c); }
};

template <>
struct command<delete_topic_cmd> {
  using reply = void;
  static constexpr bool writes = true;
  static result<reply> run(broker& b, const delete_topic_cmd& c) { return b.delete_topic(c.name); }
};

// What an applied entry answered, as the reply of the command it carried.
template <class R>
result<R> reply_of(result<log_reply> r) {
  if (!r.ok()) return std::move(r).err();
  log_reply& v = *r;
  if constexpr (std::is_void_v<R>) {
    if (std::holds_alternative<std::monostate>(v)) return {};
  } else if constexpr (std::is_same_v<R, std::int64_t>) {  // millis too
    if (auto* x = std::get_if<lease_extended>(&v)) return x->lease_expires_at_ms;
    if (auto* x = std::get_if<redriven>(&v)) return x->moved;
  } else {
    if (auto* x = std::get_if<R>(&v)) return std::move(*x);
  }
  return make_error(errc::internal, "a log entry's apply answered another command's reply");
}

}  // namespace onceq
