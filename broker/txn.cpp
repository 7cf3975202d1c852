#include "broker/txn.hpp"

#include "broker/partition_log.hpp"

#include <algorithm>

namespace onceq {

std::uint64_t txn::append_offset(partition_log& p) {
  auto [it, fresh] = next_.try_emplace(&p, p.next);
  return it->second++;
}

std::uint64_t txn::peek_offset(const partition_log& p) const {
  auto it = next_.find(const_cast<partition_log*>(&p));
  return it == next_.end() ? p.next : it->second;
}

txn::savepoint txn::mark() const {
  savepoint s{batch_.size(), effects_.size(), new_topics_.size(), next_, counters_, {}};
  for (const auto& [key, h] : history_)
    s.history.emplace(key, std::make_pair(h.events.size(), h.expires_at));
  return s;
}

void txn::rollback(const savepoint& s) {
  batch_.truncate(s.ops);
  effects_.resize(s.effects);
  new_topics_.resize(s.new_topics);
  next_ = s.next;
  counters_ = s.counters;
  for (auto it = history_.begin(); it != history_.end();) {
    auto was = s.history.find(it->first);
    if (was == s.history.end()) {
      it = history_.erase(it);
    } else {
      it->second.events.resize(was->second.first);
      it->second.expires_at = was->second.second;
      ++it;
    }
  }
}

std::uint64_t txn::take(std::uint64_t& counter) {
  auto [it, fresh] = counters_.try_emplace(&counter, counter);
  return it->second++;
}

void txn::record(std::string history_key, millis expires_at, storage::history_event ev) {
  auto& h = history_[std::move(history_key)];
  h.expires_at = expires_at;
  h.events.push_back(std::move(ev));
}

result<void> txn::commit(storage::store& store) {
  for (auto& [key, pending] : history_) {
    storage::history_record rec;
    auto v = store.get(storage::column::keys, key);
    if (v.ok()) {
      auto old = storage::decode_history(*v);
      if (!old.ok()) return std::move(old).err();
      rec = std::move(*old);
    } else if (v.code() != errc::not_found) {
      return std::move(v).err();
    }
    // An expired history (its key is gone) starts over.
    if (rec.expires_at_ms != 0 && !pending.events.empty() &&
        rec.expires_at_ms <= pending.events.front().at_ms)
      rec.events.clear();
    // The key lives as long as its longest-lived event asks.
    rec.expires_at_ms =
        rec.expires_at_ms == 0 && !rec.events.empty()
            ? 0
            : (pending.expires_at == 0 ? 0 : std::max(rec.expires_at_ms, pending.expires_at));
    for (auto& e : pending.events) rec.events.push_back(std::move(e));
    if (rec.events.size() > storage::k_history_max)
      rec.events.erase(rec.events.begin(),
                       rec.events.end() - static_cast<std::ptrdiff_t>(storage::k_history_max));
    batch_.put(storage::column::keys, key, storage::encode(rec));
  }
  history_.clear();
  if (!batch_.empty()) {
    auto r = store.write(batch_);
    if (!r.ok()) return storage_unavailable("storage write failed: " + r.err().message);
  }
  for (auto& [p, next] : next_) p->next = next;
  for (auto& [counter, next] : counters_) *counter = next;
  counters_.clear();
  for (auto& fn : effects_) fn();
  effects_.clear();
  next_.clear();
  new_topics_.clear();
  batch_.clear();
  return {};
}

error storage_unavailable(std::string reason) {
  error e = make_error(errc::unavailable, std::move(reason));
  e.retry_after_ms = k_storage_retry_after_ms;
  return e;
}

}  // namespace onceq
