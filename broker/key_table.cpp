#include "broker/key_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace onceq {

const position* key_table::holder(std::string_view scope) const {
  auto it = leased_.find(scope);
  return it == leased_.end() ? nullptr : &it->second;
}

bool key_table::held_by_other(const std::string& scope, position pos) const {
  const auto* h = holder(scope);
  return h != nullptr && *h != pos;
}

void key_table::lease(const std::string& scope, position pos) {
  leased_[scope] = pos;
}

void key_table::park(const std::string& scope, position pos) {
  parked_[scope].push_back(pos);
}

std::vector<position> key_table::release(const std::string& scope, position pos) {
  if (scope.empty()) return {};
  if (auto it = leased_.find(scope); it != leased_.end() && it->second == pos) leased_.erase(it);
  auto pk = parked_.find(scope);
  if (pk == parked_.end()) return {};
  auto waiting = std::move(pk->second);
  parked_.erase(pk);
  return waiting;
}

void key_table::clear() {
  leased_.clear();
  parked_.clear();
}

std::string key_table::describe() const {
  std::map<std::string_view, std::string> sorted;
  for (const auto& [scope, p] : leased_)
    sorted[scope] += fmt::format(" leased={}/{}", p.partition, p.offset);
  for (const auto& [scope, ps] : parked_) {
    auto& s = sorted[scope];
    for (const auto& p : ps) s += fmt::format(" parked={}/{}", p.partition, p.offset);
  }
  std::string out;
  for (const auto& [scope, s] : sorted) {
    out += "    key ";
    for (unsigned char c : scope) out += fmt::format("{:02x}", c);
    out += s;
    out += '\n';
  }
  return out;
}

result<storage::key_record> key_table::live(storage::store& store, std::string_view scope,
                                            millis now) {
  auto v = store.get(storage::column::keys, scope);
  if (!v.ok()) return std::move(v).err();
  auto k = storage::decode_key(*v);
  if (!k.ok()) return k;
  if (k->expires_at_ms != 0 && k->expires_at_ms <= now)
    return make_error(errc::not_found, "key expired");
  return k;
}

}  // namespace onceq
