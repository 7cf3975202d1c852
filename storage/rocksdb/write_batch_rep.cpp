#include "storage/rocksdb/write_batch_rep.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace onceq::storage {
namespace {

// RocksDB's record tags (db/dbformat.h, ValueType): the default family's
// (id 0) and the others', which name their family after the tag.
constexpr char k_tag_delete = 0x0, k_tag_put = 0x1;
constexpr char k_tag_cf_delete = 0x4, k_tag_cf_put = 0x5;
constexpr char k_tag_range_delete = 0xF, k_tag_cf_range_delete = 0xE;
constexpr std::size_t k_header = 12;  // sequence (8 bytes), count (4)

std::size_t varint32_size(std::uint32_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* put_varint32(char* p, std::uint32_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

char* put_slice(char* p, std::string_view s) {
  p = put_varint32(p, static_cast<std::uint32_t>(s.size()));
  if (!s.empty()) std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

bool written(const batch::op& op) {
  return op.k != batch::kind::del_range || op.key < op.value;
}

}  // namespace

std::vector<const batch::op*> apply_order(const batch& b) {
  std::vector<const batch::op*> order;
  order.reserve(b.size());
  bool sortable = true;
  for (const auto& op : b.ops()) {
    order.push_back(&op);
    sortable = sortable && op.k != batch::kind::del_range;
  }
  if (sortable && order.size() > 2) {
    std::stable_sort(order.begin(), order.end(), [](const batch::op* x, const batch::op* y) {
      if (x->col != y->col) return x->col < y->col;
      return x->key < y->key;
    });
  }
  return order;
}

result<std::string> write_batch_rep(const batch& b, const column_family_ids& ids) {
  const auto& ops = b.ops();
  constexpr std::size_t max = std::numeric_limits<std::uint32_t>::max();
  std::size_t size = k_header;
  std::uint32_t count = 0;
  for (const auto& op : ops) {
    if (!written(op)) continue;
    if (op.key.size() > max)
      return make_error(errc::internal, "building write batch: Invalid argument: key is too large");
    if (op.value.size() > max)
      return make_error(errc::internal,
                        "building write batch: Invalid argument: value is too large");
    const auto id = ids[static_cast<std::size_t>(op.col)];
    size += 1 + (id == 0 ? 0 : varint32_size(id));
    size += varint32_size(static_cast<std::uint32_t>(op.key.size())) + op.key.size();
    if (op.k != batch::kind::del)
      size += varint32_size(static_cast<std::uint32_t>(op.value.size())) + op.value.size();
    ++count;
  }
  std::string rep(size, '\0');
  char* p = rep.data();
  for (int i = 0; i < 4; ++i) p[8 + i] = static_cast<char>((count >> (8 * i)) & 0xff);
  p += k_header;
  for (const batch::op* opp : apply_order(b)) {
    const auto& op = *opp;
    if (!written(op)) continue;
    const auto id = ids[static_cast<std::size_t>(op.col)];
    switch (op.k) {
      case batch::kind::put:
        *p++ = id == 0 ? k_tag_put : k_tag_cf_put;
        break;
      case batch::kind::del:
        *p++ = id == 0 ? k_tag_delete : k_tag_cf_delete;
        break;
      case batch::kind::del_range:
        *p++ = id == 0 ? k_tag_range_delete : k_tag_cf_range_delete;
        break;
    }
    if (id != 0) p = put_varint32(p, id);
    p = put_slice(p, op.key);
    if (op.k != batch::kind::del) p = put_slice(p, op.value);
  }
  return rep;
}

}  // namespace onceq::storage
