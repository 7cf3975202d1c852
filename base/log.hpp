#pragma once

// The one logging entry point below cmd/: storage/ and http/ call log(),
// cmd/ decides where lines go and how they look (cmd/log.hpp: JSON or text
// lines on stderr, a level filter). Keeping only a function pointer here
// means storage/ and http/ never depend on cmd/.
//
// Thread safety: log() may be called from any thread. set_log_sink() is
// meant to be called once, by main(), before other threads start; it is
// atomic nevertheless.

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace onceq {

enum class log_level : int { debug = 0, info = 1, warn = 2, error = 3 };

// One key/value of a line. number = true writes value unquoted in JSON
// (it must then be a decimal number).
struct log_field {
  std::string_view key;
  std::string value;
  bool number = false;
};

// component: who speaks ("onceqd", "storage", "http", "access"); msg: the
// sentence, never a secret or a message payload.
using log_sink = void (*)(log_level level, std::string_view component, std::string_view msg,
                          std::span<const log_field> fields) noexcept;

// Replaces the sink; nullptr restores the default, which writes
// "onceq <component>: <msg> key=value..." to stderr (what unit tests see).
void set_log_sink(log_sink sink) noexcept;

void log(log_level level, std::string_view component, std::string_view msg,
         std::initializer_list<log_field> fields = {}) noexcept;

// A log_field with a number.
template <class Int>
log_field log_number(std::string_view key, Int v) {
  return {key, std::to_string(v), true};
}

}  // namespace onceq
