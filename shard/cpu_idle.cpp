#include "shard/cpu_idle.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <string>

namespace onceq {

namespace {

using steady = std::chrono::steady_clock;

// Reads one unsigned field off the front of s (after spaces).
std::optional<std::uint64_t> next_number(std::string_view& s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc()) return std::nullopt;
  s.remove_prefix(static_cast<std::size_t>(p - s.data()));
  return v;
}

std::vector<unsigned> allowed_cpus() {
  std::vector<unsigned> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (unsigned i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) out.push_back(i);
  }
  return out;
}

std::optional<std::uint64_t> read_proc_stat(const std::vector<unsigned>& cpus) {
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return idle_ticks_of(text, cpus);
}

}  // namespace

std::optional<std::uint64_t> idle_ticks_of(std::string_view proc_stat,
                                           const std::vector<unsigned>& cpus) {
  std::uint64_t sum = 0;
  bool any = false;
  while (!proc_stat.empty()) {
    const auto eol = proc_stat.find('\n');
    std::string_view line = proc_stat.substr(0, eol);
    proc_stat.remove_prefix(eol == std::string_view::npos ? proc_stat.size() : eol + 1);
    // "cpuN user nice system idle iowait ...": not the "cpu " total.
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    line.remove_prefix(3);
    const auto id = next_number(line);
    if (!id || !std::binary_search(cpus.begin(), cpus.end(), static_cast<unsigned>(*id))) {
      continue;
    }
    std::uint64_t f[5];
    bool ok = true;
    for (auto& v : f) {
      const auto n = next_number(line);
      if (!n) {
        ok = false;
        break;
      }
      v = *n;
    }
    if (!ok) continue;
    sum += f[3] + f[4];  // idle, iowait
    any = true;
  }
  if (!any) return std::nullopt;
  return sum;
}

cpu_idle::cpu_idle()
    : cpu_idle([cpus = allowed_cpus()] { return read_proc_stat(cpus); },
               static_cast<double>(::sysconf(_SC_CLK_TCK))) {}

cpu_idle::reader cpu_idle::proc_stat_reader() {
  return [idle = std::make_shared<cpu_idle>()](steady::time_point now) { return idle->read(now); };
}

cpu_idle::cpu_idle(ticks_source source, double ticks_per_second)
    : source_(std::move(source)), ticks_per_second_(ticks_per_second) {}

std::uint32_t cpu_idle::ms_of(steady::time_point t) noexcept {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  return static_cast<std::uint32_t>(ms.count());
}

std::optional<double> cpu_idle::published(steady::time_point now) const noexcept {
  const std::uint64_t v = packed_.load(std::memory_order_relaxed);
  if (v == 0) return std::nullopt;
  const auto age = static_cast<std::int32_t>(ms_of(now) - static_cast<std::uint32_t>(v));
  if (age > static_cast<std::int32_t>(k_max_gap.count())) return std::nullopt;
  return static_cast<double>(v >> 32) / 1000.0;
}

std::optional<double> cpu_idle::read(steady::time_point now) {
  std::unique_lock lock(sampling_, std::try_to_lock);
  if (!lock.owns_lock() || (started_ && now - last_ < k_period)) return published(now);
  const auto ticks = source_();
  if (!ticks || ticks_per_second_ <= 0) return published(now);
  if (started_ && now - last_ <= k_max_gap && *ticks >= last_ticks_) {
    const double seconds = std::chrono::duration<double>(now - last_).count();
    const double cores = static_cast<double>(*ticks - last_ticks_) / ticks_per_second_ / seconds;
    const auto thousandths =
        static_cast<std::uint64_t>(std::llround(std::clamp(cores, 0.0, 4e6) * 1000.0));
    // A stamp of 0 would read as unpublished: at the 49-day wrap, 1.
    packed_.store((thousandths << 32) | std::max<std::uint32_t>(1, ms_of(now)),
                  std::memory_order_relaxed);
  }
  started_ = true;
  last_ = now;
  last_ticks_ = *ticks;
  return published(now);
}

}  // namespace onceq
