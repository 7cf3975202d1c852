#pragma once

// onceqd's log: lines on stderr, JSON (default) or text, with a level
// filter. install_logger() plugs it into onceq::log (base/log.hpp),
// through which storage/ and http/ log too.
//
// A JSON line: {"ts":"2024-05-01T12:00:00.123Z","level":"info",
// "component":"onceqd","msg":"...", <fields>...}; a request's lines carry
// "request_id". A text line: "<ts> INFO onceqd: msg key=value ...".
//
// Thread safety: log lines may be written from any thread; each line is one
// fwrite. install_logger() before other threads start.

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/log.hpp"

namespace onceq::cmd {

enum class log_format { json, text };

struct log_options {
  log_level level = log_level::info;     // Default: info; debug adds detail
  log_format format = log_format::json;  // Default: JSON lines
};

std::optional<log_level> parse_log_level(std::string_view s);    // debug|info|warn|error
std::optional<log_format> parse_log_format(std::string_view s);  // json|text
std::string_view to_string(log_level l);

// One line, '\n' included. Pure: for tests.
std::string format_log_line(log_format format, std::chrono::system_clock::time_point ts,
                            log_level level, std::string_view component, std::string_view msg,
                            std::span<const log_field> fields);

// From now on onceq::log writes lines at or above opts.level to stderr.
void install_logger(const log_options& opts);

}  // namespace onceq::cmd
