#include "storage/rocksdb/wal_prezero.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace onceq::storage {
namespace {

using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// Zeros written per pwritev: one iovec per 64 KiB of the same buffer.
constexpr std::size_t k_zero_block = 64u << 10;
constexpr std::size_t k_max_iov = 64;
const std::array<char, k_zero_block> k_zeros{};

// Writes zeros over [from, to) of fd. False on any failure.
bool write_zeros(int fd, std::uint64_t from, std::uint64_t to) {
  std::array<iovec, k_max_iov> iov{};
  while (from < to) {
    int n = 0;
    std::uint64_t len = 0;
    while (n < static_cast<int>(k_max_iov) && from + len < to) {
      const auto part =
          static_cast<std::size_t>(std::min<std::uint64_t>(k_zero_block, to - from - len));
      iov[n].iov_base = const_cast<char*>(k_zeros.data());  // pwritev only reads it
      iov[n].iov_len = part;
      len += part;
      ++n;
    }
    const ssize_t w = ::pwritev(fd, iov.data(), n, static_cast<off_t>(from));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    from += static_cast<std::uint64_t>(w);
  }
  return true;
}

// A WAL file with zeros ahead of its end. RocksDB appends to a WAL from one
// thread at a time (the write group's leader), so appends need no lock; the
// syncer's concurrent Sync only calls fdatasync, which also makes the zeros
// durable.
class prezeroed_wal_file final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  prezeroed_wal_file(std::unique_ptr<FSWritableFile> base, int fd, std::uint64_t chunk,
                     std::uint64_t size)
      : FSWritableFileOwnerWrapper(std::move(base)),
        fd_(fd),
        chunk_(chunk),
        end_(size),
        zeroed_(size) {}

  ~prezeroed_wal_file() override { release(); }
  prezeroed_wal_file(const prezeroed_wal_file&) = delete;
  prezeroed_wal_file& operator=(const prezeroed_wal_file&) = delete;

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* dbg) override {
    zero_ahead(data.size());
    auto s = FSWritableFileOwnerWrapper::Append(data, o, dbg);
    if (s.ok()) end_ += data.size();
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    zero_ahead(data.size());
    auto s = FSWritableFileOwnerWrapper::Append(data, o, info, dbg);
    if (s.ok()) end_ += data.size();
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, std::uint64_t offset, const IOOptions& o,
                            IODebugContext* dbg) override {
    auto s = FSWritableFileOwnerWrapper::PositionedAppend(data, offset, o, dbg);
    if (s.ok()) end_ = std::max(end_, offset + data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, std::uint64_t offset, const IOOptions& o,
                            const rocksdb::DataVerificationInfo& info,
                            IODebugContext* dbg) override {
    auto s = FSWritableFileOwnerWrapper::PositionedAppend(data, offset, o, info, dbg);
    if (s.ok()) end_ = std::max(end_, offset + data.size());
    return s;
  }
  IOStatus Truncate(std::uint64_t size, const IOOptions& o, IODebugContext* dbg) override {
    auto s = FSWritableFileOwnerWrapper::Truncate(size, o, dbg);
    if (s.ok()) end_ = zeroed_ = size;
    return s;
  }
  IOStatus Close(const IOOptions& o, IODebugContext* dbg) override {
    auto s = FSWritableFileOwnerWrapper::Close(o, dbg);
    // A closed WAL is as long as what was written to it; the zeros go.
    if (fd_ >= 0 && zeroed_ > end_ && ::ftruncate(fd_, static_cast<off_t>(end_)) != 0 && s.ok())
      s = IOStatus::IOError("truncating the WAL's zero tail", std::strerror(errno));
    release();
    return s;
  }

 private:
  // Keeps at least half a chunk of zeros past the end of the next append.
  void zero_ahead(std::size_t n) {
    if (fd_ < 0) return;
    const std::uint64_t end = end_ + n;
    if (end + chunk_ / 2 <= zeroed_) return;
    const std::uint64_t from = std::max(zeroed_, end);
    const std::uint64_t to = (end + chunk_ + chunk_ - 1) / chunk_ * chunk_;
    if (!write_zeros(fd_, from, to)) {
      release();  // carries on as a plain append-only file
      return;
    }
    // Starts their writeback now, so that the sync that commits the new size
    // does not also wait for a chunk of zeros.
    (void)::sync_file_range(fd_, static_cast<off_t>(from), static_cast<off_t>(to - from),
                            SYNC_FILE_RANGE_WRITE);
    zeroed_ = to;
  }

  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_;
  std::uint64_t chunk_;
  std::uint64_t end_;     // bytes RocksDB wrote
  std::uint64_t zeroed_;  // the file holds data or zeros up to here
};

}  // namespace

prezeroed_wal_file_system::prezeroed_wal_file_system(
    const std::shared_ptr<rocksdb::FileSystem>& base, std::uint64_t chunk)
    : FileSystemWrapper(base), chunk_(std::max<std::uint64_t>(chunk, k_zero_block)) {}

bool prezeroed_wal_file_system::is_wal_name(std::string_view fname) {
  const auto slash = fname.find_last_of('/');
  const auto name = slash == std::string_view::npos ? fname : fname.substr(slash + 1);
  constexpr std::string_view ext = ".log";
  if (name.size() <= ext.size() || !name.ends_with(ext)) return false;
  const auto stem = name.substr(0, name.size() - ext.size());
  return std::all_of(stem.begin(), stem.end(), [](char c) { return c >= '0' && c <= '9'; });
}

rocksdb::IOStatus prezeroed_wal_file_system::NewWritableFile(
    const std::string& fname, const rocksdb::FileOptions& opts,
    std::unique_ptr<rocksdb::FSWritableFile>* result, rocksdb::IODebugContext* dbg) {
  auto s = target()->NewWritableFile(fname, opts, result, dbg);
  if (!s.ok() || !is_wal_name(fname) || opts.use_direct_writes) return s;
  const int fd = ::open(fname.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return s;  // a plain WAL: slower syncs, nothing lost
  const auto size = (*result)->GetFileSize(rocksdb::IOOptions(), dbg);
  *result = std::make_unique<prezeroed_wal_file>(std::move(*result), fd, chunk_, size);
  return s;
}

}  // namespace onceq::storage
