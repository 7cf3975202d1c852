// onceq-neighbour-probe: how long a WAL's synced appends take while another
// file on the same file system is written or deleted the ways RocksDB's
// flushes, compactions and file deletions do it. It is the measurement
// behind `strict_bytes_per_sync` (storage/rocksdb/db_open.cpp) and behind
// docs/BENCHMARKS.md's fifteenth round (the aged tail's stalls).
//
//   onceq-neighbour-probe [DIR] [ROUNDS] [FILE_MIB]      (/tmp 3 32)
//
// One thread plays the WAL: a 4 KiB pwrite + fdatasync every 0.2 ms over a
// file written and synced beforehand (onceqd's zeroed WAL, so no sync needs
// the journal for a new size). Another thread plays the neighbour, once per
// way and round, on a FILE_MIB file:
//   write        64 KiB writes, then one fsync;
//   range-sync   sync_file_range(WRITE) after each MiB (RocksDB's bytes_per_sync);
//   strict       the same, waiting for the earlier MiBs first (strict_bytes_per_sync);
//   unlink       unlink of a written, synced file (RocksDB's default deletion);
//   truncate     the same file cut 2 MiB at a time with an fsync, 8 ms apart
//                (RocksDB's DeleteScheduler at 256 MiB/s, 2 MiB chunks).
// For each, the worst and the p99 WAL sync that began while the neighbour
// worked or within 10 ms after, and how long the neighbour took. A failed
// call ends the probe with its errno message and exit status 1.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "probe_args.hpp"

namespace {

using onceq::bench::failed;

using clock_type = std::chrono::steady_clock;

enum class way { write, range_sync, strict, unlink, truncate };

struct named_way {
  way w;
  const char* name;
};
constexpr named_way k_ways[] = {{way::write, "write"},
                                {way::range_sync, "range-sync"},
                                {way::strict, "strict"},
                                {way::unlink, "unlink"},
                                {way::truncate, "truncate"}};

constexpr std::size_t k_mib = 1u << 20;
constexpr std::size_t k_wal_bytes = 64 * k_mib;  // the WAL wraps around inside it

// One synced append: when it began and how long it took.
struct sync_sample {
  clock_type::time_point at;
  double ms;
};

// The WAL thread's samples, read by the main thread between rounds.
class wal_player {
 public:
  explicit wal_player(std::string path) : path_(std::move(path)) {}
  ~wal_player() {
    if (fd_ < 0) return;
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  wal_player(const wal_player&) = delete;
  wal_player& operator=(const wal_player&) = delete;

  // Writes and syncs the whole file once, so that later appends overwrite.
  std::string prepare() {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return failed("open " + path_);
    const std::vector<char> zeros(k_mib, 0);
    for (std::size_t off = 0; off < k_wal_bytes; off += k_mib) {
      if (::pwrite(fd_, zeros.data(), k_mib, static_cast<off_t>(off)) !=
          static_cast<ssize_t>(k_mib))
        return failed("pwrite " + path_);
    }
    if (::fsync(fd_) != 0) return failed("fsync " + path_);
    return {};
  }

  void run() {
    const std::vector<char> data(4096, 'w');
    std::size_t off = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      const auto t0 = clock_type::now();
      if (::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(off)) !=
              static_cast<ssize_t>(data.size()) ||
          ::fdatasync(fd_) != 0) {
        std::lock_guard lk(mu_);
        error_ = failed("WAL append");
        return;
      }
      const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
      {
        std::lock_guard lk(mu_);
        samples_.push_back({t0, ms});
      }
      off = (off + data.size()) % k_wal_bytes;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void stop() { stop_.store(true); }

  // Samples that began in [from, to), sorted by duration; and the error.
  std::vector<double> between(clock_type::time_point from, clock_type::time_point to,
                              std::string& error) {
    std::lock_guard lk(mu_);
    error = error_;
    std::vector<double> out;
    for (const auto& s : samples_)
      if (s.at >= from && s.at < to) out.push_back(s.ms);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<sync_sample> samples_;
  std::string error_;
};

// Writes size bytes to path the given way (write, range_sync, strict) and
// fsyncs it.
std::string write_file(const std::string& path, std::size_t size, way w) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed("open " + path);
  const std::vector<char> block(64u << 10, 's');
  std::size_t off = 0, started = 0;
  std::string err;
  while (off < size && err.empty()) {
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
      err = failed("write " + path);
      break;
    }
    off += block.size();
    if (w != way::write && off - started >= k_mib) {
      const unsigned flags = w == way::strict ? SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE
                                              : SYNC_FILE_RANGE_WRITE;
      const off_t from = w == way::strict ? 0 : static_cast<off_t>(started);
      if (::sync_file_range(fd, from, static_cast<off_t>(off) - from, flags) != 0)
        err = failed("sync_file_range " + path);
      started = off;
    }
  }
  if (err.empty() && ::fsync(fd) != 0) err = failed("fsync " + path);
  ::close(fd);
  return err;
}

// Deletes path, a file of size bytes, by unlink or by 2 MiB truncations.
std::string delete_file(const std::string& path, std::size_t size, way w) {
  if (w == way::truncate) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return failed("open " + path);
    std::string err;
    for (std::size_t left = size; left > 0 && err.empty();) {
      left -= std::min(left, 2 * k_mib);
      if (::ftruncate(fd, static_cast<off_t>(left)) != 0 || ::fsync(fd) != 0)
        err = failed("ftruncate " + path);
      std::this_thread::sleep_for(std::chrono::milliseconds(8));
    }
    ::close(fd);
    if (!err.empty()) return err;
  }
  if (::unlink(path.c_str()) != 0) return failed("unlink " + path);
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* k_usage =
      "usage: onceq-neighbour-probe [DIR] [ROUNDS] [FILE_MIB]  (/tmp 3 32)\n";
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const auto parsed = onceq::bench::positive_args(argc, argv, 2, "onceq-neighbour-probe", k_usage);
  if (!parsed) return 2;
  const std::vector<long>& nums = *parsed;
  const long rounds = nums.size() > 0 ? std::clamp<long>(nums[0], 1, 100) : 3;
  const std::size_t size =
      static_cast<std::size_t>(nums.size() > 1 ? std::clamp<long>(nums[1], 2, 1024) : 32) * k_mib;
  const std::string base = dir + "/onceq-neighbour-probe." + std::to_string(::getpid());

  wal_player wal(base + ".wal");
  if (auto err = wal.prepare(); !err.empty()) {
    std::fprintf(stderr, "onceq-neighbour-probe: %s\n", err.c_str());
    return 1;
  }
  std::thread player([&wal] { wal.run(); });
  const std::string file = base + ".sst";
  std::string error;
  std::printf(
      "| neighbour | round | took ms | WAL syncs | p99 ms | worst ms |\n"
      "|---|---:|---:|---:|---:|---:|\n");
  for (long r = 1; r <= rounds && error.empty(); ++r) {
    for (const auto& [w, name] : k_ways) {
      const bool deletes = w == way::unlink || w == way::truncate;
      // A deletion needs a written file; it is written, synced and left to
      // settle for 300 ms outside the measured window.
      if (deletes) {
        error = write_file(file, size, way::strict);
        if (!error.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const auto from = clock_type::now();
      error = deletes ? delete_file(file, size, w) : write_file(file, size, w);
      const auto done = clock_type::now();
      if (!error.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::string wal_error;
      const auto s = wal.between(from, done + std::chrono::milliseconds(10), wal_error);
      if (!wal_error.empty()) {
        error = wal_error;
        break;
      }
      if (!deletes && ::unlink(file.c_str()) != 0) {
        error = failed("unlink " + file);
        break;
      }
      std::printf("| %s | %ld | %.1f | %zu | %.2f | %.2f |\n", name, r,
                  std::chrono::duration<double, std::milli>(done - from).count(), s.size(),
                  s.empty() ? 0.0 : s[s.size() * 99 / 100], s.empty() ? 0.0 : s.back());
      std::fflush(stdout);
    }
  }
  wal.stop();
  player.join();
  ::unlink(file.c_str());
  if (!error.empty()) {
    std::fprintf(stderr, "onceq-neighbour-probe: %s\n", error.c_str());
    return 1;
  }
  return 0;
}
