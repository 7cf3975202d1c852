#include "bench/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace onceq::bench {

progress_line::progress_line() : tty_(isatty(STDERR_FILENO) != 0) {}

void progress_line::update(const std::string& text) {
  const auto now = std::chrono::steady_clock::now();
  const auto every = tty_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(5000);
  if (now - last_ < every) return;
  last_ = now;
  if (tty_) {
    std::fprintf(stderr, "\r%s%*s", text.c_str(),
                 static_cast<int>(last_len_ > text.size() ? last_len_ - text.size() : 0), "");
    last_len_ = text.size();
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void progress_line::finish(const std::string& text) {
  if (tty_) {
    std::fprintf(stderr, "\r%s%*s\n", text.c_str(),
                 static_cast<int>(last_len_ > text.size() ? last_len_ - text.size() : 0), "");
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
  last_len_ = 0;
  last_ = {};
}

}  // namespace onceq::bench
