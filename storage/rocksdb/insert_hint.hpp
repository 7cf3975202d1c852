#pragma once

// RocksDB's memtable insert hint for the families whose keys arrive in
// order within a prefix. Messages are keyed (topic, partition, offset) and
// deliveries (topic, group, partition, offset) (storage/schema.hpp): both
// are written in offset order within their partition, and an ack's delete
// lands on the key its lease wrote. With
// memtable_insert_with_hint_prefix_extractor the memtable keeps, per
// prefix, where the last insert went (a skiplist splice) and starts the
// next one there instead of descending from the head: 29,917 -> 27,539
// instructions per drained message (docs/BENCHMARKS.md, "Twelfth round").
//
// The catch, in RocksDB 7.8: MemTable::Add looks the hint up for a range
// tombstone too, by its begin key, in the same map, and inserts it into the
// range tombstones' own skiplist with a splice of the point keys' one. The
// insert fails ("key+seq exists", then "two consecutive TryAgain in
// WriteBatch handler", and the store stops taking writes) or corrupts that
// skiplist. So only keys of the family's exact size are in the hint's
// domain, and write_batch_rep puts every range delete's begin key through
// range_begin_outside_hint(): a key of another size that bounds the same
// keys of the family (all of which have that exact size).

#include <cstddef>
#include <memory>
#include <string>

#include <rocksdb/slice_transform.h>

#include "storage/batch.hpp"

namespace onceq::storage {

struct insert_hint_shape {
  std::size_t key_size = 0;     // keys of exactly this size get a hint
  std::size_t prefix_size = 0;  // their first prefix_size bytes name it
};

// The shape of column c's keys that get a hint; key_size 0 for none.
insert_hint_shape insert_hint_of(column c) noexcept;

// The prefix extractor for c's ColumnFamilyOptions; null for none.
std::shared_ptr<const rocksdb::SliceTransform> insert_hint_extractor(column c);

// A range delete's begin key for column c as it goes into the WriteBatch:
// begin itself unless it has the hinted size; else the key of size + 1
// that is begin - 1 (as a big-endian number) followed by a 0xff byte, or,
// for an all-zero begin, begin without its last byte. Either sorts before
// begin and after every key below it of the hinted size or that size + 1
// (a lease run's key, keys::lease_run): [result, end) holds the same keys
// of those sizes as [begin, end).
std::string range_begin_outside_hint(column c, std::string begin);

}  // namespace onceq::storage
