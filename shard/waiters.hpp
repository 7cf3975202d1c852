#pragma once

// The parked requests of a shard: a consume that may long-poll (and may
// carry the previous batch's acks), and a wait for a key's commit. The
// shard keeps them on its loop and answers them (shard.hpp); its apply path
// tries them against the broker (apply_path.hpp). Loop only, once handed
// to the shard.

#include <chrono>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "broker/dispatch.hpp"

namespace onceq {

struct consume_waiter {
  consume_cmd cmd;
  std::chrono::steady_clock::time_point deadline;
  // consume_after_acks: the acks its first try applies before the consume
  // (command_traits<consume_after_acks_cmd>), then their outcomes.
  std::optional<ack_batch_cmd> acks;
  std::vector<ack_outcome> acked;
  // The acks were applied: its answer, an empty one too, waits until they
  // are durable.
  bool wrote = false;
  // One of the two is set: a consume's answer, or a consume_after_acks's.
  std::function<void(result<std::vector<delivery>>)> done;
  std::function<void(result<consume_after_acks_reply>)> done_acked;

  void finish(result<std::vector<delivery>> r) {
    if (!done_acked) return done(std::move(r));
    if (!r.ok()) return done_acked(std::move(r).err());
    done_acked(consume_after_acks_reply{std::move(acked), std::move(*r)});
  }
};

struct key_waiter {
  key_query q;
  std::chrono::steady_clock::time_point deadline;
  std::function<void(result<key_info>)> done;
};

}  // namespace onceq
