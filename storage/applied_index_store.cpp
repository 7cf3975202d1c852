#include "storage/applied_index_store.hpp"

#include "base/bytes.hpp"
#include "storage/schema.hpp"

namespace onceq::storage {

namespace {

constexpr std::uint8_t k_applied_version = 1;

std::string encode_position(const applied_position& p) {
  byte_writer w;
  w.byte(k_applied_version);
  w.varint(p.index);
  w.svarint(p.now_ms);
  return w.take();
}

}  // namespace

result<applied_position> decode_applied_position(std::string_view value) {
  byte_reader r(value);
  std::uint8_t version = 0;
  applied_position p;
  if (!r.byte(version) || version != k_applied_version || !r.varint(p.index) ||
      !r.svarint(p.now_ms) || !r.at_end()) {
    return make_error(errc::internal, "corrupt record: the applied log position");
  }
  return p;
}

result<applied_position> applied_index_store::load() {
  auto v = inner_.get(column::meta, keys::applied());
  if (v.code() == errc::not_found) {
    applied_ = {};
    return applied_;
  }
  if (!v.ok()) return std::move(v).err();
  auto p = decode_applied_position(*v);
  if (p.ok()) applied_ = *p;
  return p;
}

result<void> applied_index_store::write(const batch& b) {
  if (current_.index == 0) return inner_.write(b);  // not applying an entry
  batch stamped = b;
  stamped.put(column::meta, keys::applied(), encode_position(current_));
  auto r = inner_.write(stamped);
  if (r.ok()) applied_ = current_;
  return r;
}

}  // namespace onceq::storage
