#include "shard/loop_load.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <string_view>

namespace onceq {

namespace {

using steady = std::chrono::steady_clock;

std::uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// The second field of /proc/thread-self/schedstat ("run time, run delay,
// slices"), in nanoseconds; 0 when it cannot be read.
std::uint64_t run_delay_ns(int fd) noexcept {
  if (fd < 0) return 0;
  char buf[96];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  std::string_view s(buf, static_cast<std::size_t>(n));
  const auto space = s.find(' ');
  if (space == std::string_view::npos) return 0;
  s.remove_prefix(space + 1);
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  (void)p;
  return ec == std::errc() ? v : 0;
}

std::uint64_t permille(std::uint64_t part_ns, std::uint64_t whole_ns) noexcept {
  if (whole_ns == 0) return 0;
  return std::min<std::uint64_t>(1000, part_ns * 1000 / whole_ns);
}

}  // namespace

loop_load::~loop_load() {
  if (schedstat_fd_ >= 0) ::close(schedstat_fd_);
}

std::uint32_t loop_load::ms_of(steady::time_point t) noexcept {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  return static_cast<std::uint32_t>(ms.count());
}

void loop_load::sample(steady::time_point now) {
  if (started_ && now - last_ < k_window) return;
  if (schedstat_fd_ == -2) {
    // thread-self resolves to the calling thread when opened: the loop's.
    schedstat_fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  }
  sample(now, thread_cpu_ns(), run_delay_ns(schedstat_fd_));
}

void loop_load::sample(steady::time_point now, std::uint64_t cpu_ns, std::uint64_t delay_ns) {
  if (!started_) {
    started_ = true;
    last_ = now;
    last_cpu_ns_ = cpu_ns;
    last_delay_ns_ = delay_ns;
    return;
  }
  if (now - last_ < k_window) return;
  const auto wall = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count());
  const std::uint64_t busy = permille(cpu_ns >= last_cpu_ns_ ? cpu_ns - last_cpu_ns_ : 0, wall);
  const std::uint64_t waiting =
      permille(delay_ns >= last_delay_ns_ ? delay_ns - last_delay_ns_ : 0, wall);
  last_ = now;
  last_cpu_ns_ = cpu_ns;
  last_delay_ns_ = delay_ns;
  packed_.store((busy << 48) | (waiting << 32) | ms_of(now), std::memory_order_relaxed);
}

loop_load::reading loop_load::read(steady::time_point now) const noexcept {
  const std::uint64_t v = packed_.load(std::memory_order_relaxed);
  if (v == 0) return {};
  const auto end = static_cast<std::uint32_t>(v);
  // The difference as signed: right across the 32-bit wrap (49 days), and
  // a reader whose now is a little before the loop's sees it fresh.
  const auto age = static_cast<std::int32_t>(ms_of(now) - end);
  if (age > static_cast<std::int32_t>(k_stale_after.count())) return {};
  return {static_cast<double>((v >> 48) & 0xffff) / 1000.0,
          static_cast<double>((v >> 32) & 0xffff) / 1000.0};
}

}  // namespace onceq
