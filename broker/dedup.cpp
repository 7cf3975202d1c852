#include "broker/dedup.hpp"

#include <fmt/format.h>

namespace onceq {

namespace st = storage;

produce_dedup::produce_dedup(const produce_cmd& cmd, st::topic_id topic, millis window_ms,
                             const std::vector<std::string>& content_ids)
    : window_(window_ms), ids_(cmd.messages.size()), slot_(cmd.messages.size(), k_none) {
  for (std::size_t i = 0; i < cmd.messages.size(); ++i) {
    std::string& id = ids_[i];
    id = cmd.messages[i].msg_id;
    if (id.empty() && !cmd.idempotency_header.empty())
      id = cmd.messages.size() == 1 ? cmd.idempotency_header
                                    : fmt::format("{}#{}", cmd.idempotency_header, i);
    if (id.empty() && i < content_ids.size()) id = content_ids[i];
    if (id.empty() || window_ <= 0) continue;
    slot_[i] = keys_.size();
    keys_.push_back(st::keys::dedup(topic, id));
  }
}

void produce_dedup::load(st::store& store) {
  stored_ = store.multi_get(st::column::dedup, keys_);
}

result<std::optional<produced>> produce_dedup::earlier(std::size_t i, millis now) {
  if (slot_[i] == k_none) return std::optional<produced>{};
  if (auto it = seen_.find(ids_[i]); it != seen_.end()) {
    return std::optional<produced>{produced{it->second.partition, it->second.offset, true}};
  }
  auto& v = stored_[slot_[i]];
  if (v.ok()) {
    auto d = st::decode_dedup(*v);
    if (!d.ok()) return std::move(d).err();
    if (now < d->stored_at_ms + window_) {
      produced dup{d->partition, d->offset, true};
      seen_.emplace(ids_[i], dup);
      return std::optional<produced>{dup};
    }
  } else if (v.code() != errc::not_found) {
    return v.err();
  }
  return std::optional<produced>{};
}

void produce_dedup::remember(std::size_t i, produced at, millis now, txn& tx) {
  if (slot_[i] == k_none) return;
  tx.batch().put(st::column::dedup, keys_[slot_[i]],
                 st::encode(st::dedup_record{now + window_, at.partition, at.offset, now}));
  seen_.emplace(ids_[i], at);
}

}  // namespace onceq
