#pragma once

#include <rocksdb/file_system.h>

#include <cstdint>
#include <memory>
#include <string_view>

namespace onceq::storage {

// A RocksDB FileSystem that writes zeros ahead of the end of every WAL file,
// so that the WAL's appends overwrite blocks the file already has instead of
// growing it.
//
// Why: on ext4 (and xfs) an fdatasync after an append that grew the file, or
// wrote into fallocate'd (unwritten) extents, must also commit the inode's
// size or extent change through the journal: a second, ordered device write.
// An fdatasync after overwriting written blocks only writes the data. On
// this machine's disk that is 145-200 us against 100-125 us per synced
// append (docs/BENCHMARKS.md), and under `--fsync always` every answer waits
// for one. PostgreSQL zero-fills its WAL segments for the same reason.
//
// How: before an append would come within half a chunk of the zeroed end,
// zeros are written up to the chunk boundary at least a chunk past it
// (pwrite on a second descriptor, so 0.5-2 chunks stay ahead; the
// next sync makes them durable with the data). Close truncates the file to
// what RocksDB wrote. A crash can leave a zero tail: RocksDB's WAL reader
// reads a zero header as padding (kZeroType, length 0) and skips it, the
// same as the preallocated regions its mmap writer used to leave.
//
// Only files named like WALs (`<digits>.log`) are wrapped; everything else is
// passed through. If the second descriptor cannot be opened or a zero write
// fails, the file carries on as a plain append-only file.
class prezeroed_wal_file_system final : public rocksdb::FileSystemWrapper {
 public:
  explicit prezeroed_wal_file_system(const std::shared_ptr<rocksdb::FileSystem>& base,
                                     std::uint64_t chunk);

  const char* Name() const override { return "onceq.prezeroed_wal"; }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;

  // Whether fname's last path component is a WAL file name.
  static bool is_wal_name(std::string_view fname);

 private:
  std::uint64_t chunk_;
};

}  // namespace onceq::storage
