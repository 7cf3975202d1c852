#pragma once

// The body of a streamed consume (GET/POST /v1/consume without
// max_messages), after its head: the first poll's lines, then each next
// poll's, as HTTP/1.1 chunks (or raw bytes for HTTP/1.0, whose body ends
// at the close), until the client leaves, the session stops, or a poll
// fails; then the last chunk. The session sends it over its stream, plain
// or TLS alike.

#include <string>
#include <tuple>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>

#include "http/router.hpp"

namespace onceq::http {

// peer_gone: set by the session's watcher when the client closes its
// side. stopping(): the session or the server is closing. arm(true)
// before a write sets the session's write timeout, arm(false) clears it
// (a stream may send nothing for long).
template <class AsyncStream, class Stopping, class Arm>
asio::awaitable<void> pump_stream(AsyncStream& s, consume_stream& st, bool chunked,
                                  const bool& peer_gone, Stopping stopping, Arm arm) {
  constexpr auto k_tuple = asio::as_tuple(asio::use_awaitable);
  std::string chunk = st.take_initial();
  while (true) {
    if (!chunk.empty()) {
      arm(true);
      boost::system::error_code wec;
      if (chunked) {
        auto body = boost::beast::http::make_chunk(asio::buffer(chunk));
        std::tie(wec, std::ignore) = co_await asio::async_write(s, body, k_tuple);
      } else {
        std::tie(wec, std::ignore) = co_await asio::async_write(s, asio::buffer(chunk), k_tuple);
      }
      arm(false);
      if (wec) {
        st.abandon_last();
        co_return;
      }
    }
    if (peer_gone || stopping()) break;
    auto next = co_await st.next();
    if (!next.ok()) break;
    if (peer_gone) {
      // The poll was parked in the core when the client left and may have
      // leased messages to it: hand them back.
      st.abandon_last();
      co_return;
    }
    chunk = std::move(*next);
  }
  if (peer_gone || !chunked) co_return;
  arm(true);
  auto last = boost::beast::http::make_chunk_last();
  auto [lec, ln] = co_await asio::async_write(s, last, k_tuple);
  (void)lec;  // closing anyway
}

}  // namespace onceq::http
