#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "storage/batch.hpp"

namespace onceq::storage {

// The order in which a batch's ops go into the WriteBatch. A batch is applied atomically and only
// the last op on a key counts, so ops may be reordered as long as ops on the same key keep their
// order: sorted by (family, key), stably, each memtable's inserts come in
// key order, and RocksDB's skiplist then inserts next to the previous key
// (its cached splice) instead of searching from the top. A produce of 100
// messages over 4 partitions otherwise jumps between 4 regions of the
// messages family at every insert. A range delete overlaps keys it does not
// name: batches with one keep their order, and so do batches of one or two
// ops.
std::vector<const batch::op*> apply_order(const batch& b);

// The column family id of each column (index: the column's value).
using column_family_ids = std::array<std::uint32_t, k_column_count>;

// b's ops, in apply_order, as the contents of a rocksdb::WriteBatch (its
// `rep`: the WAL record format, a 12-byte header of sequence 0 and the
// record count, then one record per op), built in one pass instead of one
// WriteBatch::Put per op. The same bytes as WriteBatch::Put, Delete and
// DeleteRange would make on a fresh batch without timestamps or protection
// info (tests/unit/storage/rocksdb_store_test.cpp compares them). An empty
// range (begin >= end) is left out, as memory_store deletes nothing for it
// and RocksDB would reject it. A range delete's begin key goes through
// range_begin_outside_hint (insert_hint.hpp). A key or value over 4 GiB
// fails, with WriteBatch's own message.
result<std::string> write_batch_rep(const batch& b, const column_family_ids& ids);

}  // namespace onceq::storage
