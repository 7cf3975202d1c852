#include "shard/shard_set.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

namespace onceq {

namespace {

constexpr std::string_view k_dlq_prefix = "dlq.";

std::atomic<std::uint64_t> g_instances{0};

// The snapshot this thread saw last, of one set.
struct seen_placement {
  std::uint64_t instance = 0;
  std::uint64_t version = 0;
  std::shared_ptr<const void> table;
};
thread_local seen_placement t_seen;

bool is_dlq(std::string_view name) {
  return name.size() > k_dlq_prefix.size() && name.substr(0, k_dlq_prefix.size()) == k_dlq_prefix;
}

}  // namespace

shard_set::shard_set(std::vector<shard*> shards, placement_rule rule)
    : shards_(std::move(shards)),
      rule_(rule),
      instance_(g_instances.fetch_add(1) + 1),
      current_(std::make_shared<const table>()) {
  if (shards_.empty()) throw std::invalid_argument("shard_set needs at least one shard");
  if (rule_ != placement_rule::balanced) return;
  // A single node's placement follows what each shard holds: its creates
  // and deletes report to the set on the shard's loop.
  for (std::uint32_t id = 0; id < shards_.size(); ++id) {
    shards_[id]->on_topic_change(
        [this, id](std::string_view topic, bool exists) { settle(topic, id, exists); });
  }
}

std::shared_ptr<const shard_set::table> shard_set::snapshot() const {
  const std::uint64_t v = version_.load(std::memory_order_acquire);
  if (t_seen.instance != instance_ || t_seen.version != v) {
    std::lock_guard lk(mu_);
    t_seen.instance = instance_;
    t_seen.version = version_.load(std::memory_order_relaxed);
    t_seen.table = current_;
  }
  return std::static_pointer_cast<const table>(t_seen.table);
}

std::optional<std::uint32_t> shard_set::lookup(const table& t, std::string_view topic) const {
  if (auto it = t.find(topic); it != t.end()) return it->second;
  // A DLQ and its topic share a shard, whichever is placed.
  if (is_dlq(topic)) {
    if (auto it = t.find(topic.substr(k_dlq_prefix.size())); it != t.end()) return it->second;
  } else if (auto it = t.find(fmt::format("{}{}", k_dlq_prefix, topic)); it != t.end()) {
    return it->second;
  }
  return std::nullopt;
}

std::optional<std::uint32_t> shard_set::placed_on(std::string_view topic) const {
  return lookup(*snapshot(), topic);
}

std::uint32_t shard_set::hashed(std::string_view topic) const {
  if (is_dlq(topic)) topic = topic.substr(k_dlq_prefix.size());
  // FNV-1a, 64 bits: the same on every node and build (std::hash is not).
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : topic) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return static_cast<std::uint32_t>(h % shards_.size());
}

shard& shard_set::of(std::string_view topic) const {
  if (shards_.size() == 1) return *shards_[0];
  if (rule_ == placement_rule::hashed) return *shards_[hashed(topic)];
  if (auto id = placed_on(topic)) return *shards_[*id];
  // Not placed: any fixed shard answers "unknown topic"; the same one every
  // time, so that a name's requests do not wander.
  return *shards_[std::hash<std::string_view>{}(topic) % shards_.size()];
}

void shard_set::publish(table next) {
  current_ = std::make_shared<const table>(std::move(next));
  version_.fetch_add(1, std::memory_order_release);
}

shard& shard_set::place(std::string_view topic) {
  if (rule_ == placement_rule::hashed) return of(topic);
  std::lock_guard lk(mu_);
  if (auto id = lookup(*current_, topic)) return *shards_[*id];
  std::vector<std::size_t> counts(shards_.size(), 0);
  for (const auto& [name, id] : *current_) {
    if (!is_dlq(name)) ++counts[id];
  }
  const auto least =
      static_cast<std::uint32_t>(std::min_element(counts.begin(), counts.end()) - counts.begin());
  table next = *current_;
  next.emplace(std::string(topic), least);
  publish(std::move(next));
  return *shards_[least];
}

void shard_set::settle(std::string_view topic, std::uint32_t shard_id, bool exists) {
  if (rule_ == placement_rule::hashed) return;
  std::lock_guard lk(mu_);
  auto it = current_->find(topic);
  const bool listed = it != current_->end() && it->second == shard_id;
  if (exists == listed) return;
  table next = *current_;
  if (exists) {
    next.insert_or_assign(std::string(topic), shard_id);
  } else {
    next.erase(std::string(topic));
  }
  publish(std::move(next));
}

result<void> shard_set::load() {
  table t;
  for (std::uint32_t i = 0; i < shards_.size(); ++i) {
    // Before the loops start: this thread is the only one on the brokers.
    auto topics = shards_[i]->topics_before_start();
    for (auto& name : topics) {
      if (rule_ == placement_rule::hashed && hashed(name) != i) {
        return make_error(errc::failed_precondition,
                          fmt::format("topic \"{}\" is stored on shard {}, but its name places it "
                                      "on shard {} of {}: run the --shards it was created with",
                                      name, i, hashed(name), shards_.size()));
      }
      auto [it, fresh] = t.emplace(name, i);
      if (!fresh) {
        return make_error(
            errc::failed_precondition,
            fmt::format("topic \"{}\" is stored on shard {} and on shard {}", name, it->second, i));
      }
    }
  }
  std::lock_guard lk(mu_);
  publish(std::move(t));
  return {};
}

std::vector<std::size_t> shard_set::topic_counts() const {
  std::vector<std::size_t> counts(shards_.size(), 0);
  for (const auto& [name, id] : *snapshot()) ++counts[id];
  return counts;
}

std::size_t shard_set::queue_depth() const noexcept {
  std::size_t n = 0;
  for (const auto* s : shards_) n += s->queue_depth();
  return n;
}

}  // namespace onceq
