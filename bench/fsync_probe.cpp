// onceq-fsync-probe: how long one synced append takes on a directory's file
// system, in the three ways a log file can be grown. It is the measurement
// behind onceqd's WAL zeros (storage/rocksdb/wal_prezero.hpp, flag
// --wal-prezero-kb): run it on the data directory's file system to see
// whether they pay off there.
//
//   onceq-fsync-probe [DIR] [APPENDS] [CHUNK_KIB] [BYTES...]
//                                          (/tmp, 2000, 256, 4096 32768)
//
// CHUNK_KIB is onceqd's --wal-prezero-kb (default 256). A failed call ends
// the probe with its errno message and exit status 1.
//
// For each append size, one file per way, APPENDS times write(2) + fdatasync:
//   grow      plain appends: every sync also commits the new file size;
//   fallocate appends into FALLOC_FL_KEEP_SIZE space (RocksDB's default):
//             every sync also converts unwritten extents;
//   zeroed    appends over zeros written CHUNK_KIB ahead (onceqd's WAL): only
//             the sync after each refill commits metadata.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_args.hpp"

namespace {

using onceq::bench::failed;

enum class way { grow, fallocate, zeroed };

// Every way, in the order of the report, with its name there.
struct named_way {
  way w;
  const char* name;
};
constexpr named_way k_ways[] = {
    {way::grow, "grow"}, {way::fallocate, "fallocate"}, {way::zeroed, "zeroed"}};

struct outcome {
  double mean_us = 0;
  double p99_us = 0;
  std::string error;  // the failed call and its errno text; empty on success
};

// Mean and p99 microseconds of one append + fdatasync.
outcome probe(const std::string& path, way w, int appends, std::size_t bytes, std::size_t k_chunk) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return {0, 0, failed("open " + path)};
  const std::vector<char> data(bytes, 'x');
  const std::vector<char> zeros(k_chunk, 0);
  const auto total = static_cast<off_t>(bytes) * appends;
  outcome out;
  if (w == way::fallocate && ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, total) != 0) {
    out.error = failed("fallocate");
  }
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(appends));
  off_t end = 0, zeroed = 0;
  for (int i = 0; i < appends && out.error.empty(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (w == way::zeroed && end + static_cast<off_t>(bytes + k_chunk / 2) > zeroed) {
      if (::pwrite(fd, zeros.data(), k_chunk, zeroed) != static_cast<ssize_t>(k_chunk)) {
        out.error = failed("pwrite (zeros)");
        break;
      }
      zeroed += static_cast<off_t>(k_chunk);
    }
    if (::pwrite(fd, data.data(), bytes, end) != static_cast<ssize_t>(bytes)) {
      out.error = failed("pwrite");
      break;
    }
    if (::fdatasync(fd) != 0) {
      out.error = failed("fdatasync");
      break;
    }
    end += static_cast<off_t>(bytes);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  ::close(fd);
  ::unlink(path.c_str());
  if (!out.error.empty()) return out;
  double sum = 0;
  for (double x : us) sum += x;
  std::sort(us.begin(), us.end());
  out.mean_us = sum / static_cast<double>(us.size());
  out.p99_us = us[us.size() * 99 / 100];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* k_usage =
      "usage: onceq-fsync-probe [DIR] [APPENDS] [CHUNK_KIB] [BYTES...]  (/tmp 2000 256 4096 "
      "32768)\n";
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const auto parsed = onceq::bench::positive_args(argc, argv, 2, "onceq-fsync-probe", k_usage);
  if (!parsed) return 2;
  const std::vector<long>& nums = *parsed;
  const int appends =
      nums.size() > 0 ? static_cast<int>(std::clamp<long>(nums[0], 10, 1000000)) : 2000;
  const std::size_t chunk =
      static_cast<std::size_t>(nums.size() > 1 ? std::clamp<long>(nums[1], 4, 1 << 20) : 256) << 10;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 2; i < nums.size(); ++i)
    sizes.push_back(static_cast<std::size_t>(std::min<long>(nums[i], 64L << 20)));
  if (sizes.empty()) sizes = {4096, 32768};
  const std::string path = dir + "/onceq-fsync-probe." + std::to_string(::getpid());
  std::printf("| append bytes | way | mean us | p99 us |\n|---:|---|---:|---:|\n");
  for (auto bytes : sizes) {
    for (const auto& [w, name] : k_ways) {
      const outcome o = probe(path, w, appends, bytes, chunk);
      if (!o.error.empty()) {
        std::fprintf(stderr, "onceq-fsync-probe: %s (%zu-byte appends, %s)\n", o.error.c_str(),
                     bytes, name);
        return 1;
      }
      std::printf("| %zu | %s | %.0f | %.0f |\n", bytes, name, o.mean_us, o.p99_us);
    }
  }
  return 0;
}
