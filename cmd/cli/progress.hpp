#pragma once

// A one-line progress bar on stderr, redrawn at most every 100 ms. The
// caller enables it only when stderr is a terminal (terminal::stderr_tty),
// so logs and pipes never see it. With an unknown total it shows a count
// and a rate instead of a bar.
//
// Thread safety: none.

#include <chrono>
#include <cstdint>
#include <string>

namespace onceq::cli {

class progress_bar {
 public:
  // total 0: unknown. unit: what is counted ("msgs", "bytes"). Disabled,
  // it draws nothing.
  progress_bar(std::string label, std::uint64_t total, std::string unit, bool enabled);
  ~progress_bar();  // finish()
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;

  void set(std::uint64_t done);
  // Clears the line; later set() calls draw nothing.
  void finish();
  bool active() const noexcept { return enabled_; }

 private:
  void draw();

  std::string label_;
  std::uint64_t total_;
  std::string unit_;
  std::uint64_t done_ = 0;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace onceq::cli
