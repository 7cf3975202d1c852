#include "bench/failover.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "bench/message.hpp"
#include "bench/progress.hpp"

namespace onceq::bench {
namespace {

using namespace std::chrono_literals;

// "Light": one message per request, at most one every 2 ms.
constexpr auto k_probe_interval = 2ms;
// Steady writes before a kill: this many, over at least k_warmup_time.
constexpr std::size_t k_warmup_writes = 50;
constexpr auto k_warmup_time = 500ms;
// Writes go on this long after the recovery before the restart.
constexpr auto k_after_recovery = 200ms;
constexpr auto k_recovery_limit = 60s;
constexpr auto k_rejoin_limit = 120s;

// The probe's producer thread: writes until stopped; records the first
// acknowledged write whose attempt was sent at or after kill_ns.
class probe {
 public:
  probe(system_driver& drv, const run_setup& s, const bench_options& o, std::uint64_t& next_seq)
      : thread_([this, &drv, &s, &o, &next_seq] { loop(drv, s, o, next_seq); }) {}
  probe(const probe&) = delete;
  probe& operator=(const probe&) = delete;
  ~probe() { stop(); }

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void arm(std::uint64_t kill_ns) { kill_ns_ = kill_ns; }

  std::size_t acked() const { return acked_.load(); }
  std::uint64_t recovered_ns() const { return recovered_ns_.load(); }
  bool ended() const { return ended_.load(); }
  std::string error() const {
    std::lock_guard lock(mu_);
    return error_;
  }
  std::string via() const {
    std::lock_guard lock(mu_);
    return via_;
  }

 private:
  void loop(system_driver& drv, const run_setup& s, const bench_options& o,
            std::uint64_t& next_seq) {
    try {
      auto p = drv.make_producer(s, 0);
      bench_message m;
      while (!stop_) {
        const auto t0 = std::chrono::steady_clock::now();
        make_message(m, next_seq++, steady_now_ns(), o.payload);
        p->produce(std::span<const bench_message>(&m, 1));
        const std::uint64_t now = steady_now_ns();
        ++acked_;
        const std::uint64_t kill_ns = kill_ns_.load();
        if (kill_ns != 0 && recovered_ns_.load() == 0 && p->last_attempt_ns() >= kill_ns) {
          {
            std::lock_guard lock(mu_);
            via_ = p->last_node();
          }
          recovered_ns_ = now;
        }
        std::this_thread::sleep_until(t0 + k_probe_interval);
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      error_ = e.what();
    }
    ended_ = true;
  }

  std::atomic<bool> stop_{false};
  std::atomic<bool> ended_{false};
  std::atomic<std::uint64_t> kill_ns_{0};
  std::atomic<std::uint64_t> recovered_ns_{0};
  std::atomic<std::size_t> acked_{0};
  mutable std::mutex mu_;
  std::string error_;
  std::string via_;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace

failover_result run_failover(system_driver& drv, durability d, const bench_options& o) {
  failover_result r;
  if (!describe_system(r, drv, d)) return r;

  run_setup s;
  s.partitions = o.partitions;
  s.consumers = 0;
  s.failover = true;
  s.attempt_ms = o.failover_attempt_ms;
  s.retry_ms = o.failover_retry_ms;

  const auto made = make_temp_dir(
      o.tmp_root, fmt::format("onceq-bench-{}-{}-failover", r.system, r.durability), r.error);
  if (!made) return r;
  const std::filesystem::path dir = *made;
  const std::string label = fmt::format("[{} {} failover]", r.system, r.durability);
  progress_line progress;
  std::uint64_t next_seq = 0;  // only the probe thread of the moment uses it

  try {
    drv.start(d, dir);
    drv.prepare(s);
    cluster_control* cc = drv.cluster();
    if (cc == nullptr) throw std::runtime_error("not running as a cluster");
    for (int run = 0; run < o.failover_runs; ++run) {
      const std::size_t leader = cc->leader_of(s);
      if (run == 0) r.clients = cc->client_placement(s);
      failover_run fr;
      fr.killed = cc->node_name(leader);
      probe p(drv, s, o, next_seq);

      const auto warm_from = std::chrono::steady_clock::now();
      while (!p.ended() && (p.acked() < k_warmup_writes ||
                            std::chrono::steady_clock::now() - warm_from < k_warmup_time)) {
        if (std::chrono::steady_clock::now() - warm_from > k_recovery_limit) {
          throw std::runtime_error("no steady writes before the kill");
        }
        std::this_thread::sleep_for(5ms);
      }
      if (p.ended()) throw std::runtime_error("probe before the kill: " + p.error());

      const std::uint64_t kill_ns = steady_now_ns();
      p.arm(kill_ns);
      fr.killed_as = cc->kill(leader);
      const auto killed_at = std::chrono::steady_clock::now();
      while (p.recovered_ns() == 0 && !p.ended()) {
        if (std::chrono::steady_clock::now() - killed_at > k_recovery_limit) {
          throw std::runtime_error(
              fmt::format("run {}: no write acknowledged within {} s of the kill", run + 1,
                          k_recovery_limit.count()));
        }
        progress.update(fmt::format("{} run {}/{}: {} killed, waiting for a write", label, run + 1,
                                    o.failover_runs, fr.killed));
        std::this_thread::sleep_for(1ms);
      }
      if (p.recovered_ns() == 0) {
        throw std::runtime_error(fmt::format("run {}: probe: {}", run + 1, p.error()));
      }
      fr.ms = static_cast<double>(p.recovered_ns() - kill_ns) / 1e6;
      fr.via = p.via();
      std::this_thread::sleep_for(k_after_recovery);
      progress.update(fmt::format("{} run {}/{}: {} killed, {:.0f} ms; restarting it", label,
                                  run + 1, o.failover_runs, fr.killed, fr.ms));
      cc->restart(leader, s, k_rejoin_limit);
      p.stop();
      r.writes += p.acked();
      if (!p.error().empty()) {
        throw std::runtime_error(fmt::format("run {}: probe: {}", run + 1, p.error()));
      }
      r.runs.push_back(fr);
      progress.update(fmt::format("{} run {}/{}: {} killed, {:.0f} ms via {}", label, run + 1,
                                  o.failover_runs, fr.killed, fr.ms, fr.via));
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  drv.stop();

  std::vector<double> ms;
  for (const auto& fr : r.runs) ms.push_back(fr.ms);
  if (!ms.empty()) {
    std::sort(ms.begin(), ms.end());
    const std::size_t n = ms.size();
    r.median_ms = n % 2 == 1 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
    r.max_ms = ms.back();
  }
  progress.finish(fmt::format("{} {}: {} runs, median {:.0f} ms, max {:.0f} ms{}", label,
                              r.error.empty() ? "done" : "FAILED", r.runs.size(), r.median_ms,
                              r.max_ms, r.error.empty() ? "" : " — " + r.error));
  if (o.keep_data || !r.error.empty()) {
    std::fprintf(stderr, "%s data and logs kept in %s\n", label.c_str(), dir.c_str());
  } else {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return r;
}

}  // namespace onceq::bench
