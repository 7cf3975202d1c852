#include "base/log.hpp"

#include <atomic>
#include <cstdio>

#include <fmt/format.h>

namespace onceq {

namespace {

void stderr_sink(log_level, std::string_view component, std::string_view msg,
                 std::span<const log_field> fields) noexcept {
  try {
    std::string line = fmt::format("onceq {}: {}", component, msg);
    for (const auto& f : fields) line += fmt::format(" {}={}", f.key, f.value);
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
  } catch (...) {  // swallowed: out of memory while logging loses the line only
  }
}

std::atomic<log_sink> g_sink{&stderr_sink};

}  // namespace

void set_log_sink(log_sink sink) noexcept {
  g_sink.store(sink != nullptr ? sink : &stderr_sink, std::memory_order_release);
}

void log(log_level level, std::string_view component, std::string_view msg,
         std::initializer_list<log_field> fields) noexcept {
  g_sink.load(std::memory_order_acquire)(level, component, msg,
                                         std::span<const log_field>(fields.begin(), fields.size()));
}

}  // namespace onceq
