// onceq-raft-bench: what one Raft group of cluster/raft_node costs and
// carries, alone (no HTTP, no broker): N nodes in this process on
// 127.0.0.1, each with its own data dir and libuv thread, a state machine
// that only counts, and a client that keeps K proposals of B bytes in
// flight on the leader. Prints the rate, the latency of a proposal (queued
// to its reply, i.e. appended, fsynced on a majority and applied on the
// leader), how many entries each raft_apply carried (group commit), and the
// process's CPU per entry (all nodes together: every replica's append,
// fsync and apply). Then it stops one follower and starts it again on
// its log, and prints how long raft_node::start took: raft loads every
// open segment whole, so that time grows with --segment-mib.
//
//   onceq-raft-bench [--nodes 3] [--proposals 20000] [--in-flight 64] [--bytes 300]
//                    [--heartbeat-ms 100] [--snapshot-every 1024] [--segment-mib 64]
//                    [--dir /tmp]
//
// Talks only to 127.0.0.1; removes its data dirs when done.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cluster/config.hpp"
#include "cluster/raft_node.hpp"

namespace {

using namespace onceq::cluster;
using steady = std::chrono::steady_clock;

class counter final : public state_machine {
 public:
  std::string apply(std::uint64_t, std::string_view) override {
    applied_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  std::string snapshot() override { return std::to_string(applied_.load()); }
  void restore(std::string_view s) override { applied_.store(std::stoull(std::string(s))); }

 private:
  std::atomic<std::uint64_t> applied_{0};
};

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

unsigned arg(int argc, char** argv, const char* name, unsigned def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == name) return static_cast<unsigned>(std::stoul(argv[i + 1]));
  }
  return def;
}

std::string arg_s(int argc, char** argv, const char* name, std::string def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == name) return argv[i + 1];
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned nodes = arg(argc, argv, "--nodes", 3);
  const unsigned proposals = arg(argc, argv, "--proposals", 20000);
  const unsigned in_flight = arg(argc, argv, "--in-flight", 64);
  const unsigned bytes = arg(argc, argv, "--bytes", 300);
  const unsigned heartbeat_ms = arg(argc, argv, "--heartbeat-ms", 100);
  const unsigned snapshot_every = arg(argc, argv, "--snapshot-every", 1024);
  const unsigned segment_mib = arg(argc, argv, "--segment-mib",
                                   static_cast<unsigned>(raft_node_options{}.segment_bytes >> 20));
  const std::filesystem::path root = std::filesystem::path(arg_s(argc, argv, "--dir", "/tmp")) /
                                     fmt::format("onceq-raft-bench-{}", ::getpid());
  if (nodes == 0 || nodes > 7 || proposals == 0 || in_flight == 0 || bytes == 0 ||
      segment_mib == 0 || segment_mib > 1024) {
    std::fprintf(stderr,
                 "usage: onceq-raft-bench [--nodes 1..7] [--proposals N] "
                 "[--in-flight K] [--bytes B] [--segment-mib 1..1024] [--dir DIR]\n");
    return 2;
  }

  // Ports below the ephemeral range, picked at random.
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  const int base = 21000 + static_cast<int>(rng() % 9000);
  std::string file;
  for (unsigned i = 0; i < nodes; ++i) {
    file +=
        fmt::format("[[node]]\nid = \"n{}\"\nhttp = \"127.0.0.1:{}\"\nraft = \"127.0.0.1:{}\"\n",
                    i + 1, base + 2 * i, base + 2 * i + 1);
  }
  std::vector<std::unique_ptr<counter>> machines;
  for (unsigned i = 0; i < nodes; ++i) machines.push_back(std::make_unique<counter>());
  // Node i on its data dir (nullptr, having said why, if it did not start).
  auto start_node = [&](unsigned i) -> std::unique_ptr<raft_node> {
    auto cfg = cluster_config::parse(file, "bench.toml", fmt::format("n{}", i + 1));
    if (!cfg.ok()) {
      std::fprintf(stderr, "%s\n", cfg.err().message.c_str());
      return nullptr;
    }
    raft_node_options o;
    o.data_dir = (root / fmt::format("n{}", i + 1)).string();
    o.heartbeat_timeout_ms = heartbeat_ms;
    o.snapshot_threshold = snapshot_every;
    o.election_timeout_ms = std::max(1000u, heartbeat_ms * 10);
    o.segment_bytes = std::size_t{segment_mib} << 20;
    auto n = raft_node::start(std::move(*cfg), o, {machines[i].get()});
    if (!n.ok()) {
      std::fprintf(stderr, "%s\n", n.err().message.c_str());
      return nullptr;
    }
    return std::move(*n);
  };
  std::vector<std::unique_ptr<raft_node>> running;
  for (unsigned i = 0; i < nodes; ++i) {
    running.push_back(start_node(i));
    if (running.back() == nullptr) return 1;
  }

  // The leader, once every node agrees on it.
  std::size_t leader = 0;
  const auto give_up = steady::now() + std::chrono::seconds(20);
  for (bool found = false; !found;) {
    if (steady::now() > give_up) {
      std::fprintf(stderr, "no leader after 20 s\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (std::size_t i = 0; i < running.size(); ++i) {
      auto s = running[i]->status(0);
      if (s.ok() && s->leader_ready) {
        leader = i;
        found = true;
      }
    }
  }

  const std::string entry(bytes, 'x');
  std::mutex mu;
  std::condition_variable cv;
  unsigned outstanding = 0, done = 0, failed = 0;
  std::vector<double> latency_us;
  latency_us.reserve(proposals);
  const double cpu0 = cpu_seconds();
  const auto t0 = steady::now();
  const auto s0 = running[leader]->status(0);
  for (unsigned sent = 0; sent < proposals; ++sent) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return outstanding < in_flight; });
    ++outstanding;
    lk.unlock();
    const auto at = steady::now();
    auto r = running[leader]->propose(0, entry, [&, at](op_result res) {
      const double us = std::chrono::duration<double, std::micro>(steady::now() - at).count();
      std::lock_guard g(mu);
      --outstanding;
      ++done;
      if (!res.ok()) ++failed;
      latency_us.push_back(us);
      cv.notify_all();
    });
    if (!r.ok()) {
      std::lock_guard g(mu);
      --outstanding;
      ++done;
      ++failed;
    }
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done == proposals; });
  }
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  const auto s1 = running[leader]->status(0);

  // A follower's restart on its log: the load raft does before it serves.
  double restart_ms = 0;
  if (nodes > 1) {
    const unsigned f = leader == 0 ? 1 : 0;
    running[f]->stop();
    running[f].reset();
    const auto r0 = steady::now();
    running[f] = start_node(f);
    restart_ms = std::chrono::duration<double, std::milli>(steady::now() - r0).count();
    if (running[f] == nullptr) return 1;
  }
  for (auto& n : running) n->stop();
  running.clear();
  std::error_code ec;
  std::filesystem::remove_all(root, ec);

  std::sort(latency_us.begin(), latency_us.end());
  auto pct = [&](double p) {
    if (latency_us.empty()) return 0.0;
    return latency_us[std::min(
        latency_us.size() - 1,
        static_cast<std::size_t>(p * static_cast<double>(latency_us.size())))];
  };
  const double per_call = s1.ok() && s0.ok() && s1->apply_calls > s0->apply_calls
                              ? static_cast<double>(s1->proposals - s0->proposals) /
                                    static_cast<double>(s1->apply_calls - s0->apply_calls)
                              : 0.0;
  std::printf(
      "raft_node: %u nodes, %u proposals of %u bytes, %u in flight, heartbeat %u ms, a "
      "snapshot every %u entries, %u MiB segments: %.0f entries/s, p50 %.2f ms, p99 %.2f ms, "
      "p99.9 %.2f ms, max %.2f ms, %.1f entries per raft_apply, %.1f us CPU per entry "
      "(all nodes), a follower's restart %.0f ms, %u failed\n",
      nodes, proposals, bytes, in_flight, heartbeat_ms, snapshot_every, segment_mib,
      proposals / secs, pct(0.50) / 1000, pct(0.99) / 1000, pct(0.999) / 1000,
      latency_us.empty() ? 0.0 : latency_us.back() / 1000, per_call, cpu / proposals * 1e6,
      restart_ms, failed);
  return failed == 0 ? 0 : 1;
}
