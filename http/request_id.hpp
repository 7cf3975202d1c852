#pragma once

// X-Request-Id: echoed when the client sent a usable one, generated
// otherwise. Generated ids are unique within the process and unlikely to
// repeat across restarts (a random per-process prefix plus a counter).

#include <string>
#include <string_view>

namespace onceq::http {

inline constexpr std::size_t k_max_request_id_bytes = 200;

// A new id: 16 hex digits of per-process randomness, '-', a counter.
// Thread-safe.
std::string new_request_id();

// The client's id if it is 1..200 printable ASCII characters, else a new one.
std::string request_id_for(std::string_view client_id);

}  // namespace onceq::http
