#include "storage/rocksdb/write_batch_rep.hpp"

#include <algorithm>
#include <limits>

#include "base/bytes.hpp"
#include "storage/rocksdb/insert_hint.hpp"

namespace onceq::storage {
namespace {

// RocksDB's record tags (db/dbformat.h, ValueType): the default family's
// (id 0) and the others', which name their family after the tag.
constexpr std::uint8_t k_tag_delete = 0x0, k_tag_put = 0x1;
constexpr std::uint8_t k_tag_cf_delete = 0x4, k_tag_cf_put = 0x5;
constexpr std::uint8_t k_tag_range_delete = 0xF, k_tag_cf_range_delete = 0xE;
// A record's bytes besides its key and value: the tag, a family id and two
// length varints of at most 5 bytes each.
constexpr std::size_t k_record_overhead = 16;

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
  constexpr std::size_t max = std::numeric_limits<std::uint32_t>::max();
  std::size_t size = 12;
  std::uint32_t count = 0;
  for (const auto& op : b.ops()) {
    if (!written(op)) continue;
    if (op.key.size() > max)
      return make_error(errc::internal, "building write batch: Invalid argument: key is too large");
    if (op.value.size() > max)
      return make_error(errc::internal,
                        "building write batch: Invalid argument: value is too large");
    // + 1: a range delete's begin key may grow by a byte (insert_hint.hpp).
    size += k_record_overhead + op.key.size() + 1 + op.value.size();
    ++count;
  }
  // RocksDB's varint32 and length-prefixed slices are base/bytes.hpp's
  // LEB128 varint and str(). The writer makes room for a whole 10-byte
  // varint at each: the slack keeps the last one from growing the buffer.
  byte_writer w;
  w.reserve(size + 10);
  w.fixed64(0);  // the sequence, set by RocksDB
  for (int i = 0; i < 4; ++i) w.byte(static_cast<std::uint8_t>((count >> (8 * i)) & 0xff));
  for (const batch::op* opp : apply_order(b)) {
    const auto& op = *opp;
    if (!written(op)) continue;
    const auto id = ids[static_cast<std::size_t>(op.col)];
    switch (op.k) {
      case batch::kind::put:
        w.byte(id == 0 ? k_tag_put : k_tag_cf_put);
        break;
      case batch::kind::del:
        w.byte(id == 0 ? k_tag_delete : k_tag_cf_delete);
        break;
      case batch::kind::del_range:
        w.byte(id == 0 ? k_tag_range_delete : k_tag_cf_range_delete);
        break;
    }
    if (id != 0) w.varint(id);
    if (op.k == batch::kind::del_range) {
      w.str(range_begin_outside_hint(op.col, op.key));
    } else {
      w.str(op.key);
    }
    if (op.k != batch::kind::del) w.str(op.value);
  }
  return w.take();
}

}  // namespace onceq::storage
