#pragma once

// Where each shard's store lives under --data-dir: shard 0 in the data
// directory itself (so a data directory from before shards is shard 0 of
// any count), shard N > 0 in "shard-N" inside it. Each shard has its own
// RocksDB, and so its own WAL: its syncs cover only its own writes, and it
// is the unit a replicated shard will ship (docs/REPLICATION.md).

#include <cstdint>
#include <string>
#include <vector>

namespace onceq {

// The store directory of shard id.
std::string shard_data_dir(const std::string& data_dir, std::uint32_t id);

// Ids >= from of the shard directories present in data_dir (holding a
// RocksDB database), sorted.
std::vector<std::uint32_t> shard_dirs_from(const std::string& data_dir, std::uint32_t from);

}  // namespace onceq
