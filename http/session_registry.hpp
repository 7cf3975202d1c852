#pragma once

// What sessions share with the server: the options, the TLS context, the
// connection counters, the "stopping" flag and the set of live sessions (so
// that stop() can close the idle ones). Held by shared_ptr, so sessions may
// outlive the server object.
//
// Thread safety: every member may be called from any thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "http/metrics.hpp"
#include "http/options.hpp"
#include "http/spread.hpp"
#include "shard/cpu_idle.hpp"

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

  // How busy each loop is (loads[i]: loop i's; they outlive the sessions)
  // and how many cores sit idle (empty: /proc/stat's): what spreading
  // decides on (http/spread.hpp). Without them sessions only migrate. Set
  // before start.
  void set_loads(std::vector<const loop_load*> loads, cpu_idle::reader idle = {});
  bool has_loads() const noexcept { return !loads_.empty(); }
  loop_reading reading(std::uint32_t loop, std::chrono::steady_clock::time_point now) const;
  // Every loop's reading, in out (resized).
  void readings(std::chrono::steady_clock::time_point now, std::vector<loop_reading>& out) const;
  // Idle cores over the last period (cpu_idle::read), also kept for the
  // metrics (connection_stats::idle_cores_milli); nullopt while unknown.
  std::optional<double> idle_cores(std::chrono::steady_clock::time_point now);
  // Whether a session may spread out of loop now: one per
  // loop_load::k_window, so that the loop's next reading shows the effect
  // of one move before the next.
  bool take_spread_turn(std::uint32_t loop, std::chrono::steady_clock::time_point now);

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
  std::vector<const loop_load*> loads_;
  cpu_idle::reader idle_;
  std::unique_ptr<std::atomic<std::int64_t>[]> spread_turns_;  // per loop: ns of the last spread
  mutable std::mutex mu_;
  std::uint64_t next_id_ = 0;
  std::vector<std::pair<std::uint64_t, std::weak_ptr<session>>> sessions_;
  std::atomic<bool> stopping_{false};
};

}  // namespace onceq::http
