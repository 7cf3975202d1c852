#include "http/server.hpp"

#include <chrono>
#include <exception>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>

#include "base/log.hpp"
#include "http/session.hpp"
#include "http/session_registry.hpp"

namespace onceq::http {

namespace {
namespace beast = boost::beast;
using asio::ip::tcp;
constexpr auto k_tuple = asio::as_tuple(asio::use_awaitable);
}  // namespace

struct server::impl : std::enable_shared_from_this<server::impl> {
  impl(std::vector<asio::io_context*> contexts, bool one_thread_each, router& r, http_options opts,
       std::shared_ptr<asio::ssl::context> tls)
      : ioc(*contexts.at(0)),
        pool(std::move(contexts)),
        pooled(one_thread_each),
        rt(r),
        registry(std::make_shared<session_registry>(std::move(opts), r.metrics().connections(),
                                                    std::move(tls))),
        strand(asio::make_strand(ioc)),
        acceptor(strand) {}

  // Where the next session runs, and the index of that loop in the pool
  // (none without a pool).
  std::pair<asio::any_io_executor, std::optional<std::uint32_t>> next_executor() {
    if (!pooled) return {asio::make_strand(ioc), std::nullopt};
    const auto i = static_cast<std::uint32_t>(next++ % pool.size());
    return {pool[i]->get_executor(), i};
  }

  asio::awaitable<void> accept_loop() {
    while (acceptor.is_open()) {
      auto [ex, home] = next_executor();
      auto [ec, socket] = co_await acceptor.async_accept(ex, k_tuple);
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) break;
        // Out of file descriptors and the like: back off, then go on.
        log(log_level::warn, "http", fmt::format("accept failed: {}", ec.message()));
        asio::steady_timer t(strand, std::chrono::milliseconds(50));
        co_await t.async_wait(k_tuple);
        continue;
      }
      if (registry->stopping()) break;
      beast::error_code ignored;
      auto& stats = registry->stats();
      // Only this loop adds sessions, so the count cannot overshoot.
      if (static_cast<std::size_t>(stats.open.load(std::memory_order_relaxed)) >=
          registry->options().max_connections) {
        stats.rejected.fetch_add(1, std::memory_order_relaxed);
        socket.close(ignored);
        continue;
      }
      stats.accepted.fetch_add(1, std::memory_order_relaxed);
      socket.set_option(tcp::no_delay(true), ignored);
      start_session(std::move(socket), rt, registry, home);
    }
  }

  asio::io_context& ioc;
  std::vector<asio::io_context*> pool;
  bool pooled;
  std::size_t next = 0;  // accept loop only
  router& rt;
  std::shared_ptr<session_registry> registry;
  asio::strand<asio::io_context::executor_type> strand;
  tcp::acceptor acceptor;
};

server::server(asio::io_context& ioc, router& r, http_options opts,
               std::shared_ptr<asio::ssl::context> tls)
    : p_(std::make_shared<impl>(std::vector<asio::io_context*>{&ioc}, false, r, std::move(opts),
                                std::move(tls))) {}

server::server(std::vector<asio::io_context*> pool, router& r, http_options opts,
               std::shared_ptr<asio::ssl::context> tls, std::vector<const loop_load*> loads,
               cpu_idle::reader idle)
    : p_(std::make_shared<impl>(std::move(pool), true, r, std::move(opts), std::move(tls))) {
  p_->registry->set_loops(p_->pool);
  if (p_->registry->options().spread_connections && loads.size() == p_->pool.size()) {
    p_->registry->set_loads(std::move(loads), std::move(idle));
  }
}

server::~server() {
  beast::error_code ec;
  p_->acceptor.close(ec);
}

result<tcp::endpoint> server::listen() {
  const auto& o = p_->registry->options();
  beast::error_code ec;
  tcp::resolver resolver(p_->ioc);
  auto found = resolver.resolve(o.host, std::to_string(o.port),
                                tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) {
    return make_error(errc::invalid_argument,
                      fmt::format("cannot resolve listen address '{}': {}", o.host, ec.message()));
  }
  tcp::endpoint ep = found.begin()->endpoint();
  auto& a = p_->acceptor;
  auto fail = [&](std::string_view what) {
    beast::error_code ignored;
    a.close(ignored);
    return make_error(errc::unavailable,
                      fmt::format("cannot {} {}:{}: {}", what, o.host, o.port, ec.message()));
  };
  a.open(ep.protocol(), ec);
  if (ec) return fail("open a socket for");
  a.set_option(asio::socket_base::reuse_address(true), ec);
  if (ec) return fail("configure");
  a.bind(ep, ec);
  if (ec) return fail("bind");
  a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen on");
  auto local = a.local_endpoint(ec);
  if (ec) return fail("read the address of");
  return local;
}

void server::start() {
  asio::co_spawn(
      p_->strand, [p = p_]() -> asio::awaitable<void> { co_await p->accept_loop(); },
      [](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log(log_level::error, "http", fmt::format("the listener failed: {}", ex.what()));
        }
      });
}

void server::stop() {
  p_->registry->stop_all();
  asio::post(p_->strand, [p = p_] {
    beast::error_code ignored;
    p->acceptor.close(ignored);
  });
}

bool server::stopping() const noexcept {
  return p_->registry->stopping();
}

std::size_t server::session_count() const noexcept {
  return p_->registry->size();
}

}  // namespace onceq::http
