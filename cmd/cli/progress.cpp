#include "cmd/cli/progress.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace onceq::cli {

namespace {
constexpr auto k_redraw = std::chrono::milliseconds(100);
constexpr int k_bar_width = 30;
}  // namespace

progress_bar::progress_bar(std::string label, std::uint64_t total, std::string unit, bool enabled)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()) {}

progress_bar::~progress_bar() {
  finish();
}

void progress_bar::set(std::uint64_t done) {
  done_ = done;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < k_redraw && done_ != total_) return;
  last_draw_ = now;
  draw();
}

void progress_bar::draw() {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0.0;
  std::string line;
  if (total_ > 0) {
    const double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    const int fill = static_cast<int>(frac * k_bar_width);
    line = fmt::format("{} [{}{}] {}/{} {} ({:.0f}/s)", label_, std::string(fill, '#'),
                       std::string(k_bar_width - fill, '.'), done_, total_, unit_, rate);
  } else {
    line = fmt::format("{} {} {} ({:.0f}/s)", label_, done_, unit_, rate);
  }
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void progress_bar::finish() {
  if (enabled_ && drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
  enabled_ = false;
}

}  // namespace onceq::cli
