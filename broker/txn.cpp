#include "broker/txn.hpp"

#include "broker/partition_log.hpp"

namespace onceq {

std::uint64_t txn::append_offset(partition_log& p) {
  auto [it, fresh] = next_.try_emplace(&p, p.next);
  return it->second++;
}

std::uint64_t txn::peek_offset(const partition_log& p) const {
  auto it = next_.find(const_cast<partition_log*>(&p));
  return it == next_.end() ? p.next : it->second;
}

result<void> txn::commit(storage::store& store) {
  if (!batch_.empty()) {
    auto r = store.write(batch_);
    if (!r.ok()) return storage_unavailable("storage write failed: " + r.err().message);
  }
  for (auto& [p, next] : next_) p->next = next;
  for (auto& fn : effects_) fn();
  effects_.clear();
  next_.clear();
  batch_.clear();
  return {};
}

error storage_unavailable(std::string reason) {
  error e = make_error(errc::unavailable, std::move(reason));
  e.retry_after_ms = k_storage_retry_after_ms;
  return e;
}

}  // namespace onceq
