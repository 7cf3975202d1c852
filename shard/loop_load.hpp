#pragma once

// How busy one loop thread is, measured by the thread itself and readable
// from any thread: the HTTP sessions read it to decide whether a
// connection moves to its topic's loop or spreads its parsing and
// rendering to a loop with room (http/spread.hpp).
//
// The loop calls sample() at the end of each iteration. Once a window
// (k_window) of wall time has passed since the last sample it reads two
// counters of its own thread and publishes, over that window:
//  - busy: the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) / wall time;
//  - waiting: the time the thread was runnable but not running, waiting
//    for a core (the scheduler's run delay, /proc/thread-self/schedstat;
//    0 where the kernel does not report it) / wall time. A loop that waits
//    for cores is a sign that cores are scarce, and then spreading only
//    adds crossings.
// A loop asleep in epoll publishes nothing; a reading older than
// k_stale_after is idle (busy 0).
//
// One atomic word holds a reading (busy and waiting in permille, the
// window's end in milliseconds), so a reader never sees half of one; 0 is
// "not published yet" (a real reading of 0 at the wrap of the 32-bit
// milliseconds, once in 49 days, reads as idle, which it is).

#include <atomic>
#include <chrono>
#include <cstdint>

namespace onceq {

class loop_load {
 public:
  static constexpr std::chrono::milliseconds k_window{50};
  static constexpr std::chrono::milliseconds k_stale_after{200};

  struct reading {
    double busy = 0;     // fraction of wall time on a core, 0..1
    double waiting = 0;  // fraction of wall time runnable and waiting, 0..1
    friend bool operator==(const reading&, const reading&) = default;
  };

  loop_load() = default;
  ~loop_load();
  loop_load(const loop_load&) = delete;
  loop_load& operator=(const loop_load&) = delete;

  // The loop thread only, at the end of an iteration: samples its thread's
  // counters when a window has passed since the last sample.
  void sample(std::chrono::steady_clock::time_point now);

  // The same from given counters (cpu and run delay of the thread in
  // nanoseconds, monotonic): sample() uses it, tests call it directly.
  void sample(std::chrono::steady_clock::time_point now, std::uint64_t cpu_ns,
              std::uint64_t delay_ns);

  // Any thread: the last window's reading, or idle (zeros) when the loop
  // has not published for k_stale_after.
  reading read(std::chrono::steady_clock::time_point now) const noexcept;

 private:
  static std::uint32_t ms_of(std::chrono::steady_clock::time_point t) noexcept;

  std::atomic<std::uint64_t> packed_{0};  // busy(16) | waiting(16) | end ms(32)

  // The loop thread only.
  bool started_ = false;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t last_cpu_ns_ = 0;
  std::uint64_t last_delay_ns_ = 0;
  int schedstat_fd_ = -2;  // -2: not opened yet; -1: not available
};

}  // namespace onceq
