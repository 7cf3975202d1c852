// onceqd: the server. Parses flags, opens the store, recovers the broker,
// starts the core runner and the HTTP server, and shuts down cleanly on
// SIGTERM/SIGINT; SIGHUP rereads --auth-file. The only place where objects
// are created and wired.

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "broker/broker.hpp"
#include "broker/runner.hpp"
#include "cmd/config.hpp"
#include "cmd/log.hpp"
#include "http/auth.hpp"
#include "http/router.hpp"
#include "http/server.hpp"
#include "http/tls.hpp"
#include "onceq_commit.hpp"  // ONCEQ_COMMIT, generated at build time (cmake/commit.cmake)
#include "storage/rocksdb/rocksdb_store.hpp"

// Read by jemalloc at start when onceqd is linked with it (cmd/CMakeLists.txt),
// ignored otherwise: hand freed pages back to the OS within about a second
// instead of ten, so that RSS follows the bounded caches (docs/OPERATIONS.md
// "Sizing") rather than the peak of the last burst.
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's
const char* malloc_conf = "dirty_decay_ms:1000,muzzy_decay_ms:0";
}

#ifndef ONCEQ_VERSION
#define ONCEQ_VERSION "0.0.0"
#endif

namespace {

namespace asio = boost::asio;
using namespace onceq;

constexpr int k_exit_failure = 1;
constexpr int k_exit_usage = 2;

// SIGHUP: the new file replaces the table only if it parses whole; the
// reason never quotes the file (auth_table::parse keeps secrets out of it).
// Runs on an I/O thread: the file is small, and sessions on the other
// threads go on meanwhile.
void reload_auth(http::authenticator* auth, const std::string& path) {
  if (auth == nullptr) {
    log(log_level::warn, "onceqd", "SIGHUP: no --auth-file, nothing to reload");
    return;
  }
  auto next = http::auth_table::load(path);
  if (!next.ok()) {
    log(log_level::error, "onceqd",
        fmt::format("SIGHUP: keeping the previous tokens: {}", next.err().message));
    return;
  }
  const std::size_t n = next->tokens().size();
  auth->replace(std::move(*next));
  log(log_level::info, "onceqd", "SIGHUP: reloaded the tokens",
      {log_number("tokens", n), {"file", path}});
}

int serve(cmd::config cfg, std::unique_ptr<http::authenticator> auth) {
  // Writes to a closed socket report EPIPE instead of killing the process.
  std::signal(SIGPIPE, SIG_IGN);
  cfg.http.version = ONCEQ_VERSION;
  cfg.http.commit = ONCEQ_COMMIT;

  // TLS files are checked before the store opens: a bad one is a usage error.
  std::shared_ptr<asio::ssl::context> tls;
  if (!cfg.http.tls_cert_file.empty()) {
    auto made = http::make_tls_context(cfg.http.tls_cert_file, cfg.http.tls_key_file);
    if (!made.ok()) {
      log(log_level::error, "onceqd", made.err().message);
      return k_exit_usage;
    }
    tls = std::move(*made);
  }

  // Declared first, destroyed last: the store's destructor may still run
  // durability callbacks that post to them (into the void once stopped).
  // One io_context per I/O thread (see http/server.hpp); the first also
  // runs the acceptor and the signal set.
  std::vector<std::unique_ptr<asio::io_context>> io_pool;
  std::vector<asio::io_context*> io_ptrs;
  for (unsigned i = 0; i < cfg.http.threads; ++i) {
    io_pool.push_back(std::make_unique<asio::io_context>(1));
    io_ptrs.push_back(io_pool.back().get());
  }
  asio::io_context& ioc = *io_pool.front();

  system_clock clock;
  cfg.storage.time = &clock;
  auto opened = storage::rocksdb_store::open(cfg.storage);
  if (!opened.ok()) {
    log(log_level::error, "onceqd",
        fmt::format("cannot open the store in {}: {}", cfg.storage.data_dir, opened.err().message));
    return k_exit_failure;
  }
  std::unique_ptr<storage::rocksdb_store> store = std::move(*opened);

  broker core(*store, clock, cfg.broker);
  if (auto r = core.recover(); !r.ok()) {
    log(log_level::error, "onceqd", fmt::format("recovery failed: {}", r.err().message));
    return k_exit_failure;
  }
  runner run(core, *store, clock, cfg.runner);
  run.start();

  http::router routes(run, clock, cfg.http, auth.get());
  {
    http::server srv(io_ptrs, routes, cfg.http, tls);
    auto bound = srv.listen();
    if (!bound.ok()) {
      log(log_level::error, "onceqd", bound.err().message);
      run.stop();
      return k_exit_failure;
    }
    srv.start();

    asio::signal_set hangups(ioc, SIGHUP);
    std::function<void()> wait_hangup = [&] {
      hangups.async_wait([&](const boost::system::error_code& ec, int) {
        if (ec) return;
        reload_auth(auth.get(), cfg.auth_file);
        wait_hangup();
      });
    };
    wait_hangup();

    std::promise<int> stop_signal;
    asio::signal_set signals(ioc, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      stop_signal.set_value(sig);
      // A second signal while shutting down: give up at once.
      signals.async_wait([](const boost::system::error_code& ec2, int) {
        if (!ec2) std::_Exit(k_exit_failure);
      });
    });

    std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
    std::vector<std::thread> threads;
    for (auto* io : io_ptrs) {
      work.push_back(asio::make_work_guard(*io));
      threads.emplace_back([io] {
        pthread_setname_np(pthread_self(), "onceq-io");  // for top -H, perf, gdb
        io->run();
      });
    }

    const auto addr = bound->address();
    fmt::print("onceqd listening on {}:{}\n",
               addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string(), bound->port());
    std::fflush(stdout);
    if (auth == nullptr && !addr.is_loopback()) {
      log(log_level::warn, "onceqd",
          fmt::format("listening on {} without --auth-file: anyone who can reach it may "
                      "produce, consume and delete topics (docs/SECURITY.md)",
                      addr.to_string()));
    }

    int sig = stop_signal.get_future().get();
    log(log_level::info, "onceqd", "shutting down", {log_number("signal", sig)});

    // Stop accepting and close idle connections; then stop the core, which
    // answers parked long-polls and releases every pending answer.
    srv.stop();
    run.stop();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg.shutdown_grace_ms);
    while (srv.session_count() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (srv.session_count() > 0) {
      log(log_level::warn, "onceqd",
          fmt::format("{} connection(s) still open after {} ms, closing them", srv.session_count(),
                      cfg.shutdown_grace_ms));
    }
    signals.cancel();
    hangups.cancel();
    for (auto& w : work) w.reset();
    for (auto* io : io_ptrs) io->stop();
    for (auto& t : threads) t.join();
  }
  log(log_level::info, "onceqd", "stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  auto cfg = cmd::parse_args(args);
  if (!cfg.ok()) {
    fmt::print(stderr, "onceqd: {}\nTry 'onceqd --help'.\n", cfg.err().message);
    return k_exit_usage;
  }
  if (cfg->show_help) {
    fmt::print("{}", cmd::usage());
    return 0;
  }
  if (cfg->show_version) {
    fmt::print("onceqd {} ({})\n", ONCEQ_VERSION, ONCEQ_COMMIT);
    return 0;
  }
  // Usage errors above are plain text for a person at a terminal; from
  // here on every line is a log line.
  cmd::install_logger(cfg->log);
  log(log_level::info, "onceqd", "starting",
      {{"version", ONCEQ_VERSION}, {"commit", ONCEQ_COMMIT}, {"data_dir", cfg->storage.data_dir}});
  std::unique_ptr<http::authenticator> auth;
  if (!cfg->auth_file.empty()) {
    auto table = http::auth_table::load(cfg->auth_file);
    if (!table.ok()) {
      log(log_level::error, "onceqd", fmt::format("--auth-file: {}", table.err().message));
      return k_exit_usage;
    }
    log(log_level::info, "onceqd", "auth on",
        {log_number("tokens", table->tokens().size()), {"file", cfg->auth_file}});
    auth = std::make_unique<http::authenticator>(std::move(*table));
  }
  try {
    return serve(std::move(*cfg), std::move(auth));
  } catch (const std::exception& e) {
    log(log_level::error, "onceqd", fmt::format("fatal: {}", e.what()));
    return k_exit_failure;
  }
}
