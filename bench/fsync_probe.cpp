// onceq-fsync-probe: how long one synced append takes on a directory's file
// system, in the three ways a log file can be grown. It is the measurement
// behind onceqd's WAL zeros (storage/rocksdb/wal_prezero.hpp, flag
// --wal-prezero-mb): run it on the data directory's file system to see
// whether they pay off there.
//
//   onceq-fsync-probe [DIR] [APPENDS] [CHUNK_KIB] [BYTES...]
//                                          (/tmp, 2000, 1024, 4096 32768)
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

namespace {

enum class way { grow, fallocate, zeroed };

const char* name_of(way w) {
  switch (w) {
    case way::grow:
      return "grow";
    case way::fallocate:
      return "fallocate";
    case way::zeroed:
      return "zeroed";
  }
  return "?";
}

// Mean and p99 microseconds of one append + fdatasync, or a negative mean on
// an I/O error.
std::pair<double, double> probe(const std::string& path, way w, int appends, std::size_t bytes,
                                std::size_t k_chunk) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return {-1, 0};
  const std::vector<char> data(bytes, 'x');
  const std::vector<char> zeros(k_chunk, 0);
  const auto total = static_cast<off_t>(bytes) * appends;
  if (w == way::fallocate && ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, total) != 0) {
    ::close(fd);
    return {-1, 0};
  }
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(appends));
  off_t end = 0, zeroed = 0;
  bool ok = true;
  for (int i = 0; i < appends && ok; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (w == way::zeroed && end + static_cast<off_t>(bytes + k_chunk / 2) > zeroed) {
      ok = ::pwrite(fd, zeros.data(), k_chunk, zeroed) == static_cast<ssize_t>(k_chunk);
      zeroed += static_cast<off_t>(k_chunk);
    }
    ok = ok && ::pwrite(fd, data.data(), bytes, end) == static_cast<ssize_t>(bytes);
    ok = ok && ::fdatasync(fd) == 0;
    end += static_cast<off_t>(bytes);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  ::close(fd);
  ::unlink(path.c_str());
  if (!ok) return {-1, 0};
  double sum = 0;
  for (double x : us) sum += x;
  std::sort(us.begin(), us.end());
  return {sum / static_cast<double>(us.size()), us[us.size() * 99 / 100]};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const int appends = argc > 2 ? std::max(10, std::atoi(argv[2])) : 2000;
  const std::size_t chunk =
      std::max<std::size_t>(4, argc > 3 ? static_cast<std::size_t>(std::atol(argv[3])) : 1024)
      << 10;
  std::vector<std::size_t> sizes;
  for (int i = 4; i < argc; ++i) sizes.push_back(static_cast<std::size_t>(std::atol(argv[i])));
  if (sizes.empty()) sizes = {4096, 32768};
  const std::string path = dir + "/onceq-fsync-probe." + std::to_string(::getpid());
  std::printf("| append bytes | way | mean us | p99 us |\n|---:|---|---:|---:|\n");
  for (auto bytes : sizes) {
    if (bytes == 0) continue;
    for (way w : {way::grow, way::fallocate, way::zeroed}) {
      auto [mean, p99] = probe(path, w, appends, bytes, chunk);
      if (mean < 0) {
        std::printf("| %zu | %s | I/O error | |\n", bytes, name_of(w));
        continue;
      }
      std::printf("| %zu | %s | %.0f | %.0f |\n", bytes, name_of(w), mean, p99);
    }
  }
  return 0;
}
