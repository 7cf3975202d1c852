#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "broker/group_state.hpp"
#include "broker/partition_log.hpp"
#include "storage/schema.hpp"

namespace onceq {

class txn;

// A topic: its stored record (name, id, settings), its partitions and its
// consumer groups.
struct topic {
  storage::topic_record rec;
  std::vector<partition_log> parts;
  std::map<std::string, std::unique_ptr<group_state>, std::less<>> groups;
  std::unordered_map<storage::group_id, group_state*> groups_by_id;
  storage::group_id next_group_id = 1;
  std::uint64_t produced = 0;
  std::uint64_t produce_duplicates = 0;
  std::uint64_t produce_already_committed = 0;

  group_state* find_group(std::string_view name) const;
  group_state* find_group(storage::group_id id) const;
  // A new group, positioned at the oldest retained message of each partition
  // (docs/API.md, Concepts / Group). Not added yet: see add_group.
  std::unique_ptr<group_state> make_group(storage::group_id id, std::string name) const;
  group_state& add_group(std::unique_ptr<group_state> g);
  // Stored messages not yet deleted by retention, over all partitions.
  std::uint64_t backlog() const;
  std::vector<std::uint64_t> partition_next() const;
  topic_info info() const;
};

// Every topic by name and by id, and the id allocator.
class topic_registry {
 public:
  topic* find(std::string_view name) const;
  topic* find(storage::topic_id id) const;
  // The topic named name: in the registry, or one that tx creates.
  topic* find(std::string_view name, const txn& tx) const;
  topic& add(storage::topic_record rec);
  // Creates rec's topic as part of tx: its record and the next topic id go
  // into tx's batch, and the topic joins the registry when tx commits (not
  // at all if it fails). rec.id is assigned here, the next free id counting
  // the topics tx creates already. Until then find(name, tx) finds it.
  topic& create(storage::topic_record rec, txn& tx);
  void remove(std::string_view name);
  void clear();

  storage::topic_id next_id() const noexcept { return next_id_; }
  void set_next_id(storage::topic_id id) noexcept { next_id_ = id; }

  std::vector<std::string> names() const;  // sorted
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const auto& [name, t] : by_name_) fn(*t);
  }
  std::size_t size() const noexcept { return by_name_.size(); }

 private:
  static std::unique_ptr<topic> make(storage::topic_record rec);
  topic& add(std::unique_ptr<topic> t);

  std::map<std::string, std::unique_ptr<topic>, std::less<>> by_name_;
  std::unordered_map<storage::topic_id, topic*> by_id_;
  storage::topic_id next_id_ = 1;
};

}  // namespace onceq
