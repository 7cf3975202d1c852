#pragma once

// One HTTP/1.1 connection, plain or TLS: reads requests one after another
// (keep-alive; pipelined requests are answered in order), hands each to the
// router and writes its answer, or streams chunked NDJSON for a streamed
// consume. One session template (session.cpp) over the stream type: plain
// TCP or Asio's SSL stream over it, as Beast's advanced_server_flex does;
// both run every rule below with the same code.
//
// Limits (http_options): max_body_bytes -> 413 PAYLOAD_TOO_LARGE, then
// close; max_header_bytes -> 400, then close; header_timeout_ms for a
// request's header block (from the connection's start, or from the first
// byte of a later request), then close without an answer; idle_timeout_ms
// between requests and per read of a body; write_timeout_ms per write.
// Timeouts are deadlines checked in a per-loop sweep: up to one sweep
// period late (http/deadline_sweep.hpp). Malformed HTTP gets 400 and the
// connection closes. After a 413 or 400 the rest of the request is read and
// discarded for a while (session_rules.hpp), so the client reads the
// answer. "Expect: 100-continue" is answered before the body is read.
//
// TLS: the handshake has tls_handshake_timeout_ms from accept. A plain HTTP
// request on the TLS port gets a plain 400 and the connection closes. A
// closing TLS connection sends close_notify.
//
// Threading: everything runs on the session's strand (the socket's
// executor); the router's answers complete back onto it. shutdown() may be
// called from any thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "http/router.hpp"
#include "http/session_registry.hpp"

namespace onceq::http {

namespace asio = boost::asio;

// What the registry sees of a live connection.
class session {
 public:
  virtual ~session() = default;

  // Closes the connection if it waits for a request; otherwise it closes
  // after the answer being prepared (a stream ends at its next poll).
  virtual void shutdown() = 0;
};

// Registers a session for the accepted socket (TLS when registry->tls() is
// set) and starts serving it on the socket's executor. The session keeps
// itself alive until its connection closes.
//
// home: the shard whose loop runs the socket's executor (registry->loop),
// if any. A plain session on a home that answered its last
// k_migrate_after requests from one other shard moves there when nothing
// is in flight on it: its socket is released from this loop and adopted by
// the other, with the bytes already read (pending), as a session adopted
// mid-connection (adopted: idle_timeout_ms to the next request, not the
// connection's first header_timeout_ms). TLS sessions stay.
void start_session(asio::ip::tcp::socket socket, router& r,
                   std::shared_ptr<session_registry> registry,
                   std::optional<std::uint32_t> home = std::nullopt, std::string pending = {},
                   bool adopted = false);

// Consecutive requests served by one other shard before a session moves to
// that shard's loop.
inline constexpr int k_migrate_after = 2;

}  // namespace onceq::http
