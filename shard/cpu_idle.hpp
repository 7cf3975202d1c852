#pragma once

// How many of the cores this process may run on sat idle lately, read by
// any thread: whether a hot topic's sessions can spread over more loops
// (http/spread.hpp) is a question of spare cores, and a loop's own run
// delay (loop_load) does not answer it: a loop that sleeps often is
// favoured by the scheduler and waits little for a core even when the
// machine has none to spare.
//
// read() samples the idle and iowait ticks of the cores in the process's
// affinity mask (/proc/stat's cpuN lines) at most once per k_period, on
// whichever thread asks first, and answers the idle cores over the last
// period. A sample that comes more than k_max_gap after the one before is
// only a new start: an average over a long quiet spell would say nothing
// about now. Unknown (nothing measured yet, or /proc/stat unreadable)
// reads as nullopt.
//
// A CPU quota (cgroup cpu.max) does not show in /proc/stat: under one,
// spare cores can read as idle that the process may not use
// (docs/OPERATIONS.md: --no-spread-connections).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

namespace onceq {

class cpu_idle {
 public:
  // /proc/stat counts in ticks of 10 ms: over 200 ms a core's idle time is
  // known to within 0.05 of a core.
  static constexpr std::chrono::milliseconds k_period{200};
  static constexpr std::chrono::milliseconds k_max_gap{800};

  // Idle ticks (USER_HZ) of the cores to count, summed, monotonic; nullopt
  // when they cannot be read.
  using ticks_source = std::function<std::optional<std::uint64_t>()>;
  // What a reader of idle cores is to its users (read() of a shared
  // cpu_idle, or a test's fixed answer); any thread.
  using reader = std::function<std::optional<double>(std::chrono::steady_clock::time_point)>;
  // read() of a new cpu_idle over /proc/stat.
  static reader proc_stat_reader();

  // /proc/stat, the cores of the process's affinity mask now.
  cpu_idle();
  // Any source (tests), at ticks_per_second ticks per second and core.
  cpu_idle(ticks_source source, double ticks_per_second);
  cpu_idle(const cpu_idle&) = delete;
  cpu_idle& operator=(const cpu_idle&) = delete;

  // Any thread: idle cores over the last period, or nullopt while unknown.
  std::optional<double> read(std::chrono::steady_clock::time_point now);

 private:
  static std::uint32_t ms_of(std::chrono::steady_clock::time_point t) noexcept;
  std::optional<double> published(std::chrono::steady_clock::time_point now) const noexcept;

  const ticks_source source_;
  const double ticks_per_second_;
  std::atomic<std::uint64_t> packed_{0};  // idle cores in thousandths(32) | end ms(32)

  std::mutex sampling_;  // try_lock: one sampler, the others read packed_
  bool started_ = false;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t last_ticks_ = 0;
};

// The idle + iowait ticks of the "cpuN" lines of a /proc/stat text whose N
// is in cpus, summed; nullopt when none of them is there.
std::optional<std::uint64_t> idle_ticks_of(std::string_view proc_stat,
                                           const std::vector<unsigned>& cpus);

}  // namespace onceq
