#include "storage/memory_store.hpp"

namespace onceq::storage {

result<void> memory_store::read_fault() {
  ++reads_;
  if (reads_left_ == npos) return {};
  if (reads_left_ == 0) return make_error(errc::unavailable, "injected read failure");
  --reads_left_;
  return {};
}

store_health memory_store::health() const {
  if (faulted_) return {false, "injected write failure"};
  return {};
}

result<resume_outcome> memory_store::resume() {
  if (fail_) return make_error(errc::unavailable, "injected write failure persists");
  faulted_ = false;
  return resume_as_;
}

result<void> memory_store::write(const batch& b) {
  if (writes_left_ == 0) fail_writes(true);
  if (writes_left_ != npos) --writes_left_;
  if (fail_) {
    faulted_ = true;
    return make_error(errc::unavailable, "injected write failure");
  }
  if (faulted_) return make_error(errc::unavailable, "storage is not writable");
  for (const auto& op : b.ops()) {
    auto& m = cols_[static_cast<int>(op.col)];
    switch (op.k) {
      case batch::kind::put:
        m.insert_or_assign(op.key, op.value);
        break;
      case batch::kind::del:
        m.erase(op.key);
        break;
      case batch::kind::del_range:
        if (op.key < op.value) m.erase(m.lower_bound(op.key), m.lower_bound(op.value));
        break;
    }
  }
  ++writes_;
  return {};
}

result<std::string> memory_store::get(column c, std::string_view key) {
  ONCEQ_TRY(read_fault());
  const auto& m = cols_[static_cast<int>(c)];
  auto it = m.find(key);
  if (it == m.end()) return make_error(errc::not_found, "no such key");
  return it->second;
}

result<void> memory_store::scan(column c, std::string_view begin, std::string_view end,
                                const visitor& fn) {
  ONCEQ_TRY(read_fault());
  const auto& m = cols_[static_cast<int>(c)];
  for (auto it = m.lower_bound(begin); it != m.end() && it->first < end; ++it) {
    if (!fn(it->first, it->second)) break;
  }
  return {};
}

result<std::string> memory_store::last_key(column c, std::string_view begin, std::string_view end) {
  ONCEQ_TRY(read_fault());
  const auto& m = cols_[static_cast<int>(c)];
  auto it = m.lower_bound(end);
  if (it == m.begin()) return make_error(errc::not_found, "empty range");
  --it;
  if (it->first < begin) return make_error(errc::not_found, "empty range");
  return it->first;
}

void memory_store::when_durable(std::function<void(result<void>)> done) {
  done({});
}

}  // namespace onceq::storage
