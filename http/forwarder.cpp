#include "http/forwarder.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace onceq::http {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

// A pooled connection idle longer than this is closed, not reused: far
// below any peer's --idle-timeout-ms, so the peer never closes it under a
// request.
constexpr auto k_pool_idle = std::chrono::seconds(2);
constexpr auto k_connect_timeout = std::chrono::seconds(2);
constexpr std::size_t k_pool_per_node = 16;  // idle connections kept per node, per thread
constexpr std::size_t k_max_relayed_body = 64u << 20;

struct idle_connection {
  std::unique_ptr<beast::tcp_stream> stream;
  steady::time_point since;
};
// Per thread: each loop keeps the connections it opened; keyed by host:port.
thread_local std::map<std::string, std::vector<idle_connection>> t_pool;

std::unique_ptr<beast::tcp_stream> take_idle(const std::string& key) {
  auto it = t_pool.find(key);
  if (it == t_pool.end()) return nullptr;
  const auto now = steady::now();
  auto& idle = it->second;
  while (!idle.empty()) {
    idle_connection c = std::move(idle.back());
    idle.pop_back();
    if (now - c.since < k_pool_idle && c.stream->socket().is_open()) return std::move(c.stream);
  }
  return nullptr;
}

void give_back(const std::string& key, std::unique_ptr<beast::tcp_stream> s) {
  auto& idle = t_pool[key];
  if (idle.size() < k_pool_per_node) idle.push_back({std::move(s), steady::now()});
}

error unreachable(std::string_view node, std::string_view step, const beast::error_code& ec) {
  error e = make_error(errc::unavailable,
                       fmt::format("node {}, which leads the shard, did not answer the forwarded "
                                   "request ({}: {})",
                                   node, step, ec.message()));
  return e;
}

asio::awaitable<result<response>> exchange(const request& out, node_address to, std::string node,
                                           millis timeout_ms) {
  auto ex = co_await asio::this_coro::executor;
  const std::string key = fmt::format("{}:{}", to.host, to.port);
  beast::error_code ec;
  auto stream = take_idle(key);
  if (!stream) {
    stream = std::make_unique<beast::tcp_stream>(ex);
    tcp::resolver resolver(ex);
    auto found = co_await resolver.async_resolve(to.host, std::to_string(to.port),
                                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return unreachable(node, "resolve", ec);
    stream->expires_after(k_connect_timeout);
    co_await stream->async_connect(found, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return unreachable(node, "connect", ec);
    stream->socket().set_option(tcp::no_delay(true), ec);
  }
  stream->expires_after(std::chrono::milliseconds(timeout_ms));
  co_await bhttp::async_write(*stream, out, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return unreachable(node, "write", ec);
  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(k_max_relayed_body);
  co_await bhttp::async_read(*stream, buf, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return unreachable(node, "read", ec);
  response res = parser.release();
  if (res.keep_alive() && buf.size() == 0) {
    stream->expires_never();
    give_back(key, std::move(stream));
  }
  co_return res;
}

}  // namespace

forwarder::forwarder(const cluster_view& cluster) : cluster_(cluster) {}

void forwarder::forward(const request& req, std::string_view request_id, std::string node,
                        millis timeout_ms, asio::any_io_executor ex,
                        std::function<void(result<response>)> done) {
  auto to = cluster_.http_of(node);
  if (!to) {
    return done(
        make_error(errc::unavailable, fmt::format("node {} is not in the cluster file", node)));
  }
  auto out = std::make_shared<request>(req);
  out->set(k_forwarded_header, cluster_.self());
  out->set(k_request_id_header, request_id);
  out->keep_alive(true);
  out->prepare_payload();
  auto shared_done = std::make_shared<std::function<void(result<response>)>>(std::move(done));
  asio::co_spawn(
      ex,
      [out, to = std::move(*to), node = std::move(node), timeout = timeout_ms,
       shared_done]() -> asio::awaitable<void> {
        auto r = co_await exchange(*out, to, node, timeout);
        (*shared_done)(std::move(r));
      },
      [shared_done](std::exception_ptr e) {
        if (e) (*shared_done)(make_error(errc::unavailable, "the forwarded request failed"));
      });
}

}  // namespace onceq::http
