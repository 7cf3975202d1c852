#include "broker/topic_registry.hpp"

#include "broker/records.hpp"
#include "broker/txn.hpp"

#include <algorithm>

namespace onceq {

group_state* topic::find_group(std::string_view name) const {
  auto it = groups.find(name);
  return it == groups.end() ? nullptr : it->second.get();
}

group_state* topic::find_group(storage::group_id id) const {
  auto it = groups_by_id.find(id);
  return it == groups_by_id.end() ? nullptr : it->second;
}

std::unique_ptr<group_state> topic::make_group(storage::group_id id, std::string name) const {
  auto g = std::make_unique<group_state>();
  g->id = id;
  g->name = std::move(name);
  g->parts.resize(parts.size());
  for (std::size_t p = 0; p < parts.size(); ++p) g->parts[p].cursor = parts[p].start;
  return g;
}

group_state& topic::add_group(std::unique_ptr<group_state> g) {
  auto* raw = g.get();
  groups_by_id[raw->id] = raw;
  next_group_id = std::max(next_group_id, raw->id + 1);
  groups.emplace(raw->name, std::move(g));
  return *raw;
}

std::uint64_t topic::backlog() const {
  std::uint64_t n = 0;
  for (const auto& p : parts) n += p.size();
  return n;
}

std::vector<std::uint64_t> topic::partition_next() const {
  std::vector<std::uint64_t> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(p.next);
  return out;
}

topic_info topic::info() const {
  topic_info out;
  out.name = rec.name;
  out.partitions = rec.partitions;
  out.settings = to_api(rec.settings);
  out.produced = produced;
  out.produce_duplicates = produce_duplicates;
  out.produce_already_committed = produce_already_committed;
  auto next = partition_next();
  for (const auto& [name, g] : groups) out.groups.emplace(name, g->snapshot(next));
  return out;
}

topic* topic_registry::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.get();
}

topic* topic_registry::find(storage::topic_id id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

topic* topic_registry::find(std::string_view name, const txn& tx) const {
  if (auto* t = find(name)) return t;
  for (auto* t : tx.new_topics())
    if (t->rec.name == name) return t;
  return nullptr;
}

std::unique_ptr<topic> topic_registry::make(storage::topic_record rec) {
  auto t = std::make_unique<topic>();
  t->rec = std::move(rec);
  t->parts.resize(t->rec.partitions);
  for (std::uint32_t p = 0; p < t->parts.size(); ++p) {
    t->parts[p].topic = t->rec.id;
    t->parts[p].index = p;
  }
  return t;
}

topic& topic_registry::add(storage::topic_record rec) {
  return add(make(std::move(rec)));
}

topic& topic_registry::create(storage::topic_record rec, txn& tx) {
  storage::topic_id id = next_id_;
  for (const auto* t : tx.new_topics()) id = std::max(id, t->rec.id + 1);
  rec.id = id;
  tx.batch().put(storage::column::meta, storage::keys::topic(rec.name), storage::encode(rec));
  tx.batch().put(storage::column::meta, storage::keys::next_topic_id(),
                 storage::encode_u64(id + 1));
  // std::function needs a copyable callable: the effect holds the topic
  // through a shared_ptr until it hands it to the registry.
  auto owned = std::make_shared<std::unique_ptr<topic>>(make(std::move(rec)));
  topic& t = **owned;
  tx.note_new_topic(t);
  tx.then([this, owned] { add(std::move(*owned)); });
  return t;
}

topic& topic_registry::add(std::unique_ptr<topic> t) {
  auto* raw = t.get();
  by_id_[raw->rec.id] = raw;
  next_id_ = std::max(next_id_, raw->rec.id + 1);
  by_name_.emplace(raw->rec.name, std::move(t));
  return *raw;
}

void topic_registry::remove(std::string_view name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  by_id_.erase(it->second->rec.id);
  by_name_.erase(it);
}

void topic_registry::clear() {
  by_name_.clear();
  by_id_.clear();
  next_id_ = 1;
}

std::vector<std::string> topic_registry::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) out.push_back(name);
  return out;
}

}  // namespace onceq
