#pragma once

// Options of the HTTP layer. Filled only in cmd/ (from flags) and passed
// through constructors; every field has a working default.

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/clock.hpp"
#include "broker/commands.hpp"

namespace onceq::http {

struct http_options {
  std::string host = "127.0.0.1";  // Default: loopback only
  std::uint16_t port = 8080;       // Default: 8080; 0 = an ephemeral port
  unsigned threads = 2;            // Default: 2 I/O threads

  std::size_t max_body_bytes = 1u << 20;     // Default: 1 MiB; larger bodies get 413
  std::size_t max_header_bytes = 16u << 10;  // Default: 16 KiB; larger headers get 400
  millis idle_timeout_ms = 60'000;   // Default: a kept-alive connection idle this long closes
  millis write_timeout_ms = 30'000;  // Default: a response not taken by the client in time

  // Backpressure: when more commands than this wait for the core, requests
  // that need it get 429 RESOURCE_EXHAUSTED with Retry-After.
  std::size_t max_queue_depth = 50'000;  // Default: 50,000 queued commands
  millis retry_after_ms = 1'000;         // Default: 1 s (Retry-After header and retry_after_ms)

  // Streaming consume (no max_messages): each poll asks for up to
  // stream_batch messages and waits up to stream_poll_ms for the first.
  millis stream_poll_ms = 250;      // Default: 250 ms
  std::int64_t stream_batch = 100;  // Default: 100 messages per poll

  // ---- Connections and TLS (http/server, http/session) ----
  // Connections open past this are closed at accept
  // (onceq_connections_rejected_total): a cap on file descriptors and
  // per-connection memory, not on request rate.
  std::size_t max_connections = 10'000;  // Default: 10,000
  // A request's header block must be complete this long after the
  // connection's start (after the TLS handshake) or, on a kept-alive
  // connection, after the request's first byte; else the connection closes
  // (onceq_http_header_timeouts_total). Idle time between requests is
  // idle_timeout_ms; a body has idle_timeout_ms per read.
  millis header_timeout_ms = 10'000;  // Default: 10 s
  // HTTPS on the listener when tls_cert_file is set (PEM certificate chain
  // and PEM private key; cmd/ loads them with make_tls_context).
  std::string tls_cert_file;                 // Default: none: plain HTTP
  std::string tls_key_file;                  // Default: none
  millis tls_handshake_timeout_ms = 10'000;  // Default: 10 s from accept to a finished handshake

  // One line per answered request through onceq::log (http/access_log.hpp):
  // method, path with query keys only, status, duration, bytes, request id.
  bool access_log = false;  // Default: off

  // A plain connection whose requests keep going to another shard's topics
  // moves to that shard's loop (http/session.hpp); off: it stays where it
  // was accepted and every such request crosses loops.
  bool migrate_connections = true;  // Default: on

  // A session on a saturated loop moves to a loop with room, and one stays
  // off a busy loop while its own has room (http/spread.hpp); off: sessions
  // only migrate (http::server). Needs migrate_connections.
  bool spread_connections = true;  // Default: on

  // Settings of a topic created without them (POST /v1/topics).
  topic_settings topic_defaults;  // Default: topic_settings{}, the API's (broker/commands.hpp)

  // Answered by GET /v1/version.
  std::string version = "0.0.0";   // Default: set by cmd/ from the project version
  std::string commit = "unknown";  // Default: set by cmd/ from git
};

}  // namespace onceq::http
