#pragma once

// What sessions share with the server: the options, the TLS context, the
// connection counters, the "stopping" flag and the set of live sessions (so
// that stop() can close the idle ones). Held by shared_ptr, so sessions may
// outlive the server object.
//
// Thread safety: every member may be called from any thread.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "http/metrics.hpp"
#include "http/options.hpp"

namespace boost::asio {
class io_context;
namespace ssl {
class context;
}
}  // namespace boost::asio

namespace onceq::http {

class session;

class session_registry {
 public:
  // stats must outlive every session (it lives in the router's metrics);
  // tls: null for plain HTTP.
  session_registry(http_options opts, connection_stats& stats,
                   std::shared_ptr<boost::asio::ssl::context> tls)
      : opts_(std::move(opts)), stats_(stats), tls_(std::move(tls)) {}

  const http_options& options() const noexcept { return opts_; }
  connection_stats& stats() const noexcept { return stats_; }
  boost::asio::ssl::context* tls() const noexcept { return tls_.get(); }

  // The shards' loops, loop i running shard i (server's pool layout): where
  // a session may move to follow its requests' shard. Set before start.
  void set_loops(std::vector<boost::asio::io_context*> loops) { loops_ = std::move(loops); }
  boost::asio::io_context* loop(std::uint32_t shard) const noexcept {
    return shard < loops_.size() ? loops_[shard] : nullptr;
  }

  // add() and remove() also keep stats().open.
  std::uint64_t add(std::weak_ptr<session> s);
  void remove(std::uint64_t id);
  std::size_t size() const;

  // Marks the server as stopping and asks every live session to shut down.
  void stop_all();
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

 private:
  const http_options opts_;
  connection_stats& stats_;
  const std::shared_ptr<boost::asio::ssl::context> tls_;
  std::vector<boost::asio::io_context*> loops_;
  mutable std::mutex mu_;
  std::uint64_t next_id_ = 0;
  std::vector<std::pair<std::uint64_t, std::weak_ptr<session>>> sessions_;
  std::atomic<bool> stopping_{false};
};

}  // namespace onceq::http
