// onceqd: the server. Parses flags, opens each shard's store, recovers its
// broker, starts the shards' loops and the HTTP server on them, and shuts down cleanly on
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
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include "broker/broker.hpp"
#include "cluster/raft_check.hpp"
#include "cmd/cluster_node.hpp"
#include "cmd/config.hpp"
#include "cmd/log.hpp"
#include "http/auth.hpp"
#include "http/codec/inspector.hpp"
#include "http/router.hpp"
#include "http/server.hpp"
#include "http/tls.hpp"
#include "onceq_commit.hpp"  // ONCEQ_COMMIT, generated at build time (cmake/commit.cmake)
#include "shard/layout.hpp"
#include "shard/shard_set.hpp"
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

// One shard's store and core, opened and recovered.
struct shard_parts {
  std::unique_ptr<storage::rocksdb_store> store;
  std::unique_ptr<broker> core;
};

result<shard_parts> open_shard(const cmd::config& cfg, const onceq::clock& time, std::uint32_t id) {
  storage::storage_options so = cfg.storage;
  so.data_dir = shard_data_dir(cfg.storage.data_dir, id);
  auto opened = storage::rocksdb_store::open(so);
  if (!opened.ok()) {
    return make_error(opened.err().code, fmt::format("cannot open the store of shard {} in {}: {}",
                                                     id, so.data_dir, opened.err().message));
  }
  shard_parts p{std::move(*opened), nullptr};
  p.core = std::make_unique<broker>(*p.store, time, &http::json_inspector(), cfg.broker);
  if (auto r = p.core->recover(); !r.ok()) {
    return make_error(r.err().code,
                      fmt::format("recovery of shard {} failed: {}", id, r.err().message));
  }
  return p;
}

// Shards past --shards that still hold topics: onceqd does not move topics
// between shards, so it refuses to start rather than hide them.
result<void> check_no_stranded_topics(const cmd::config& cfg, const onceq::clock& time) {
  for (std::uint32_t id : shard_dirs_from(cfg.storage.data_dir, cfg.shards)) {
    auto parts = open_shard(cfg, time, id);
    if (!parts.ok()) return std::move(parts).err();
    const auto topics = parts->core->list_topics();
    if (topics.empty()) continue;
    return make_error(
        errc::failed_precondition,
        fmt::format("{} holds {} topic(s) on shard {} (\"{}\", ...), but --shards is "
                    "{}: start with --shards {} or more (topics stay on the shard "
                    "they were created on)",
                    cfg.storage.data_dir, topics.size(), id, topics.front(), cfg.shards, id + 1));
  }
  return {};
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

  system_clock clock;
  cfg.storage.time = &clock;
  // A node of a cluster: its shards apply their Raft groups' logs.
  std::unique_ptr<cmd::cluster_node> node;
  if (!cfg.cluster_file.empty()) {
    // Never a cluster on a raft without the current-term commit rule.
    auto checked = cluster::check_raft();
    if (!checked.ok()) {
      log(log_level::error, "onceqd", "refusing to start: " + checked.err().message);
      return k_exit_failure;
    }
    log(log_level::info, "onceqd", "raft commit rule checked", {{"stamp", std::string(*checked)}});
    auto opened = cmd::cluster_node::open(cfg);
    if (!opened.ok()) {
      log(log_level::error, "onceqd", opened.err().message);
      return opened.code() == errc::invalid_argument ? k_exit_usage : k_exit_failure;
    }
    node = std::move(*opened);
  }
  if (auto r = check_no_stranded_topics(cfg, clock); !r.ok()) {
    log(log_level::error, "onceqd", r.err().message);
    return k_exit_failure;
  }

  // Declared first, destroyed last: a store's destructor may still run
  // durability callbacks that post to a shard's io_context (into the void
  // once stopped), so the shards (and their loops) outlive the stores.
  std::vector<std::unique_ptr<shard>> shards;
  std::vector<shard_parts> parts;
  for (std::uint32_t id = 0; node != nullptr && id < cfg.shards; ++id) {
    shards.push_back(std::make_unique<shard>(id, node->core(id), node->store(id), clock, cfg.shard,
                                             &node->log(id)));
  }
  for (std::uint32_t id = 0; node == nullptr && id < cfg.shards; ++id) {
    auto p = open_shard(cfg, clock, id);
    if (!p.ok()) {
      log(log_level::error, "onceqd", p.err().message);
      return k_exit_failure;
    }
    parts.push_back(std::move(*p));
    shards.push_back(
        std::make_unique<shard>(id, *parts.back().core, *parts.back().store, clock, cfg.shard));
  }
  std::vector<shard*> shard_ptrs;
  std::vector<asio::io_context*> loops;
  std::vector<const loop_load*> loads;
  for (auto& s : shards) {
    shard_ptrs.push_back(s.get());
    loops.push_back(&s->context());
    loads.push_back(&s->load());
  }
  shard_set placement(shard_ptrs,
                      node != nullptr ? placement_rule::hashed : placement_rule::balanced);
  if (auto r = placement.load(); !r.ok()) {
    log(log_level::error, "onceqd", r.err().message);
    return k_exit_failure;
  }
  if (node != nullptr) {
    if (auto r = node->start(); !r.ok()) {
      log(log_level::error, "onceqd", r.err().message);
      return k_exit_failure;
    }
  }
  // In a cluster raft stops first: proposals in flight answer unavailable
  // on the loops, which still run.
  auto stop_shards = [&] {
    if (node != nullptr) node->stop();
    for (auto& s : shards) s->stop();
  };
  for (auto& s : shards) s->start();

  // The first shard's loop also runs the acceptor and the signal sets.
  asio::io_context& ioc = *loops.front();
  http::router routes(placement, clock, cfg.http, auth.get(), node.get());
  {
    http::server srv(loops, routes, cfg.http, tls, std::move(loads));
    auto bound = srv.listen();
    if (!bound.ok()) {
      log(log_level::error, "onceqd", bound.err().message);
      stop_shards();
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

    const auto addr = bound->address();
    fmt::print("onceqd listening on {}:{}\n",
               addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string(), bound->port());
    std::fflush(stdout);
    log(log_level::info, "onceqd", "serving",
        {log_number("shards", cfg.shards),
         {"wal_sync", cfg.storage.sync_on_caller ? "loop" : "syncer"},
         {"cluster", node != nullptr ? cfg.node_id : std::string("off")}});
    if (auth == nullptr && !addr.is_loopback()) {
      log(log_level::warn, "onceqd",
          fmt::format("listening on {} without --auth-file: anyone who can reach it may "
                      "produce, consume and delete topics (docs/SECURITY.md)",
                      addr.to_string()));
    }

    int sig = stop_signal.get_future().get();
    log(log_level::info, "onceqd", "shutting down", {log_number("signal", sig)});

    // Stop accepting and close idle connections; the shards stop taking
    // commands and answer parked long-polls, while their loops go on
    // writing the answers still owed.
    srv.stop();
    for (auto& s : shards) s->drain();
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
    // Cancelled on the loop that owns them.
    std::promise<void> cancelled;
    asio::post(ioc, [&] {
      signals.cancel();
      hangups.cancel();
      cancelled.set_value();
    });
    cancelled.get_future().wait();
    stop_shards();
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
