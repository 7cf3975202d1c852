#pragma once

// The listener: binds host:port, accepts connections and runs one session
// per connection (see session.hpp). Keeps a registry of live sessions so
// that stop() can close the idle ones.
//
// Connections past http_options::max_connections are closed as soon as they
// are accepted (onceq_connections_rejected_total): accepting them keeps the
// listen backlog from filling with connections that would wait for nothing.
//
// Two layouts:
// - one io_context, run on as many threads as you like: each session gets
//   its own strand;
// - a pool of io_contexts, each run by exactly one thread (what onceqd
//   does: pool[i] is shard i's loop): sessions are spread over them round
//   robin and need no strand. A plain-HTTP session whose requests keep
//   going to another shard moves to that shard's loop between requests
//   (onceq_connections_migrated_total), so a steady client pays no
//   crossing; and a session on a saturated loop moves to a loop with room
//   (onceq_connections_spread_total), so that one hot topic's HTTP work
//   uses more than one core (http/spread.hpp).
//   Threads then never contend for one scheduler's lock: with two threads
//   sharing one io_context, its mutex was the source of most of onceqd's
//   futex calls (perf, W2).
//
// Threading: construct, listen() and start() from one thread; stop(),
// stopping() and session_count() may be called from any thread.
//
// Lifetime: the router must outlive every session, i.e. until the
// io_context has stopped running. Sessions share the registry, so the
// server itself may be destroyed before the io_context.

#include <cstddef>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "base/result.hpp"
#include "http/options.hpp"
#include "http/router.hpp"
#include "shard/cpu_idle.hpp"
#include "shard/loop_load.hpp"

namespace onceq::http {

namespace asio = boost::asio;

class server {
 public:
  // tls: serve HTTPS with it (see make_tls_context in tls.hpp); null: plain
  // HTTP. The connection counters go to r.metrics().connections().
  server(asio::io_context& ioc, router& r, http_options opts,
         std::shared_ptr<asio::ssl::context> tls = nullptr);
  // The pool layout: pool is not empty; pool[0] also runs the acceptor.
  // loads: how busy each loop is (loads[i]: pool[i]'s, outliving the
  // sessions), so that sessions of a hot topic spread over loops with room
  // when cores sit idle (idle; empty: /proc/stat's) (http/spread.hpp);
  // empty, or opts.spread_connections off: sessions only migrate.
  server(std::vector<asio::io_context*> pool, router& r, http_options opts,
         std::shared_ptr<asio::ssl::context> tls = nullptr,
         std::vector<const loop_load*> loads = {}, cpu_idle::reader idle = {});
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds and listens on opts.host:opts.port (port 0: an ephemeral one).
  // Errors: errc::unavailable with the OS's reason (address in use, ...),
  // errc::invalid_argument for a host that is not an IP address.
  result<asio::ip::tcp::endpoint> listen();

  // Starts accepting on the io_context. Call after listen().
  void start();

  // Stops accepting and closes idle connections; requests being served
  // finish and their connections then close. Streams end at their next
  // poll. Idempotent, thread-safe.
  void stop();

  bool stopping() const noexcept;
  std::size_t session_count() const noexcept;

 private:
  struct impl;
  std::shared_ptr<impl> p_;
};

}  // namespace onceq::http
