#pragma once

// Internal to broker/: how the modules are wired for one broker. Each
// member is a module that owns its own state; commands reach them through
// this context and change them only by committing a txn.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/clock.hpp"
#include "broker/commands.hpp"
#include "broker/options.hpp"
#include "broker/partition_log.hpp"
#include "broker/timers.hpp"
#include "broker/topic_registry.hpp"
#include "storage/store.hpp"

namespace onceq {

struct core {
  core(storage::store& s, const clock& c, const message_inspector* i, broker_options o)
      : store(s),
        time(c),
        inspector(i),
        opts(o),
        cache(o.message_cache_bytes, [this](storage::topic_id t, std::uint32_t p) {
          auto* tp = topics.find(t);
          return tp != nullptr && p < tp->parts.size() ? &tp->parts[p] : nullptr;
        }) {}

  storage::store& store;
  const clock& time;
  const message_inspector* inspector;  // may be null (broker's constructor)
  broker_options opts;
  topic_registry topics;
  message_cache cache;
  timer_queue timers;
  // Wake-up hints for the runner: topics that got ready messages, keys
  // committed (storage keys of idem_key). Not state: losing one only delays
  // a long-poll until its next check.
  std::set<std::string> ready_topics;
  std::vector<std::string> committed_keys;
  millis next_retention_ms = 0;
  // The outbox (broker/step.hpp): the next sequence to hand out (stored as
  // keys::outbox_next in the batch of the ack that takes it), and the
  // records still in it, by sequence, with their creation time.
  std::uint64_t outbox_next = 1;
  std::map<std::uint64_t, millis> outbox;
};

}  // namespace onceq
