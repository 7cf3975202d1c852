#pragma once

// The listener: binds host:port, accepts connections and runs one session
// per connection on its own strand (see session.hpp). Keeps a registry of
// live sessions so that stop() can close the idle ones.
//
// Threading: construct, listen() and start() from one thread; stop(),
// stopping() and session_count() may be called from any thread. Run the
// io_context on as many threads as you like (http_options::threads).
//
// Lifetime: the router must outlive every session, i.e. until the
// io_context has stopped running. Sessions share the registry, so the
// server itself may be destroyed before the io_context.

#include <cstddef>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "http/options.hpp"
#include "http/router.hpp"
#include "storage/base/result.hpp"

namespace onceq::http {

namespace asio = boost::asio;

class server {
 public:
  server(asio::io_context& ioc, router& r, http_options opts);
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
