#pragma once

// The command table: for each command a shard runs, the broker call that
// runs it and the typed reply it answers. One row per command, and every
// way a command reaches a broker goes through its row: a single node's
// shard runs it on its loop (shard/local_path.hpp), and every replica of a
// cluster's shard runs it when it applies the log entry that carries it
// (apply_entry, broker/apply.hpp). A new command is one new row (and, if it
// changes state, one alternative of log_command with its wire tag).
//
// A row, command_traits<Cmd>:
//   using reply = ...;   what it answers (void: nothing but success)
//   static result<reply> run(broker&, const Cmd&);
// A command that changes state is an alternative of log_command
// (broker/log_entry.hpp): writes<Cmd>. Those run through run_command(),
// which answers a log_reply: a variant whose alternatives are exactly the
// distinct replies (std::monostate for void), so that reply_as<R> takes the
// reply back out by its type, never by guessing.
//
// Thread safety: as broker (one thread).

#include <cstdint>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "broker/broker.hpp"
#include "broker/log_entry.hpp"

namespace onceq {

// The replies that are not a broker type of their own.
struct consume_after_acks_reply {  // the acks' outcomes, then the deliveries
  std::vector<ack_outcome> acks;
  std::vector<delivery> deliveries;
};
struct lease_extended {  // POST /v1/extend
  millis lease_expires_at_ms = 0;
};
struct redriven {  // POST /v1/dlq/redrive
  std::int64_t moved = 0;
};

template <class Cmd>
struct command_traits;

template <>
struct command_traits<produce_cmd> {
  using reply = produce_reply;
  static result<reply> run(broker& b, const produce_cmd& c) { return b.produce(c); }
};

template <>
struct command_traits<consume_cmd> {
  using reply = std::vector<delivery>;  // empty: nothing ready (a long-poll parks in shard/)
  static result<reply> run(broker& b, const consume_cmd& c) { return b.consume(c); }
};

template <>
struct command_traits<ack_cmd> {
  using reply = ack_outcome;
  static result<reply> run(broker& b, const ack_cmd& c) { return b.ack(c); }
};

template <>
struct command_traits<outbox_append_cmd> {  // a target shard takes another's outbox
  using reply = std::vector<outbox_appended>;
  static result<reply> run(broker& b, const outbox_append_cmd& c) { return b.outbox_append(c); }
};

template <>
struct command_traits<outbox_done_cmd> {  // the source forgets what the targets took
  using reply = void;
  static result<reply> run(broker& b, const outbox_done_cmd& c) { return b.outbox_done(c); }
};

template <>
struct command_traits<ack_batch_cmd> {
  using reply = std::vector<ack_outcome>;
  static result<reply> run(broker& b, const ack_batch_cmd& c) { return b.ack_batch(c); }
};

// POST /v1/consume with "acks" (docs/API.md, "Acks carried on the next
// consume"): the acks first, exactly as ack_batch; an ack batch refused as
// a whole (unknown topic, storage refusing writes) is the answer and
// consumes nothing; then the consume, exactly as consume. A caller that
// must stop between the two steps (a single node's consume that parks, or
// reads the disk, after its acks are written) runs acks() and then
// command_traits<consume_cmd>, in this order; run() is both at once.
template <>
struct command_traits<consume_after_acks_cmd> {
  using reply = consume_after_acks_reply;
  static result<std::vector<ack_outcome>> acks(broker& b, const ack_batch_cmd& c) {
    return command_traits<ack_batch_cmd>::run(b, c);
  }
  static result<reply> run(broker& b, const consume_after_acks_cmd& c) {
    auto acked = acks(b, c.acks);
    if (!acked.ok()) return std::move(acked).err();
    auto got = command_traits<consume_cmd>::run(b, c.consume);
    if (!got.ok()) return std::move(got).err();
    return reply{std::move(*acked), std::move(*got)};
  }
};

template <>
struct command_traits<nack_cmd> {
  using reply = void;
  static result<reply> run(broker& b, const nack_cmd& c) { return b.nack(c); }
};

template <>
struct command_traits<extend_cmd> {
  using reply = lease_extended;
  static result<reply> run(broker& b, const extend_cmd& c) {
    auto at = b.extend(c);
    if (!at.ok()) return std::move(at).err();
    return reply{*at};
  }
};

template <>
struct command_traits<redrive_cmd> {
  using reply = redriven;
  static result<reply> run(broker& b, const redrive_cmd& c) {
    auto moved = b.redrive(c);
    if (!moved.ok()) return std::move(moved).err();
    return reply{*moved};
  }
};

template <>
struct command_traits<replay_cmd> {  // a dry run, or one page re-delivered
  using reply = replay_reply;
  static result<reply> run(broker& b, const replay_cmd& c) { return b.replay(c); }
};

template <>
struct command_traits<create_topic_cmd> {
  using reply = topic_created;
  static result<reply> run(broker& b, const create_topic_cmd& c) { return b.create_topic(c); }
};

template <>
struct command_traits<delete_topic_cmd> {
  using reply = void;
  static result<reply> run(broker& b, const delete_topic_cmd& c) { return b.delete_topic(c.name); }
};

template <>
struct command_traits<tick_cmd> {  // the timers due at the entry's time
  using reply = void;
  static result<reply> run(broker& b, const tick_cmd&) {
    b.tick();
    return {};
  }
};

template <>
struct command_traits<key_query> {  // a key's history (GET /v1/keys/history): read only
  using reply = key_history;
  static result<reply> run(broker& b, const key_query& q) { return b.get_key_history(q); }
};

// What a log_command answered: one alternative per distinct reply.
using log_reply =
    std::variant<std::monostate,  // void: tick, delete_topic, nack, outbox_done
                 topic_created, produce_reply, std::vector<delivery>, consume_after_acks_reply,
                 ack_outcome, std::vector<ack_outcome>, lease_extended, redriven, replay_reply,
                 std::vector<outbox_appended>>;

namespace detail {
template <class Cmd, class Variant>
struct is_alternative;
template <class Cmd, class... Ts>
struct is_alternative<Cmd, std::variant<Ts...>>
    : std::bool_constant<(std::is_same_v<Cmd, Ts> || ...)> {};
}  // namespace detail

// Whether Cmd changes state: it is a log entry's command (in a cluster,
// proposed to the shard's log; on a single node, answered once durable).
template <class Cmd>
inline constexpr bool writes = detail::is_alternative<Cmd, log_command>::value;

// The log_reply alternative that holds a reply R.
template <class R>
using reply_slot = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

// Runs cmd through its row, its reply as a log_reply. The command's own
// error is the answer, as from the broker's call.
result<log_reply> run_command(broker& b, const log_command& cmd);

// The reply of the command that answered r (R: its row's reply).
// errc::internal if r holds another command's reply (a bug, not a guess).
template <class R>
result<R> reply_as(result<log_reply> r) {
  if (!r.ok()) return std::move(r).err();
  if (auto* x = std::get_if<reply_slot<R>>(&*r)) {
    if constexpr (std::is_void_v<R>) {
      return {};
    } else {
      return std::move(*x);
    }
  }
  return make_error(errc::internal, "a command answered another command's reply");
}

}  // namespace onceq
