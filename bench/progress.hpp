#pragma once

#include <chrono>
#include <string>

namespace onceq::bench {

// The one-line progress display on stderr: rewritten in place on a
// terminal, one line every few seconds otherwise (logs stay readable).
class progress_line {
 public:
  progress_line();
  // Shows `text` if enough time has passed since the last update.
  void update(const std::string& text);
  // Ends the line (always printed).
  void finish(const std::string& text);

 private:
  bool tty_;
  std::chrono::steady_clock::time_point last_{};
  std::size_t last_len_ = 0;
};

}  // namespace onceq::bench
