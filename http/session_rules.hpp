#pragma once

// session.hpp's rules as data, for the session over either stream
// (session.cpp): how a request the parser refused is answered, and the
// limits of the drain after it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <boost/system/error_code.hpp>

#include "base/errc.hpp"
#include "http/options.hpp"

namespace onceq::http {

// After a refused request, how long and how much of the rest of it to read
// and discard before closing, so that the client reads the answer instead
// of a connection reset.
inline constexpr std::chrono::milliseconds k_drain_time{1000};
inline constexpr std::size_t k_drain_bytes = 8u << 20;

// Beast's largest single read (http::read_some asks for at most 64 KiB).
inline constexpr std::size_t k_max_read_bytes = 64u << 10;

inline constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";

// The answer to a request Beast's parser failed with ec: 413 past
// max_body_bytes, 400 past max_header_bytes or for malformed HTTP;
// nullopt when the client left (end of stream, a partial message), timed
// out or the server is stopping: then the connection just closes.
std::optional<error> refusal_of(const boost::system::error_code& ec, const http_options& opts);

}  // namespace onceq::http
