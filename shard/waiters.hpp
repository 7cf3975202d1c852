#pragma once

// The parked requests of a shard (shard.cpp, shard_replicated.cpp): a
// long-poll consume and a wait for a key's commit. Loop only.

#include <chrono>
#include <functional>
#include <vector>

#include "shard/shard.hpp"

namespace onceq {

struct shard::waiter {
  consume_cmd cmd;
  std::chrono::steady_clock::time_point deadline;
  std::function<void(result<std::vector<delivery>>)> done;
  // The command wrote before it parked (acks carried on the consume): its
  // empty answer too waits for durability.
  bool wrote = false;
  // Cluster: a consume_after_acks entry's answer, taken apart (the acks go
  // into done, the deliveries are returned).
  std::function<std::vector<delivery>(result<consume_after_acks_reply>)> on_acked{};
  bool retried = false;  // cluster: its first entry was applied
};

struct shard::key_waiter {
  key_query q;
  std::chrono::steady_clock::time_point deadline;
  std::function<void(result<key_info>)> done;
};

}  // namespace onceq
