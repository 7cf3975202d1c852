#include "cmd/log.hpp"

#include <atomic>
#include <cstdio>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace onceq::cmd {

namespace {

// Set once by install_logger() before the server's threads start.
std::atomic<int> g_min_level{static_cast<int>(log_level::info)};
std::atomic<log_format> g_format{log_format::json};

std::string rfc3339_millis(std::chrono::system_clock::time_point ts) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(ts.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

// Text values with a space, '=' or a quote are quoted so that a line splits
// back into its fields.
std::string text_value(std::string_view v) {
  if (!v.empty() && v.find_first_of(" =\"\n\t") == std::string_view::npos) return std::string(v);
  nlohmann::json j = std::string(v);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void stderr_sink(log_level level, std::string_view component, std::string_view msg,
                 std::span<const log_field> fields) noexcept {
  if (static_cast<int>(level) < g_min_level.load(std::memory_order_relaxed)) return;
  try {
    const std::string line =
        format_log_line(g_format.load(std::memory_order_relaxed), std::chrono::system_clock::now(),
                        level, component, msg, fields);
    std::fwrite(line.data(), 1, line.size(), stderr);  // one locked write per line
  } catch (...) {  // swallowed: a line that cannot be formatted is lost, nothing else
  }
}

}  // namespace

std::optional<log_level> parse_log_level(std::string_view s) {
  if (s == "debug") return log_level::debug;
  if (s == "info") return log_level::info;
  if (s == "warn") return log_level::warn;
  if (s == "error") return log_level::error;
  return std::nullopt;
}

std::optional<log_format> parse_log_format(std::string_view s) {
  if (s == "json") return log_format::json;
  if (s == "text") return log_format::text;
  return std::nullopt;
}

std::string_view to_string(log_level l) {
  switch (l) {
    case log_level::debug:
      return "debug";
    case log_level::info:
      return "info";
    case log_level::warn:
      return "warn";
    case log_level::error:
      return "error";
  }
  return "info";
}

std::string format_log_line(log_format format, std::chrono::system_clock::time_point ts,
                            log_level level, std::string_view component, std::string_view msg,
                            std::span<const log_field> fields) {
  if (format == log_format::text) {
    std::string upper(to_string(level));
    for (auto& c : upper) c = static_cast<char>(c - 'a' + 'A');
    std::string line = fmt::format("{} {} {}: {}", rfc3339_millis(ts), upper, component, msg);
    for (const auto& f : fields) {
      line += fmt::format(" {}={}", f.key, f.number ? f.value : text_value(f.value));
    }
    line += '\n';
    return line;
  }
  nlohmann::ordered_json j;
  j["ts"] = rfc3339_millis(ts);
  j["level"] = to_string(level);
  j["component"] = component;
  j["msg"] = msg;
  for (const auto& f : fields) {
    auto& slot = j[std::string(f.key)];
    if (f.number) {
      slot = nlohmann::ordered_json::parse(f.value, nullptr, false);
      if (slot.is_discarded() || !slot.is_number()) slot = f.value;
    } else {
      slot = f.value;
    }
  }
  std::string line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  line += '\n';
  return line;
}

void install_logger(const log_options& opts) {
  g_min_level.store(static_cast<int>(opts.level), std::memory_order_relaxed);
  g_format.store(opts.format, std::memory_order_relaxed);
  set_log_sink(&stderr_sink);
}

}  // namespace onceq::cmd
