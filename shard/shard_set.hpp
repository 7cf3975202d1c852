#pragma once

// The shards of one server and where each topic lives (its placement).
//
// A topic's shard is chosen when the topic is created (the shard with the
// fewest topics, the lowest id on a tie) and is where its records are
// stored, so a restart finds it there whatever --shards says (cmd/ refuses
// to start with fewer shards than hold topics). `dlq.<name>` lives on the
// shard of `<name>` and the other way round, whichever was created first:
// a dead letter is written in the same batch as the nack that caused it.
//
// Reading the placement (of(), the path of every request) takes no lock:
// each thread keeps the snapshot it saw last and refreshes it only when the
// placement's version moved (a topic was created or deleted). Changes are
// made under a mutex, by the create and delete commands on the topic's
// shard (so all changes to one name are ordered by that shard's loop): the
// set listens to each shard (shard::on_topic_change), so a create only has
// to go to place()'s shard.
//
// In a cluster the placement is a fixed function of the name instead
// (placement_rule::hashed: FNV-1a of the name, a DLQ's of its base, modulo
// the shard count), so that every node routes a name to the same shard
// without agreeing on a table; a cluster's nodes run the same --shards.
//
// Thread safety: every member may be called from any thread.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "shard/shard.hpp"

namespace onceq {

enum class placement_rule {
  balanced,  // the shard with the fewest topics at creation (a single node)
  hashed,    // a function of the name (a cluster)
};

class shard_set {
 public:
  // shards[i] has id i; at least one. They outlive the set, and their
  // loops stop before it goes (balanced: they report topic changes to it).
  explicit shard_set(std::vector<shard*> shards, placement_rule rule = placement_rule::balanced);
  shard_set(const shard_set&) = delete;
  shard_set& operator=(const shard_set&) = delete;

  std::size_t size() const noexcept { return shards_.size(); }
  shard& at(std::size_t i) const { return *shards_.at(i); }

  // Builds the placement from each shard's topics (broker::list_topics,
  // called on this thread: before the shards' loops start). Errors:
  // errc::failed_precondition when a topic is on two shards, or (hashed)
  // on another shard than its name's.
  result<void> load();

  // The shard of topic; for a name not placed (yet): the shard of its
  // DLQ's base (or its DLQ), else a fixed shard per name, whose broker then
  // answers "unknown topic" as usual.
  shard& of(std::string_view topic) const;
  // The id of the shard a topic is placed on, if it is.
  std::optional<std::uint32_t> placed_on(std::string_view topic) const;

  // For a create: the topic's shard if placed, else the chosen one, which
  // is reserved for the name at once (concurrent creates of one name meet
  // on one shard).
  shard& place(std::string_view topic);
  // On the topic's shard's loop, after its create or delete command
  // (shard::on_topic_change): records what the broker now holds.
  void settle(std::string_view topic, std::uint32_t shard_id, bool exists);

  // Topics per shard (metrics).
  std::vector<std::size_t> topic_counts() const;
  // Commands queued across all shards (backpressure).
  std::size_t queue_depth() const noexcept;

 private:
  using table = std::map<std::string, std::uint32_t, std::less<>>;
  std::shared_ptr<const table> snapshot() const;
  std::optional<std::uint32_t> lookup(const table& t, std::string_view topic) const;
  // mu_ held: a copy of the table with the change, published.
  void publish(table next);

  // placement_rule::hashed: the shard of a name.
  std::uint32_t hashed(std::string_view topic) const;

  std::vector<shard*> shards_;
  placement_rule rule_;
  const std::uint64_t instance_;  // tells this set's snapshots from another's per thread
  mutable std::mutex mu_;
  std::shared_ptr<const table> current_;  // mu_
  std::atomic<std::uint64_t> version_{1};
};

}  // namespace onceq
