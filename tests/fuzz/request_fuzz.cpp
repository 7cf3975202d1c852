// libFuzzer target: the request path as a connection sees it. The input is
// the raw bytes a client sends on one connection: Beast's request parser
// (with the session's limits) splits them into requests, each goes through
// the router and codec to a broker core (a shard's loop thread, in-memory store,
// manual clock) and its answer is serialized. A fresh core per input, so a
// crash reproduces from its one file.
//
// Beyond "no crash, no sanitizer report", every answer must carry
// X-Request-Id, a JSON content type must come with a body that parses, and
// nothing may answer 500 INTERNAL (docs/API.md: "never caused by bad
// input").
//
// Built with -DONCEQ_FUZZ=ON and clang; run with scripts/fuzz.sh request_fuzz.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "broker/broker.hpp"
#include "http/codec/inspector.hpp"
#include "http/request_id.hpp"
#include "http/router.hpp"
#include "shard/shard_set.hpp"
#include "storage/memory_store.hpp"

using namespace onceq;
using namespace onceq::http;
namespace asio = boost::asio;
namespace beast = boost::beast;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

http_options fuzz_http_options() {
  http_options o;
  // The session's limits, scaled to what a fuzz input can reach.
  o.max_body_bytes = 2048;
  o.max_header_bytes = 2048;
  o.stream_poll_ms = 1;
  return o;
}

// Long-polls and stream polls park for at most 1 ms of real time: the
// parking and wake-up paths run, the fuzzer does not wait.
shard_options fuzz_shard_options() {
  shard_options o;
  o.max_wait_ms = 1;
  return o;
}

struct harness {
  manual_clock clock;
  storage::memory_store store;
  broker core_broker{store, clock, &json_inspector()};
  shard core_runner{0, core_broker, store, clock, fuzz_shard_options()};
  shard_set shards{{&core_runner}};
  router routes{shards, clock, fuzz_http_options()};

  harness() {
    check(core_broker.recover().ok());
    core_runner.start();
  }
  ~harness() { core_runner.stop(); }
};

// Runs op to completion on a private io_context.
template <class T>
T run_to_end(asio::awaitable<T> op) {
  // One context for the process: a shard's thread may still be inside its
  // post() of the last completion when run() returns, so a context made
  // and destroyed per call would be freed under it (TSan).
  static asio::io_context ioc;
  ioc.restart();
  std::optional<T> out;
  std::exception_ptr failure;
  asio::co_spawn(
      ioc, [&]() -> asio::awaitable<void> { out.emplace(co_await std::move(op)); },
      [&](std::exception_ptr e) { failure = e; });
  ioc.run();
  check(!failure && out.has_value());
  return std::move(*out);
}

void check_answer(const response& res) {
  check(res.result_int() != 500);
  check(!res[k_request_id_header].empty());
  if (res[bhttp::field::content_type] == k_json_type) check(nlohmann::json::accept(res.body()));
  std::ostringstream wire;
  wire << res;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  harness c;
  const http_options& opts = c.routes.options();
  std::string_view rest(reinterpret_cast<const char*>(data), size);

  while (!rest.empty()) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(opts.max_body_bytes);
    parser.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
    parser.eager(true);
    beast::error_code ec;
    while (!parser.is_done()) {
      const auto n = parser.put(asio::buffer(rest.data(), rest.size()), ec);
      rest.remove_prefix(n);
      if (ec == bhttp::error::need_more) {
        ec = {};
        if (n == 0 || rest.empty()) {
          parser.put_eof(ec);  // the client closed mid-request
          if (!ec) ec = bhttp::error::partial_message;
        }
      }
      if (ec || n == 0) break;
    }
    if (ec || !parser.is_done()) {
      // What the session answers before it closes (its own error wording).
      const auto id = request_id_for(parser.get()[k_request_id_header]);
      check_answer(
          c.routes.error_response(make_error(errc::invalid_argument, ec.message()), 11, id));
      return 0;
    }

    request req = parser.release();
    const bool keep_alive = req.keep_alive();
    reply r = run_to_end(c.routes.handle(std::move(req)));
    check_answer(r.res);
    if (r.stream) {
      // One more poll, then the client leaves: the stream ends the connection.
      (void)r.stream->take_initial();
      (void)run_to_end(r.stream->next());
      r.stream->abandon_last();
      return 0;
    }
    if (!keep_alive) return 0;
    c.clock.advance(1'000);  // leases, backoffs and TTLs move between requests
  }
  return 0;
}
