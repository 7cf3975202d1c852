#pragma once

// The plain (not TLS) HTTP/1.1 session: the hot path, written as
// callbacks on the socket's loop, with no coroutine frame and no timer per
// operation (docs/DESIGN.md, "The request's path"):
//
//   read_some -> Beast's parser (put(), synchronously, on the bytes read)
//   -> router::handle(request, done) -> done: render the head into a
//   reused buffer -> one gathered write -> the next request
//
// Timeouts are deadlines the session sets on itself; a per-loop sweep
// (http/deadline_sweep.hpp) closes the sockets whose deadline
// has passed. A streamed consume and the drain after a refused request
// are coroutines: long-lived, rare, and not the hot path.
//
// The rules (limits, timeouts, 100-continue, migration, shutdown) are
// session.hpp's; the TLS session (session.cpp) keeps the same rules on
// Beast's stream machinery.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "http/router.hpp"
#include "http/session_registry.hpp"

namespace onceq::http {

void start_plain_session(boost::asio::ip::tcp::socket socket, router& r,
                         std::shared_ptr<session_registry> registry,
                         std::optional<std::uint32_t> home, std::string pending, bool adopted);

}  // namespace onceq::http
