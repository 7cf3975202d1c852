#include "broker/order_table.hpp"

#include <fmt/format.h>

namespace onceq {

std::optional<position> order_table::release(entry& e, position pos) {
  if (e.holder && *e.holder == pos) {
    e.holder.reset();
    if (e.parked.empty()) return std::nullopt;
    auto next = *e.parked.begin();
    e.parked.erase(e.parked.begin());
    e.holder = next;
    return next;
  }
  e.parked.erase(pos);
  return std::nullopt;
}

order_table::entry order_table::get(std::string_view key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? entry{} : it->second;
}

const position* order_table::holder(std::string_view key) const {
  auto it = keys_.find(key);
  return it == keys_.end() || !it->second.holder ? nullptr : &*it->second.holder;
}

void order_table::hold(const std::string& key, position pos) {
  hold(keys_[key], pos);
}

void order_table::park(const std::string& key, position pos) {
  park(keys_[key], pos);
}

std::optional<position> order_table::release(const std::string& key, position pos) {
  if (key.empty()) return std::nullopt;
  auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  auto next = release(it->second, pos);
  if (it->second.empty()) keys_.erase(it);
  return next;
}

std::string order_table::describe() const {
  std::string out;
  for (const auto& [key, e] : keys_) {
    out += "    order ";
    for (unsigned char c : key) out += fmt::format("{:02x}", c);
    if (e.holder) out += fmt::format(" held={}/{}", e.holder->partition, e.holder->offset);
    for (const auto& p : e.parked) out += fmt::format(" parked={}/{}", p.partition, p.offset);
    out += '\n';
  }
  return out;
}

}  // namespace onceq
