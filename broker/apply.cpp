#include "broker/apply.hpp"

#include <algorithm>
#include <type_traits>
#include <utility>

namespace onceq {

namespace {

// A broker call's result as a log_reply.
template <class T, class Wrap>
result<log_reply> as_reply(result<T> r, Wrap wrap) {
  if (!r.ok()) return std::move(r).err();
  return log_reply{wrap(std::move(*r))};
}

result<log_reply> as_reply(result<void> r) {
  if (!r.ok()) return std::move(r).err();
  return log_reply{std::monostate{}};
}

template <class T>
result<log_reply> as_reply(result<T> r) {
  return as_reply(std::move(r), [](T v) { return v; });
}

}  // namespace

result<log_reply> apply_entry(broker& b, log_clock& time, const log_entry& e) {
  time.advance_to(e.now_ms);
  return std::visit(
      [&b](const auto& c) -> result<log_reply> {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, tick_cmd>) {
          b.tick();
          return log_reply{std::monostate{}};
        } else if constexpr (std::is_same_v<T, create_topic_cmd>) {
          return as_reply(b.create_topic(c));
        } else if constexpr (std::is_same_v<T, delete_topic_cmd>) {
          return as_reply(b.delete_topic(c.name));
        } else if constexpr (std::is_same_v<T, produce_cmd>) {
          return as_reply(b.produce(c));
        } else if constexpr (std::is_same_v<T, consume_cmd>) {
          return as_reply(b.consume(c));
        } else if constexpr (std::is_same_v<T, consume_after_acks_cmd>) {
          // As shard::consume_after_acks: the acks first, exactly as
          // ack_batch; an ack batch refused as a whole consumes nothing.
          auto acked = b.ack_batch(c.acks);
          if (!acked.ok()) return std::move(acked).err();
          auto got = b.consume(c.consume);
          if (!got.ok()) return std::move(got).err();
          return log_reply{consume_after_acks_reply{std::move(*acked), std::move(*got)}};
        } else if constexpr (std::is_same_v<T, ack_cmd>) {
          return as_reply(b.ack(c));
        } else if constexpr (std::is_same_v<T, ack_batch_cmd>) {
          return as_reply(b.ack_batch(c));
        } else if constexpr (std::is_same_v<T, nack_cmd>) {
          return as_reply(b.nack(c));
        } else if constexpr (std::is_same_v<T, extend_cmd>) {
          return as_reply(b.extend(c), [](millis at) { return lease_extended{at}; });
        } else if constexpr (std::is_same_v<T, redrive_cmd>) {
          return as_reply(b.redrive(c), [](std::int64_t n) { return redriven{n}; });
        } else {
          static_assert(std::is_same_v<T, replay_cmd>, "a log command without its apply");
          return as_reply(b.replay(c));
        }
      },
      e.cmd);
}

result<std::optional<log_reply>> apply_at(broker& b, log_clock& time,
                                          storage::applied_index_store& applied,
                                          std::uint64_t index, const log_entry& e) {
  if (index <= applied.applied().index) return std::optional<log_reply>{};
  // The reading the entry runs at, as apply_entry will set it.
  applied.begin({index, std::max(time.now_ms(), e.now_ms)});
  auto r = apply_entry(b, time, e);
  applied.begin({});
  if (!r.ok()) return std::move(r).err();
  return std::optional<log_reply>(std::move(*r));
}

void resume_clock(log_clock& time, const storage::applied_index_store& applied) {
  time.advance_to(applied.applied().now_ms);
}

}  // namespace onceq
