// crash_loop: SIGKILLs and restarts a real onceqd over and over under a
// producer/consumer workload, then drains everything without kills and
// checks the client-side history (crash_loop_history.hpp) for broken
// promises. Exit status: 0 clean, 1 violations, 2 the run was incomplete
// (fewer kills than asked within --duration-limit, or no load), 3 setup
// failure (the server did not start or recover).
//
//   crash_loop --kills 20 --seed 7 --duration-limit 90
//
// With --cluster N it runs N onceqd nodes of one cluster (onceqd --cluster)
// on 127.0.0.1 instead: every request goes to a random live node (retried
// on another one after no answer or a 503, with the same dedup id), and the
// killer SIGKILLs one node at a time (the leader of a topic's shard
// --leader-percent of the time, else a follower), restarts it after a
// random pause and waits until its GET /v1/cluster answers before the next
// kill: a majority is always up.
//
// With --pipeline the workload is a chain of workflow steps instead:
// producers fill topic step1, the workers of step1 and step2 ack each
// delivery with a produce of the same id into the next topic (POST /v1/ack
// with "produce"), the workers of step3 just ack; after the drain, group
// "audit" reads all three topics and every stored step1 id must be in step2
// and step3 exactly once (see "workflow-step pipelines" below). With
// --cluster too (and --shards 2 or more), the steps' names are picked so
// that step1 -> step2 stays on one shard and step2 -> step3 crosses shards.
//
// With --ordering (one onceqd) the topic is created with "ordering":"key"
// and the check is per message key: no two leases of a key at once, acks in
// offset order, every answered message acked exactly once (see "ordering
// per key" below).
//
// The kill moments and every client decision come from --seed; thread
// interleavings and the server's timing do not, so a seed reproduces the
// schedule of a failing run, not its exact history.

#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster_support.hpp"
#include "crash_loop_history.hpp"
#include "http_client.hpp"
#include "server_process.hpp"

namespace onceq::itest::crash_loop {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr std::string_view k_group = "g";
constexpr auto k_client_timeout = 3s;

struct config {
  int kills = 20;
  std::uint64_t seed = 1;
  std::string data_dir;       // "" = a temp dir, removed afterwards
  std::string onceqd;         // "" = the build's onceqd
  int duration_limit_s = 90;  // the kill phase stops here, kills done or not
  int producers = 2;
  int consumers = 3;
  int kill_min_ms = 200;  // server uptime between kills: uniform in [min, max]
  int kill_max_ms = 1200;
  int produce_pause_ms = 10;  // per producer, between keys
  int drain_limit_s = 60;
  // Fault injection, to show that the harness catches lost writes: at this
  // kill, copy the (dead) server's data directory; two kills later, put the
  // copy back, as a storage that silently lost its recent writes would.
  // 0 = off.
  int rollback_at_kill = 0;
  // onceqd's --shards (0 = its default), and how many topics the workload
  // spreads over (producer i and consumer j work on topics i and j modulo
  // topics). With 2 shards and 2 topics, placement puts one topic on each
  // shard, so the kills hit two loops and two RocksDB instances at once.
  int shards = 0;
  int topics = 1;
  // --cluster N: N nodes (0 = one plain onceqd). The kill cadence defaults
  // to a cluster's pace (an election takes 1-2 s): uptime between kills
  // 500-2500 ms, a killed node down 0-1500 ms.
  int cluster = 0;
  int leader_percent = 60;  // kills aimed at a topic's shard leader
  int down_max_ms = -1;     // -1: 100 alone, 1500 in a cluster
  // --replicas R: the cluster file's `replicas` (0: not written, so every
  // node of a file of 3 holds every shard). --moves: with the kills, the
  // killer keeps shard moves running (POST /v1/cluster/shards/{s}/move of a
  // random replica to a node without one), aims a third of its kills at a
  // running move's source or target, checks after every kill and restart
  // that each shard's group (its replicas and a move's target) has a
  // majority up, and at the end that every shard has R replicas on distinct
  // nodes, matching the voters its leader sees.
  int replicas = 0;
  bool moves = false;
  // --pipeline: workflow steps step1 -> step2 -> step3 instead of the
  // producer/consumer workload (--consumers workers per step).
  bool pipeline = false;
  // --ordering: one topic created with "ordering":"key" (see "ordering per
  // key" below).
  bool ordering = false;
  // --ordering-off: the same workload and check on a topic created with
  // "ordering":"none", the check's negative control (it must report
  // key_lease_overlap or key_ack_order).
  bool ordering_off = false;

  // The workload's topics (`topics` of them), set by the harness before the
  // workload starts: topic_name(0..) alone; in a cluster, where placement
  // hashes the name, the first names that land on distinct shards.
  std::vector<std::string> topic_names;
  const std::string& topic(int t) const { return topic_names.at(static_cast<std::size_t>(t)); }

  // --pipeline: the topics of steps 1..3. One onceqd places by creation
  // order (these names do); a cluster hashes the name, and the harness
  // picks names that place step1 and step2 on one shard, step3 on another.
  std::array<std::string, 3> steps{"step1", "step2", "step3"};
  const std::string& step_topic(int step) const { return steps.at(static_cast<std::size_t>(step)); }
};

// Topic t of the workload: "crash", "crash-1", "crash-2", ...
std::string topic_name(int t) {
  return t == 0 ? std::string("crash") : "crash-" + std::to_string(t);
}

// A position names one message across topics: the history keys on
// (partition, offset), so topic t's partitions are numbered from
// t * k_partition_stride in it.
constexpr std::uint32_t k_partition_stride = 1000;

millis now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string numbered(std::string_view prefix, long long n) {
  std::string out(prefix);
  out += std::to_string(n);
  return out;
}

// What every workload thread shares with the harness.
struct shared_state {
  explicit shared_state(std::size_t nodes) : ports(nodes) {}
  // Each node's port, 0 while it is down (one entry without --cluster).
  std::vector<std::atomic<std::uint16_t>> ports;
  bool cluster = false;
  // In a cluster, every answer names the node that applied it
  // (X-Onceq-Node): one of these.
  std::vector<std::string> node_ids;
  std::atomic<bool> stop_producing{false};
  std::atomic<bool> final_phase{false};  // consumers ack everything, long leases
  std::atomic<bool> stop_consuming{false};
};

// Requests that got an answer the workload never expects (400, 500, ...):
// each one is a violation.
struct unexpected_log {
  std::vector<std::string> lines;
  void add(std::string_view what, const http_response& r) {
    lines.push_back(std::string(what) + ": " + std::to_string(r.status) + " " + r.body);
  }
};

// Keep-alive connections to whichever servers are up: each request goes to
// a random live node (the only one without --cluster), avoiding the node
// that last gave no answer or a 503 while another is up. Answers nullopt
// when there was no answer (down, killed, timeout).
class connection {
 public:
  connection(const shared_state& s, std::uint64_t seed)
      : s_(s), rng_(seed), clients_(s.ports.size()), client_ports_(s.ports.size(), 0) {}

  std::optional<http_response> send(std::string_view method, std::string_view target,
                                    const json& body = nullptr, const header_list& headers = {}) {
    std::vector<std::size_t> live;
    for (std::size_t i = 0; i < s_.ports.size(); ++i) {
      if (s_.ports[i].load() != 0 && (static_cast<int>(i) != avoid_ || s_.ports.size() == 1)) {
        live.push_back(i);
      }
    }
    if (live.empty() && avoid_ >= 0 && s_.ports[static_cast<std::size_t>(avoid_)].load() != 0) {
      live.push_back(static_cast<std::size_t>(avoid_));
    }
    if (live.empty()) return std::nullopt;
    const std::size_t i = live.size() == 1 ? live.front() : live[rng_() % live.size()];
    const std::uint16_t p = s_.ports[i].load();
    if (p == 0) return std::nullopt;
    auto& client = clients_[i];
    if (p != client_ports_[i] || !client) {
      client = std::make_unique<http_client>(p, k_client_timeout);
      client_ports_[i] = p;
    }
    try {
      auto r =
          client->request(method, target, body.is_null() ? std::string() : body.dump(), headers);
      if (r.status == 503) ++unavailable_;
      avoid_ = r.status == 503 ? static_cast<int>(i) : -1;
      if (s_.cluster) check_headers(method, target, r);
      return r;
    } catch (const std::exception&) {
      client.reset();
      ++no_answer_;
      avoid_ = static_cast<int>(i);
      return std::nullopt;
    }
  }

  std::size_t unavailable() const { return unavailable_; }
  std::size_t no_answer() const { return no_answer_; }
  // Answers without the headers a cluster promises (first 20).
  const std::vector<std::string>& bad_headers() const { return bad_headers_; }

 private:
  const shared_state& s_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<http_client>> clients_;
  std::vector<std::uint16_t> client_ports_;
  void check_headers(std::string_view method, std::string_view target, const http_response& r) {
    std::string why;
    const std::string node = r.header("X-Onceq-Node");
    if (r.status == 503) {
      if (r.header("Retry-After").empty()) why = "503 without Retry-After";
    } else if (std::find(s_.node_ids.begin(), s_.node_ids.end(), node) == s_.node_ids.end()) {
      why = "X-Onceq-Node '" + node + "' names no node";
    }
    if (!why.empty() && bad_headers_.size() < 20) {
      bad_headers_.push_back(why + ": " + std::string(method) + " " + std::string(target) + " " +
                             std::to_string(r.status) + " " + r.body.substr(0, 200));
    }
  }

  int avoid_ = -1;
  std::size_t unavailable_ = 0;
  std::size_t no_answer_ = 0;
  std::vector<std::string> bad_headers_;
};

bool retryable(unsigned status) {
  return status == 429 || status == 503;
}

// What a producer and a consumer thread share: its index, the topic it
// works on, its random source, its connection, the history it records and
// the unexpected answers it saw.
class worker {
 public:
  history take() { return std::move(h_); }
  unexpected_log& unexpected() { return unexpected_; }
  const connection& conn() const { return conn_; }

 protected:
  // salt: 100 for producers, 200 for consumers; the connection's seed is
  // salt + 200.
  worker(int index, const config& cfg, shared_state& s, std::uint64_t salt)
      : index_(index),
        topic_(index % cfg.topics),
        cfg_(cfg),
        s_(s),
        rng_(cfg.seed * 7919 + salt + index),
        conn_(s, cfg.seed * 7919 + salt + 200 + index) {}

  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }

  int index_;
  int topic_;
  const config& cfg_;
  shared_state& s_;
  std::mt19937_64 rng_;
  connection conn_;
  history h_;
  unexpected_log unexpected_;
};

// ---- producers ----------------------------------------------------------

class producer : public worker {
 public:
  producer(int index, const config& cfg, shared_state& s) : worker(index, cfg, s, 100) {}

  void run() {
    // Each key gets two messages; the second is sometimes sent right away,
    // sometimes a few keys later (after the first may have been acked, so
    // that it must be auto-acked).
    std::deque<std::string> pending_b;
    for (long long n = 0; !s_.stop_producing.load(); ++n) {
      const std::string key = numbered(numbered("p", index_) + "-", n);
      if (pick(10) < 3) {
        produce_batch(key);
      } else {
        produce_one(key, key + ".a");
        pending_b.push_back(key);
        while (!pending_b.empty() && static_cast<int>(pending_b.size()) > pick(4)) {
          produce_one(pending_b.front(), pending_b.front() + ".b");
          pending_b.pop_front();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg_.produce_pause_ms));
    }
    for (const auto& key : pending_b) produce_one(key, key + ".b");
  }

  millis longest_wait_ms() const { return longest_wait_ms_; }

 private:
  static json message(const std::string& key, const std::string& id) {
    // The value is the dedup id, so that a delivery names its produce. The
    // message key spreads the two messages of one idempotency key over
    // partitions (the key's lease must hold across them).
    return {{"key", id}, {"value", id}, {"envelope", {{"idempotency_key", key}}}};
  }

  void produce_one(const std::string& key, const std::string& id) {
    json body = message(key, id);
    body["topic"] = cfg_.topic(topic_);
    auto res = send_with_retries(body, id);
    if (!res) return;
    h_.produces.push_back({id,
                           key,
                           {position_partition(res->at("partition").get<std::uint32_t>()),
                            res->at("offset").get<std::uint64_t>()},
                           res->at("duplicate").get<bool>(),
                           now_ms()});
  }

  void produce_batch(const std::string& key) {
    const std::string header = key + ".batch";
    json body = {{"topic", cfg_.topic(topic_)},
                 {"messages", {message(key, header + "#0"), message(key, header + "#1")}}};
    auto res = send_with_retries(body, header);
    if (!res) return;
    const auto& results = res->at("results");
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results.at(i);
      h_.produces.push_back({numbered(header + "#", static_cast<long long>(i)),
                             key,
                             {position_partition(r.at("partition").get<std::uint32_t>()),
                              r.at("offset").get<std::uint64_t>()},
                             r.at("duplicate").get<bool>(),
                             now_ms()});
    }
  }

  // The same request and Idempotency-Key until a 200: stored once. Gives up
  // (nullopt, not recorded) 15 s after the producers were told to stop.
  std::optional<json> send_with_retries(const json& body, const std::string& dedup_id) {
    std::optional<millis> give_up;
    const millis first = now_ms();
    for (;;) {
      if (!give_up && s_.stop_producing.load()) give_up = now_ms() + 15'000;
      if (give_up && now_ms() > *give_up) return std::nullopt;
      auto r = conn_.send("POST", "/v1/produce", body, {{"Idempotency-Key", dedup_id}});
      if (r && r->status == 200) {
        longest_wait_ms_ = std::max(longest_wait_ms_, now_ms() - first);
        return r->json();
      }
      if (r && !retryable(r->status)) {
        unexpected_.add("produce " + dedup_id, *r);
        return std::nullopt;
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  std::uint32_t position_partition(std::uint32_t p) const {
    return static_cast<std::uint32_t>(topic_) * k_partition_stride + p;
  }

  millis longest_wait_ms_ = 0;  // first attempt to 200, over every answered produce
};

// ---- consumers ----------------------------------------------------------

class consumer : public worker {
 public:
  consumer(int index, const config& cfg, shared_state& s) : worker(index, cfg, s, 200) {}

  void run() {
    while (!s_.stop_consuming.load()) {
      const bool final_phase = s_.final_phase.load();
      const std::int64_t lease_ms = final_phase ? 5000 : 200 + pick(301);
      json body = {{"topic", cfg_.topic(topic_)}, {"group", k_group}, {"owner", owner()},
                   {"max_messages", 1 + pick(4)}, {"wait_ms", 100},   {"lease_ms", lease_ms}};
      const millis sent = now_ms();
      auto r = conn_.send("POST", "/v1/consume", body);
      if (!r) {  // deliveries lost with the answer: like a consumer crash
        std::this_thread::sleep_for(20ms);
        continue;
      }
      if (r->status != 200) {
        if (!retryable(r->status)) unexpected_.add("consume", *r);
        std::this_thread::sleep_for(20ms);
        continue;
      }
      const millis answered = now_ms();
      std::vector<delivery_record> got;
      for (const auto& m : r->ndjson()) {
        got.push_back({owner(),
                       m.at("envelope").at("idempotency_key").get<std::string>(),
                       m.at("value").get<std::string>(),
                       {static_cast<std::uint32_t>(topic_) * k_partition_stride +
                            m.at("partition").get<std::uint32_t>(),
                        m.at("offset").get<std::uint64_t>()},
                       m.at("attempts").get<std::int64_t>(),
                       m.at("lease_expires_at_ms").get<millis>(),
                       sent,
                       answered,
                       r->header("X-Onceq-Node")});
      }
      h_.deliveries.insert(h_.deliveries.end(), got.begin(), got.end());
      settle_all(got, final_phase, lease_ms);
    }
  }

 private:
  std::string owner() const { return numbered(numbered("c", index_) + ".", incarnation_); }

  void settle_all(const std::vector<delivery_record>& got, bool final_phase,
                  std::int64_t lease_ms) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      const int roll = final_phase ? 99 : pick(100);
      if (roll < 7) {
        // Crash: drop this and the rest unacked; their leases must lapse.
        // The restarted consumer is another owner.
        ++crashes_;
        ++incarnation_;
        return;
      }
      if (roll < 15) {
        settle(settle_record::kind::nack, {got[i]}, json{{"delay_ms", pick(31)}});
        continue;
      }
      if (roll < 19) {
        // Slow: acks after its lease ran out (accepted only if nobody else
        // got the message or its key meanwhile).
        std::this_thread::sleep_for(std::chrono::milliseconds(lease_ms + 20 + pick(180)));
      } else if (got.size() - i >= 2 && roll < 40) {
        settle(
            settle_record::kind::ack,
            std::vector<delivery_record>(got.begin() + static_cast<std::ptrdiff_t>(i), got.end()),
            json::object());
        return;
      }
      settle(settle_record::kind::ack, {got[i]}, json::object());
    }
  }

  // Sends one ack/nack (single, or a batch ack when ds has several) and
  // retries it on no answer for up to 5 s. Records one settle_record per
  // delivery.
  void settle(settle_record::kind what, const std::vector<delivery_record>& ds, json extra) {
    const bool batch = ds.size() > 1;
    json body = std::move(extra);
    body["topic"] = cfg_.topic(topic_);
    body["group"] = k_group;
    body["owner"] = ds.front().owner;
    auto item = [](const delivery_record& d) {
      return json{{"partition", d.pos.first % k_partition_stride},
                  {"offset", d.pos.second},
                  {"attempts", d.attempts}};
    };
    if (batch) {
      body["acks"] = json::array();
      for (const auto& d : ds) body["acks"].push_back(item(d));
    } else {
      body.update(item(ds.front()));
    }
    if (what == settle_record::kind::ack) body["result"] = {{"by", ds.front().owner}};
    const std::string target = what == settle_record::kind::ack ? "/v1/ack" : "/v1/nack";
    if (batch) body.erase("result");

    const millis sent = now_ms();
    bool lost_one = false;  // an attempt without answer may have applied
    std::optional<http_response> r;
    for (;;) {
      r = conn_.send("POST", target, body);
      if (r && !retryable(r->status)) break;
      // In a cluster a 503 may also mean "appended, then leadership lost":
      // the outcome is unknown, as without an answer.
      lost_one = lost_one || !r || (s_.cluster && r->status == 503);
      if (now_ms() - sent > 5000 || s_.stop_consuming.load()) {
        r.reset();
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    const millis answered = now_ms();
    using o = settle_record::outcome;
    auto record = [&](const delivery_record& d, o result) {
      if (result == o::rejected && lost_one) result = o::unknown;
      h_.settles.push_back({what, result, d.owner, d.key, d.pos, d.attempts, sent,
                            result == o::unknown ? 0 : answered,
                            r && result != o::unknown ? r->header("X-Onceq-Node") : std::string()});
    };
    if (!r) {
      for (const auto& d : ds) record(d, o::unknown);
      return;
    }
    if (!batch) {
      if (r->status == 204) {
        record(ds.front(), o::ok);
      } else {
        if (r->status != 409) unexpected_.add(target, *r);
        record(ds.front(), o::rejected);
      }
      return;
    }
    if (r->status != 200) {
      unexpected_.add(target, *r);
      for (const auto& d : ds) record(d, o::rejected);
      return;
    }
    const auto results = r->json().at("results");
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const auto& x = results.at(i);
      if (x.at("status") == "acked") {
        record(ds[i], o::ok);
      } else {
        if (x.value("error", "") != "FAILED_PRECONDITION") {
          unexpected_.lines.push_back("batch ack item: " + x.dump());
        }
        record(ds[i], o::rejected);
      }
    }
  }

  int incarnation_ = 0;
  std::size_t crashes_ = 0;

 public:
  std::size_t crashes() const { return crashes_; }
};

// ---- the harness --------------------------------------------------------

std::optional<config> parse_args(int argc, char** argv) {
  config c;
  bool kill_min_set = false;
  bool kill_max_set = false;
  struct int_flag {
    std::string_view name;
    std::string_view unit;
    int* to;
    bool* set = nullptr;
  };
  const int_flag int_flags[] = {
      {"--kills", "N", &c.kills},
      {"--duration-limit", "SEC", &c.duration_limit_s},
      {"--producers", "N", &c.producers},
      {"--consumers", "N", &c.consumers},
      {"--kill-min-ms", "MS", &c.kill_min_ms, &kill_min_set},
      {"--kill-max-ms", "MS", &c.kill_max_ms, &kill_max_set},
      {"--produce-pause-ms", "MS", &c.produce_pause_ms},
      {"--drain-limit", "SEC", &c.drain_limit_s},
      {"--rollback-at-kill", "K", &c.rollback_at_kill},
      {"--shards", "N", &c.shards},
      {"--topics", "N", &c.topics},
      {"--cluster", "NODES", &c.cluster},
      {"--leader-percent", "P", &c.leader_percent},
      {"--down-max-ms", "MS", &c.down_max_ms},
      {"--replicas", "R", &c.replicas},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--moves") {
      c.moves = true;
      continue;
    }
    if (a == "--pipeline" || a == "--ordering") {
      (a == "--pipeline" ? c.pipeline : c.ordering) = true;
      continue;
    }
    if (a == "--ordering-off") {
      c.ordering = c.ordering_off = true;
      continue;
    }
    if (a == "--seed") {
      c.seed = std::stoull(value());
      continue;
    }
    if (a == "--data-dir" || a == "--onceqd") {
      (a == "--data-dir" ? c.data_dir : c.onceqd) = value();
      continue;
    }
    const auto* flag = std::find_if(std::begin(int_flags), std::end(int_flags),
                                    [&](const int_flag& f) { return f.name == a; });
    if (flag == std::end(int_flags)) {
      std::cerr
          << "crash_loop: unknown flag " << a
          << "\nflags: --pipeline --ordering --ordering-off --seed S --data-dir DIR --onceqd PATH";
      for (const auto& f : int_flags) std::cerr << " " << f.name << " " << f.unit;
      std::cerr << "\n";
      return std::nullopt;
    }
    *flag->to = std::stoi(value());
    if (flag->set != nullptr) *flag->set = true;
  }
  if (c.cluster > 0) {
    if (!kill_min_set) c.kill_min_ms = 500;
    if (!kill_max_set) c.kill_max_ms = std::max(2500, c.kill_min_ms);
  }
  if (c.down_max_ms < 0) c.down_max_ms = c.cluster > 0 ? 1500 : 100;
  if (c.kills < 0 || c.producers < 1 || c.consumers < 1 || c.kill_min_ms < 0 ||
      c.kill_max_ms < c.kill_min_ms || c.shards < 0 || c.topics < 1 || c.cluster < 0 ||
      (c.cluster > 0 && c.cluster < 3) || c.cluster > 7 || c.leader_percent < 0 ||
      c.leader_percent > 100 || c.shards > k_max_test_groups) {
    std::cerr << "crash_loop: bad flag values (--cluster needs 3..7 nodes, so that a majority"
                 " stays up while one is down; --shards at most "
              << k_max_test_groups << ")\n";
    return std::nullopt;
  }
  if (c.ordering && c.cluster > 0) {
    std::cerr << "crash_loop: --ordering is for one onceqd, not --cluster\n";
    return std::nullopt;
  }
  if (c.pipeline && c.cluster > 0 && c.shards < 2) {
    std::cerr << "crash_loop: --pipeline --cluster needs --shards 2 or more (step2 -> step3"
                 " crosses shards)\n";
    return std::nullopt;
  }
  if (c.moves && (c.cluster == 0 || c.replicas < 3 || c.replicas >= c.cluster)) {
    std::cerr << "crash_loop: --moves needs --cluster N and --replicas R with 3 <= R < N\n";
    return std::nullopt;
  }
  if (c.cluster > 0 && c.rollback_at_kill > 0) {
    std::cerr << "crash_loop: --rollback-at-kill is for one onceqd, not --cluster\n";
    return std::nullopt;
  }
  return c;
}

using getter = std::function<std::optional<http_response>(const std::string& target)>;

// Group g's backlog and inflight are both 0 on every topic.
bool drained(const getter& get, const config& cfg) {
  for (int t = 0; t < cfg.topics; ++t) {
    auto r = get("/v1/topics/" + cfg.topic(t));
    if (!r || r->status != 200) return false;
    auto j = r->json();
    if (!j.at("groups").contains(k_group)) return false;
    const auto& g = j.at("groups").at(k_group);
    if (g.at("backlog").get<std::uint64_t>() != 0 || g.at("inflight").get<std::uint64_t>() != 0) {
      return false;
    }
  }
  return true;
}

// Polls drained() until three answers in a row say so, or limit_s passed.
bool drain(const getter& get, const config& cfg) {
  const auto drain_end = std::chrono::steady_clock::now() + std::chrono::seconds(cfg.drain_limit_s);
  int quiet = 0;
  while (std::chrono::steady_clock::now() < drain_end && quiet < 3) {
    std::this_thread::sleep_for(300ms);
    quiet = drained(get, cfg) ? quiet + 1 : 0;
  }
  return quiet >= 3;
}

// The topic of a key "p<producer>-<n>".
const std::string& topic_of_key(const std::string& key, const config& cfg) {
  const int producer = std::stoi(key.substr(1, key.find('-') - 1));
  return cfg.topic(producer % cfg.topics);
}

// The producer and consumer threads.
class workload {
 public:
  struct result {
    history h;
    std::vector<std::string> unexpected;
    std::size_t crashes = 0;
    std::size_t unavailable = 0;  // 503 answers
    std::size_t no_answer = 0;    // requests without an answer
    millis longest_produce_wait_ms = 0;
  };

  workload(const config& cfg, shared_state& s) : s_(s) {
    for (int i = 0; i < cfg.producers; ++i) {
      producers_.push_back(std::make_unique<producer>(i, cfg, s));
      producer_threads_.emplace_back([p = producers_.back().get()] { p->run(); });
    }
    for (int i = 0; i < cfg.consumers; ++i) {
      consumers_.push_back(std::make_unique<consumer>(i, cfg, s));
      consumer_threads_.emplace_back([c = consumers_.back().get()] { c->run(); });
    }
  }
  ~workload() {
    s_.stop_producing = true;
    s_.stop_consuming = true;
    join(producer_threads_);
    join(consumer_threads_);
  }
  workload(const workload&) = delete;
  workload& operator=(const workload&) = delete;

  // Producers finish; consumers then ack everything with long leases.
  void stop_producing() {
    s_.stop_producing = true;
    join(producer_threads_);
    s_.final_phase = true;
  }
  void stop_consuming() {
    s_.stop_consuming = true;
    join(consumer_threads_);
  }

  // After both stops.
  result collect() {
    result out;
    for (auto& p : producers_) {
      out.h.append(p->take());
      for (auto& l : p->unexpected().lines) out.unexpected.push_back(std::move(l));
      out.unavailable += p->conn().unavailable();
      out.no_answer += p->conn().no_answer();
      for (const auto& b : p->conn().bad_headers()) out.unexpected.push_back(b);
      out.longest_produce_wait_ms = std::max(out.longest_produce_wait_ms, p->longest_wait_ms());
    }
    for (auto& c : consumers_) {
      out.h.append(c->take());
      out.crashes += c->crashes();
      for (auto& l : c->unexpected().lines) out.unexpected.push_back(std::move(l));
      out.unavailable += c->conn().unavailable();
      out.no_answer += c->conn().no_answer();
      for (const auto& b : c->conn().bad_headers()) out.unexpected.push_back(b);
    }
    return out;
  }

 private:
  static void join(std::vector<std::thread>& threads) {
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }

  shared_state& s_;
  std::vector<std::unique_ptr<producer>> producers_;
  std::vector<std::unique_ptr<consumer>> consumers_;
  std::vector<std::thread> producer_threads_, consumer_threads_;
};

// What a run found besides the workload's history.
struct run_outcome {
  int kills = 0;
  double kill_phase_s = 0;
  bool drain_ok = false;
  final_key_states keys;
  std::vector<std::string> unexpected;  // the harness's own reads
  std::vector<std::string> figure_lines;
  std::vector<std::string> detail_lines;  // printed after the violations
  // A cluster's replicas compared (compare_replicas): where they parted.
  std::vector<violation> replicas;
};

// A run's exit status, said on stdout: 1 for violations, 2 when it is
// incomplete (fewer kills than asked within --duration-limit, or too little
// load to mean anything), else 0.
int verdict(const config& cfg, const run_outcome& o, bool violated, bool loaded) {
  if (violated) return 1;
  if (o.kills < cfg.kills + 1) {
    std::cout << "crash_loop: INCOMPLETE: " << o.kills - 1 << " of " << cfg.kills
              << " kills within --duration-limit " << cfg.duration_limit_s << " s\n";
    return 2;
  }
  if (!loaded) {
    std::cout << "crash_loop: INCOMPLETE: too little load to mean anything\n";
    return 2;
  }
  std::cout << "crash_loop: OK\n";
  return 0;
}

// Checks and prints; the exit status of the run.
int report(const config& cfg, workload::result& w, run_outcome& o, double elapsed) {
  auto violations = o.replicas;
  for (auto& v : check(w.h, o.keys)) violations.push_back(std::move(v));
  for (const auto& u : w.unexpected) violations.push_back({"unexpected_status", u});
  for (const auto& u : o.unexpected) violations.push_back({"unexpected_status", u});
  if (!o.drain_ok) {
    violations.push_back({"not_drained", "group " + std::string(k_group) +
                                             " still had backlog or inflight after " +
                                             std::to_string(cfg.drain_limit_s) + " s"});
  }
  const figures f = count(w.h, o.keys);
  std::map<std::string, std::size_t> by_rule;
  for (const auto& v : violations) ++by_rule[v.rule];

  std::cout << "crash_loop: seed " << cfg.seed << ", " << cfg.topics << " topic(s)"
            << (cfg.shards > 0 ? ", --shards " + std::to_string(cfg.shards) : std::string())
            << (cfg.cluster > 0 ? ", --cluster " + std::to_string(cfg.cluster) : std::string())
            << "\n"
            << "  kills                       " << o.kills << " (" << cfg.kills
            << " asked + 1 before the final key check)\n"
            << "  kill phase                  " << static_cast<int>(o.kill_phase_s) << " s\n"
            << "  produces answered           " << f.produces_answered << " (" << f.keys_answered
            << " keys)\n"
            << "  produce retries deduped     " << f.produce_duplicates << "\n"
            << "  deliveries                  " << f.deliveries << " (" << f.redeliveries
            << " redeliveries)\n"
            << "  consumer crashes            " << w.crashes << "\n"
            << "  acks answered ok            " << f.acks_ok << "\n"
            << "  acks fenced (409)           " << f.acks_rejected << "\n"
            << "  acks without answer         " << f.acks_unknown << "\n"
            << "  nacks ok                    " << f.nacks_ok << "\n"
            << "  key duplicates suppressed   " << f.key_duplicates_suppressed << "\n";
  for (const auto& l : o.figure_lines) std::cout << "  " << l << "\n";
  std::cout << "  violations                  " << violations.size() << "\n"
            << "  elapsed                     " << static_cast<int>(elapsed) << " s\n";
  for (const auto& [rule, n] : by_rule) std::cout << "    " << rule << ": " << n << "\n";
  int shown = 0;
  for (const auto& v : violations) {
    if (++shown > 20) break;
    std::cout << "  VIOLATION " << v.rule << ": " << v.detail << "\n";
  }
  for (const auto& l : o.detail_lines) std::cout << "  " << l << "\n";
  return verdict(cfg, o, !violations.empty(),
                 f.produces_answered > 0 && f.acks_ok > 0 && f.redeliveries > 0);
}

// Reads the final state of every key of an answered produce.
void read_keys(const history& h, const config& cfg, const getter& get, run_outcome& o) {
  std::set<std::string> wanted;
  for (const auto& p : h.produces) wanted.insert(p.key);
  int failures_in_a_row = 0;
  for (const auto& k : wanted) {
    auto r = get("/v1/keys?topic=" + topic_of_key(k, cfg) + "&group=" + std::string(k_group) +
                 "&key=" + k);
    if (!r || r->status != 200) {
      o.unexpected.push_back("GET /v1/keys " + k + ": " +
                             (r ? std::to_string(r->status) + " " + r->body : "no answer"));
      if (++failures_in_a_row >= 5) {
        o.unexpected.push_back("GET /v1/keys: gave up after 5 failures in a row");
        return;
      }
      continue;
    }
    failures_in_a_row = 0;
    o.keys[k] = r->json().at("state").get<std::string>();
  }
}

// The events the serving replica kept for the first keys the final check
// found not committed (the cluster's topics keep key history): whether
// that replica saw the key's commit, and what came after it.
void read_lost_key_histories(const config& cfg, const getter& get, run_outcome& o) {
  constexpr int k_shown = 5;
  int shown = 0;
  for (const auto& [key, state] : o.keys) {
    if (state == "committed") continue;
    if (++shown > k_shown) break;
    auto r = get("/v1/keys/history?topic=" + topic_of_key(key, cfg) +
                 "&group=" + std::string(k_group) + "&key=" + key);
    o.detail_lines.push_back(
        "key history of " + key + ": " +
        (r ? std::to_string(r->status) + " " + r->body : std::string("no answer")));
  }
}

class stopwatch {
 public:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// ---- one onceqd ------------------------------------------------------------

// Restarts the killed onceqd; false (with setup_error) if it did not come
// back.
bool restart_single(server_process& server, shared_state& s, std::string& setup_error) {
  try {
    server.start();
  } catch (const std::exception& e) {
    setup_error = std::string("onceqd did not recover: ") + e.what();
    return false;
  }
  s.ports[0] = server.port();
  return true;
}

// The kill phase of one onceqd: kills and restarts it until cfg.kills or
// --duration-limit (the random schedule from cfg.seed).
void kill_single(const config& cfg, server_process& server, shared_state& s, run_outcome& o,
                 const stopwatch& clock, std::string& setup_error) {
  std::mt19937_64 rng(cfg.seed);
  while (o.kills < cfg.kills && clock.seconds() < cfg.duration_limit_s) {
    const auto up =
        cfg.kill_min_ms +
        static_cast<int>(rng() % static_cast<std::uint64_t>(cfg.kill_max_ms - cfg.kill_min_ms + 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(up));
    s.ports[0] = 0;
    server.kill9();
    ++o.kills;
    std::this_thread::sleep_for(std::chrono::milliseconds(
        rng() % static_cast<std::uint64_t>(std::max(1, cfg.down_max_ms))));
    if (cfg.rollback_at_kill > 0) {
      namespace fs = std::filesystem;
      const fs::path data = server.data_dir();
      const fs::path copy = data.string() + ".rollback";
      if (o.kills == cfg.rollback_at_kill) {
        fs::remove_all(copy);
        fs::copy(data, copy, fs::copy_options::recursive);
      } else if (o.kills == cfg.rollback_at_kill + 2) {
        fs::remove_all(data);
        fs::rename(copy, data);
        std::cerr << "crash_loop: rolled " << data << " back to its copy of kill "
                  << cfg.rollback_at_kill << " (fault injection)\n";
      }
    }
    if (!restart_single(server, s, setup_error)) break;
    if (o.kills % 25 == 0) {
      std::cerr << "crash_loop: " << o.kills << " kills, " << static_cast<int>(clock.seconds())
                << " s\n";
    }
  }
  o.kill_phase_s = clock.seconds();
}

// The one onceqd of a single-node run (cfg's binary, data dir and
// --shards); nullptr, having said why, if it did not start.
std::unique_ptr<server_process> start_single(const config& cfg) {
  server_process::options opts;
  opts.onceqd_path = cfg.onceqd;
  opts.data_dir = cfg.data_dir;
  if (cfg.shards > 0) opts.extra_args = {"--shards", std::to_string(cfg.shards)};
  try {
    return std::make_unique<server_process>(opts);
  } catch (const std::exception& e) {
    std::cerr << "crash_loop: onceqd did not start: " << e.what() << "\n";
    return nullptr;
  }
}

int run_single(config cfg) {
  for (int t = 0; t < cfg.topics; ++t) cfg.topic_names.push_back(topic_name(t));
  const stopwatch clock;
  auto server = start_single(cfg);
  if (!server) return 3;
  shared_state s(1);
  s.ports[0] = server->port();
  for (int t = 0; t < cfg.topics; ++t) {
    http_client c(server->port(), k_client_timeout);
    auto r = c.post("/v1/topics", {{"name", cfg.topic(t)},
                                   {"partitions", 4},
                                   {"lease_ms", 300},
                                   {"dedup_window_ms", 3'600'000}});
    if (r.status != 201) {
      std::cerr << "crash_loop: create topic: " << r.status << " " << r.body << "\n";
      return 3;
    }
  }

  // Each topic on its own shard while there are shards enough: the run
  // means to kill two loops at once.
  for (int sh = 0; sh < std::min(cfg.shards, cfg.topics); ++sh) {
    http_client c(server->port(), k_client_timeout);
    const std::string want = "onceq_shard_topics{shard=\"" + std::to_string(sh) + "\"} 0\n";
    auto r = c.get("/metrics");
    if (r.status != 200 || r.body.find(want) != std::string::npos) {
      std::cerr << "crash_loop: shard " << sh << " got no topic: " << r.status << "\n";
      return 3;
    }
  }

  workload w(cfg, s);

  // Kill phase.
  run_outcome o;
  std::string setup_error;
  auto restart = [&]() -> bool { return restart_single(*server, s, setup_error); };
  kill_single(cfg, *server, s, o, clock, setup_error);

  // Final phase: no more kills; producers finish, consumers ack everything
  // until the group is drained.
  w.stop_producing();
  if (setup_error.empty()) {
    http_client c(server->port(), k_client_timeout);
    o.drain_ok = drain(
        [&](const std::string& target) -> std::optional<http_response> { return c.get(target); },
        cfg);
  }
  w.stop_consuming();
  auto result = w.collect();

  // One more kill before reading the keys: the commits must be durable too.
  if (setup_error.empty()) {
    s.ports[0] = 0;
    server->kill9();
    ++o.kills;
    if (restart()) {
      http_client c(server->port(), k_client_timeout);
      read_keys(
          result.h, cfg,
          [&](const std::string& target) -> std::optional<http_response> { return c.get(target); },
          o);
    }
  }
  if (!setup_error.empty()) {
    std::cerr << "crash_loop: " << setup_error << "\n" << server->log_tail() << "\n";
    return 3;
  }
  return report(cfg, result, o, clock.seconds());
}

// ---- a cluster ---------------------------------------------------------------

// Median and maximum of a list of durations, "n/a" when empty.
std::string spread(std::vector<millis> v) {
  if (v.empty()) return "n/a";
  std::sort(v.begin(), v.end());
  return "median " + std::to_string(v[v.size() / 2]) + " ms, max " + std::to_string(v.back()) +
         " ms";
}

// Starts cfg.cluster nodes and waits for a leader of every shard; nullptr
// (with why) if they did not come up.
std::unique_ptr<local_cluster> start_cluster(const config& cfg, std::string& why) {
  std::unique_ptr<local_cluster> lc;
  try {
    local_cluster::options lo;
    lo.members = free_loopback_members(cfg.cluster, cfg.seed);
    lo.shards = cfg.shards;
    lo.onceqd = cfg.onceqd;
    lo.root = cfg.data_dir;
    // Every replica traces what each entry wrote: compare_replicas.
    lo.extra_args = {"--apply-trace"};
    if (cfg.replicas > 0) {
      // dead_after_ms = 0: the kills are short; the moves are the killer's.
      lo.file_head = "replicas = " + std::to_string(cfg.replicas) + "\ndead_after_ms = 0\n";
    }
    lc = std::make_unique<local_cluster>(std::move(lo));
  } catch (const std::exception& e) {
    why = std::string("the cluster did not start: ") + e.what();
    return nullptr;
  }
  return lc;
}

// The apply traces of every node (onceqd --apply-trace), compared shard by
// shard: a replica whose writes differed from another's at some index has
// a state that parted from it there (first listed first). No trace at all
// is a violation too: the check would pass without looking. summary: a
// figure line, what was compared.
std::vector<violation> compare_replicas(const local_cluster& lc, std::string& summary) {
  namespace fs = std::filesystem;
  std::map<std::string, std::vector<apply_trace>> by_shard;  // file name -> traces
  for (std::size_t i = 0; i < lc.size(); ++i) {
    const std::string& id = lc.member(i).id;
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(fs::path(lc.root()) / id, ec)) {
      const std::string name = f.path().filename().string();
      if (!name.starts_with("apply-trace-")) continue;
      std::ifstream in(f.path());
      std::ostringstream text;
      text << in.rdbuf();
      by_shard[name].push_back({id, text.str()});
    }
  }
  std::vector<violation> out;
  if (by_shard.empty()) out.push_back({"no_apply_trace", "no node wrote an apply trace"});
  std::size_t lines = 0;
  for (const auto& [name, traces] : by_shard) {
    for (const auto& t : traces)
      lines += static_cast<std::size_t>(std::count(t.text.begin(), t.text.end(), '\n'));
  }
  summary = "replica traces compared     " + std::to_string(by_shard.size()) + " shard(s), " +
            std::to_string(lines) + " applied entries";
  for (const auto& [name, traces] : by_shard) {
    for (auto& v : compare_apply_traces(traces)) {
      v.detail = name + ": " + v.detail;
      out.push_back(std::move(v));
    }
  }
  return out;
}

// Prints why a cluster run could not go on, keeps its data; exit status 3.
int cluster_setup_failure(local_cluster& lc, const std::string& why) {
  std::cerr << "crash_loop: " << why << "\n" << lc.log_tails() << "\n";
  lc.keep_root();
  std::cerr << "crash_loop: data and logs kept in " << lc.root() << "\n";
  return 3;
}

// The nodes' ports and ids into the workload's shared state.
void share_nodes(local_cluster& lc, shared_state& s) {
  s.cluster = true;
  for (std::size_t i = 0; i < lc.size(); ++i) {
    s.ports[i] = lc.member(i).http_port;
    s.node_ids.push_back(lc.member(i).id);
  }
}

// The harness's own requests in a cluster: any live node, retried on
// another after a 503 or no answer until the limit.
class cluster_asker {
 public:
  cluster_asker(const shared_state& s, std::uint64_t seed) : conn_(s, seed) {}
  std::optional<http_response> operator()(std::string_view method, const std::string& target,
                                          const json& body, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto r = conn_.send(method, target, body);
      if (r && !retryable(r->status)) return r;
      if (std::chrono::steady_clock::now() > deadline) return r;
      std::this_thread::sleep_for(50ms);
    }
  }
  getter get() {
    return [this](const std::string& target) { return (*this)("GET", target, nullptr, 30s); };
  }
  // One try, no retry (for requests whose repeat is not harmless).
  connection& conn() { return conn_; }

 private:
  connection conn_;
};

// Creates a topic in a cluster, with key history (read_lost_key_histories),
// and polls GET /v1/cluster until a node lists it; its shard, or nullopt
// with why.
std::optional<unsigned> create_cluster_topic(cluster_asker& ask, const std::string& name,
                                             std::string& why) {
  auto r = ask("POST", "/v1/topics",
               {{"name", name},
                {"partitions", 4},
                {"lease_ms", 300},
                {"dedup_window_ms", 3'600'000},
                {"key_history", true}},
               30s);
  // 200: an earlier attempt without answer had created it.
  if (!r || (r->status != 201 && r->status != 200)) {
    why = "create topic " + name + ": " +
          (r ? std::to_string(r->status) + " " + r->body : "no answer");
    return std::nullopt;
  }
  std::string last;
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(100ms);
    auto c = ask.get()("/v1/cluster");
    auto st = c ? parse_cluster_status(*c) : std::nullopt;
    last = c ? c->body : "no answer";
    if (const auto* sh = st ? st->shard_of_topic(name) : nullptr) return sh->shard;
  }
  why = "GET /v1/cluster lists " + name + " on no shard: " + last;
  return std::nullopt;
}

// The killer of a cluster: one node down at a time, the leader of a
// workload topic's shard --leader-percent of the time, else a follower;
// each killed node restarted and ready before the next kill.
class cluster_killer {
 public:
  cluster_killer(const config& cfg, local_cluster& lc, shared_state& s)
      : cfg_(cfg), lc_(lc), s_(s), rng_(cfg.seed) {}

  // The kill phase: until cfg.kills or --duration-limit, or a node that
  // did not come back (setup_error).
  void kill_phase(const std::vector<std::string>& topics, run_outcome& o, const stopwatch& clock) {
    const auto n = lc_.size();
    while (o.kills < cfg_.kills && clock.seconds() < cfg_.duration_limit_s) {
      const auto up = cfg_.kill_min_ms +
                      static_cast<int>(rng_() % static_cast<std::uint64_t>(cfg_.kill_max_ms -
                                                                           cfg_.kill_min_ms + 1));
      std::this_thread::sleep_for(std::chrono::milliseconds(up));
      const std::string topic = topics[rng_() % topics.size()];
      const bool aim_at_leader = static_cast<int>(rng_() % 100) < cfg_.leader_percent;
      const std::string leader = lc_.leader_of(topic);
      const int li = lc_.index_of(leader);
      std::size_t victim = 0;
      int mover = -1;  // a running move's source or target, when aimed at
      if (cfg_.moves) {
        start_move();
        if (rng_() % 3 == 0) mover = move_end();
      }
      if (mover >= 0) {
        victim = static_cast<std::size_t>(mover);
        ++move_kills_;
      } else if (aim_at_leader && li >= 0) {
        victim = static_cast<std::size_t>(li);
      } else {
        std::vector<std::size_t> followers;
        for (std::size_t i = 0; i < n; ++i) {
          if (static_cast<int>(i) != li) followers.push_back(i);
        }
        victim = followers[rng_() % followers.size()];
      }
      if (!kill_and_restart(victim, leader, topic, o)) break;
      if (o.kills % 5 == 0) {
        std::cerr << "crash_loop: " << o.kills << " kills (" << leader_kills_ << " of a leader), "
                  << static_cast<int>(clock.seconds()) << " s\n";
      }
    }
    o.kill_phase_s = clock.seconds();
  }

  // One more kill, of topic's shard leader, then a leader for every shard
  // again; false with setup_error if not.
  bool final_kill(const std::string& topic, run_outcome& o) {
    const std::string leader = lc_.leader_of(topic);
    const int li = lc_.index_of(leader);
    if (!kill_and_restart(li >= 0 ? static_cast<std::size_t>(li) : 0, leader, topic, o)) {
      return false;
    }
    if (lc_.wait_for_leader("", 30s).empty()) {
      setup_error = "no leader for every shard within 30 s after the final kill";
      return false;
    }
    return true;
  }

  std::vector<std::string> figure_lines() const {
    std::vector<std::string> out = {
        "nodes                       " + std::to_string(lc_.size()) + " (" + lc_.root() + ")",
        "kills of a shard leader     " + std::to_string(leader_kills_) + " (failover " +
            spread(failovers_) + " over " + std::to_string(failovers_.size()) + " measured)",
        "restart until ready         " + spread(restarts_),
    };
    if (cfg_.moves) {
      out.push_back("moves asked / accepted      " + std::to_string(moves_asked_) + " / " +
                    std::to_string(moves_accepted_));
      out.push_back("kills of a move's end       " + std::to_string(move_kills_));
      out.push_back("majority checks             " + std::to_string(majority_checks_));
    }
    return out;
  }

  // --moves, after the drain: waits until no move runs (60 s), then checks
  // that every shard has cfg.replicas replicas on distinct nodes and that
  // its leader's voters are exactly those. Violations go to o.unexpected
  // as "placement: ...".
  void check_placement(run_outcome& o) {
    if (!cfg_.moves) return;
    std::optional<cluster_status> st;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      st = any_status();
      bool busy = !st;
      for (const auto& sh : st ? st->shards : std::vector<cluster_shard_status>{}) {
        busy = busy || !sh.moving_to.empty();
      }
      if (!busy) break;
      std::this_thread::sleep_for(200ms);
    }
    if (!st) {
      o.unexpected.push_back("placement: no node answered GET /v1/cluster");
      return;
    }
    o.figure_lines.push_back("moves started / finished    " + std::to_string(st->moves_started) +
                             " / " + std::to_string(st->moves_finished) + " (" +
                             std::to_string(st->moves_cancelled) + " cancelled)");
    if (st->moves_finished == 0) {
      o.unexpected.push_back("placement: no move finished during the run");
    }
    for (const auto& sh : st->shards) {
      const std::string where = "placement: shard " + std::to_string(sh.shard);
      if (!sh.moving_to.empty()) o.unexpected.push_back(where + ": a move still runs after 60 s");
      std::set<std::string> distinct(sh.replicas.begin(), sh.replicas.end());
      if (sh.replicas.size() != static_cast<std::size_t>(cfg_.replicas) ||
          distinct.size() != sh.replicas.size()) {
        o.unexpected.push_back(where + ": " + std::to_string(sh.replicas.size()) + " replicas, " +
                               std::to_string(distinct.size()) + " distinct");
      }
      // The leader's own view: its raft configuration's voters.
      bool matched = false;
      for (int attempt = 0; attempt < 50 && !matched; ++attempt) {
        if (attempt > 0) std::this_thread::sleep_for(200ms);
        const int li = lc_.index_of(sh.leader);
        if (li < 0 || !lc_.alive(static_cast<std::size_t>(li))) continue;
        auto ls = lc_.status(static_cast<std::size_t>(li));
        const auto* own = ls ? ls->shard(sh.shard) : nullptr;
        if (own == nullptr || own->leader != sh.leader) continue;
        std::set<std::string> voters(own->voters.begin(), own->voters.end());
        matched = voters == distinct;
        if (!matched && attempt == 49) {
          std::string v;
          for (const auto& x : own->voters) v += x + " ";
          o.unexpected.push_back(where + ": the leader's voters are " + v +
                                 "but the placement lists another set");
        }
      }
      if (!matched) o.unexpected.push_back(where + ": no leader confirmed its voters");
    }
  }

  std::string setup_error;

 private:
  bool restart(std::size_t i) {
    const auto t = std::chrono::steady_clock::now();
    try {
      lc_.restart(i);
    } catch (const std::exception& e) {
      setup_error = "node " + lc_.member(i).id + " did not recover: " + e.what();
      return false;
    }
    restarts_.push_back(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
            .count());
    s_.ports[i] = lc_.member(i).http_port;
    return true;
  }

  // Kills node i (the leader of topic's shard when leader names it); false
  // if it did not come back.
  bool kill_and_restart(std::size_t i, const std::string& leader, const std::string& topic,
                        run_outcome& o) {
    const bool was_leader = lc_.member(i).id == leader;
    const auto down =
        std::chrono::milliseconds(rng_() % static_cast<std::uint64_t>(cfg_.down_max_ms + 1));
    // Half of the leader kills stay down until the others elected a
    // leader (measured); the rest come back after `down` whatever happened.
    const bool await_failover = was_leader && rng_() % 2 == 0;
    s_.ports[i] = 0;
    lc_.kill9(i);
    ++o.kills;
    if (was_leader) ++leader_kills_;
    const auto killed_at = std::chrono::steady_clock::now();
    const auto wait_until = killed_at + (await_failover ? std::chrono::milliseconds(15'000) : down);
    while (was_leader && std::chrono::steady_clock::now() < wait_until) {
      const std::string now_leader = lc_.leader_of(topic);
      if (!now_leader.empty() && now_leader != leader) {
        failovers_.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - killed_at)
                                 .count());
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_until(std::max(killed_at + down, std::chrono::steady_clock::now()));
    check_majority();
    if (!restart(i)) return false;
    check_majority();
    return true;
  }

  // GET /v1/cluster from a live node that has the placement.
  std::optional<cluster_status> any_status() {
    for (std::size_t k = 0; k < lc_.size(); ++k) {
      const std::size_t i = (k + rng_() % lc_.size()) % lc_.size();
      if (!lc_.alive(i)) continue;
      auto st = lc_.status(i);
      if (st && st->placed) return st;
    }
    return std::nullopt;
  }

  // --moves: asks for a move of a random replica of a random shard that has
  // none running, to a live node that does not hold it.
  void start_move() {
    auto st = any_status();
    if (!st) return;
    std::vector<const cluster_shard_status*> idle;
    for (const auto& sh : st->shards) {
      if (sh.moving_to.empty() && !sh.replicas.empty()) idle.push_back(&sh);
    }
    if (idle.empty()) return;
    const auto* sh = idle[rng_() % idle.size()];
    std::vector<std::string> targets;
    for (std::size_t i = 0; i < lc_.size(); ++i) {
      const std::string& id = lc_.member(i).id;
      if (lc_.alive(i) &&
          std::find(sh->replicas.begin(), sh->replicas.end(), id) == sh->replicas.end()) {
        targets.push_back(id);
      }
    }
    if (targets.empty()) return;
    const std::string from = sh->replicas[rng_() % sh->replicas.size()];
    const std::string to = targets[rng_() % targets.size()];
    ++moves_asked_;
    for (std::size_t k = 0; k < lc_.size(); ++k) {
      if (!lc_.alive(k)) continue;
      auto r = lc_.request(k, "POST", "/v1/cluster/shards/" + std::to_string(sh->shard) + "/move",
                           json{{"from", from}, {"to", to}}.dump());
      if (r && r->status == 202) ++moves_accepted_;
      if (r && r->status != 503) return;  // 409: a move started meanwhile, or a stale view
    }
  }

  // --moves: a running move's source or target (member index), or -1.
  int move_end() {
    auto st = any_status();
    if (!st) return -1;
    std::vector<int> ends;
    for (const auto& sh : st->shards) {
      if (sh.moving_to.empty()) continue;
      for (const auto& id : {sh.moving_from, sh.moving_to}) {
        const int i = lc_.index_of(id);
        if (i >= 0 && lc_.alive(static_cast<std::size_t>(i))) ends.push_back(i);
      }
    }
    return ends.empty() ? -1 : ends[rng_() % ends.size()];
  }

  // --moves: every shard's group (its replicas, and a running move's
  // target) has a majority of its nodes up.
  void check_majority() {
    if (!cfg_.moves) return;
    auto st = any_status();
    if (!st) return;
    ++majority_checks_;
    for (const auto& sh : st->shards) {
      std::set<std::string> group(sh.replicas.begin(), sh.replicas.end());
      if (!sh.moving_to.empty()) group.insert(sh.moving_to);
      std::size_t up = 0;
      for (const auto& id : group) {
        const int i = lc_.index_of(id);
        if (i >= 0 && lc_.alive(static_cast<std::size_t>(i))) ++up;
      }
      if (group.empty() || up * 2 <= group.size()) {
        majority_lost_.push_back("shard " + std::to_string(sh.shard) + ": " + std::to_string(up) +
                                 " of " + std::to_string(group.size()) + " nodes of its group up");
      }
    }
  }

 public:
  std::vector<std::string> majority_lost_;

 private:
  int moves_asked_ = 0, moves_accepted_ = 0, move_kills_ = 0, majority_checks_ = 0;

  const config& cfg_;
  local_cluster& lc_;
  shared_state& s_;
  std::mt19937_64 rng_;
  int leader_kills_ = 0;
  std::vector<millis> failovers_;  // leader killed -> another node names a new one
  std::vector<millis> restarts_;   // restart -> its /v1/cluster answers
};

// The cluster of a run, every shard led; nullptr, having said why (and
// kept its logs), if it is not.
std::unique_ptr<local_cluster> led_cluster(const config& cfg) {
  std::string why;
  auto lc = start_cluster(cfg, why);
  if (!lc) {
    std::cerr << "crash_loop: " << why << "\n";
    return nullptr;
  }
  if (lc->wait_for_leader("", 30s).empty()) {
    cluster_setup_failure(*lc, "no leader for every shard within 30 s of the start");
    return nullptr;
  }
  return lc;
}

int run_cluster(config cfg) {
  const stopwatch clock;
  std::string why;
  auto lc = led_cluster(cfg);
  if (!lc) return 3;
  shared_state s(lc->size());
  share_nodes(*lc, s);
  cluster_asker ask(s, cfg.seed ^ 0x9e3779b97f4a7c15ULL);
  const getter get = ask.get();

  // The topics. Placement hashes the name: while there are shards enough,
  // candidates topic_name(0), (1), ... are created until each workload
  // topic has a shard of its own (a candidate on a taken shard stays
  // unused and empty). A follower lists a topic once it applied its
  // creation: poll.
  {
    std::set<unsigned> used;
    const int distinct = std::min(cfg.shards, cfg.topics);
    for (int cand = 0;
         static_cast<int>(cfg.topic_names.size()) < cfg.topics && cand < cfg.topics + 40; ++cand) {
      const std::string name = topic_name(cand);
      const auto shard = create_cluster_topic(ask, name, why);
      if (!shard) return cluster_setup_failure(*lc, why);
      if (static_cast<int>(cfg.topic_names.size()) < distinct && used.count(*shard) > 0) continue;
      used.insert(*shard);
      cfg.topic_names.push_back(name);
    }
    if (static_cast<int>(cfg.topic_names.size()) < cfg.topics) {
      return cluster_setup_failure(
          *lc, "no " + std::to_string(cfg.topics) + " topic names on distinct shards");
    }
  }

  workload w(cfg, s);

  // Kill phase: one node down at a time.
  run_outcome o;
  cluster_killer killer(cfg, *lc, s);
  killer.kill_phase(cfg.topic_names, o, clock);

  w.stop_producing();
  if (killer.setup_error.empty()) o.drain_ok = drain(get, cfg);
  w.stop_consuming();
  auto result = w.collect();
  if (killer.setup_error.empty()) killer.check_placement(o);
  for (const auto& m : killer.majority_lost_) o.unexpected.push_back("majority: " + m);

  // One more kill, of the leader, before reading the keys: the commits must
  // survive it too.
  if (killer.setup_error.empty() && killer.final_kill(cfg.topic(0), o)) {
    read_keys(result.h, cfg, get, o);
    read_lost_key_histories(cfg, get, o);
  }
  if (!killer.setup_error.empty()) return cluster_setup_failure(*lc, killer.setup_error);
  std::string compared;
  o.replicas = compare_replicas(*lc, compared);
  o.figure_lines.push_back(compared);

  for (auto& l : killer.figure_lines()) o.figure_lines.push_back(std::move(l));
  o.figure_lines.push_back("answers 503 / no answer     " + std::to_string(result.unavailable) +
                           " / " + std::to_string(result.no_answer));
  o.figure_lines.push_back("longest produce wait        " +
                           std::to_string(result.longest_produce_wait_ms) + " ms");
  const int status = report(cfg, result, o, clock.seconds());
  if (status == 1) {
    lc->keep_root();
    std::cout << "crash_loop: data and logs kept in " << lc->root() << "\n";
  }
  return status;
}

// ---- workflow-step pipelines (--pipeline) ----------------------------------
//
// Producers put messages into step1 (value = a unique id "p<i>-<n>"); the
// workers of step1 ack each delivery with a produce of one step2 message
// carrying the same id, the workers of step2 ack with one step3 message,
// the workers of step3 just ack. An ack and its produce are one command, so
// whatever the kills, lost leases and crashed workers do, every step1
// message that is stored yields exactly one step2 and one step3 message.
// After the drain (no kills) and one more kill, group "audit" reads all
// three topics from the start and the harness checks exactly that.

constexpr int k_steps = 3;
constexpr std::string_view k_audit_group = "audit";

// A place an ack's answer said it stored a message of the next step at.
struct step_place {
  std::string id;
  int step = 0;  // the topic it went to (0-based)
  position pos;
};

struct pipeline_history {
  std::set<std::string> attempted;  // step1 ids sent at least once
  std::set<std::string> answered;   // step1 ids with a 2xx
  std::vector<step_place> places;   // from 200 answers of acks with produce
  std::array<std::size_t, k_steps> deliveries{}, redeliveries{}, acks_ok{}, acks_fenced{},
      acks_unknown{};
  std::size_t stored_answers = 0;   // produced entries answered "stored"
  std::size_t pending_answers = 0;  // ... answered "pending" (outbox)
  std::size_t stored_unplaced = 0;  // ... answered "stored" without a place
  std::size_t crashes = 0, slow = 0;
  std::size_t unavailable = 0, no_answer = 0;  // 503 answers, requests without one
  std::size_t stale_404 = 0;  // acks refused 404 by a lagging replica (step_worker::stale_404)
  std::vector<std::string> stale_404_samples;
  // Per id, what the workers of step2 and step3 saw ("<ms> ..."), printed
  // for the first ids the check flags.
  std::map<std::string, std::vector<std::string>> trace;
  std::vector<std::string> unexpected;

  // The connection's figures and (in a cluster) its answers without the
  // promised headers.
  void add(const connection& c) {
    unavailable += c.unavailable();
    no_answer += c.no_answer();
    for (const auto& b : c.bad_headers()) unexpected.push_back(b);
  }

  void append(pipeline_history&& o) {
    attempted.merge(o.attempted);
    answered.merge(o.answered);
    places.insert(places.end(), o.places.begin(), o.places.end());
    for (int i = 0; i < k_steps; ++i) {
      deliveries[i] += o.deliveries[i];
      redeliveries[i] += o.redeliveries[i];
      acks_ok[i] += o.acks_ok[i];
      acks_fenced[i] += o.acks_fenced[i];
      acks_unknown[i] += o.acks_unknown[i];
    }
    stored_answers += o.stored_answers;
    pending_answers += o.pending_answers;
    stored_unplaced += o.stored_unplaced;
    crashes += o.crashes;
    slow += o.slow;
    unavailable += o.unavailable;
    no_answer += o.no_answer;
    stale_404 += o.stale_404;
    stale_404_samples.insert(stale_404_samples.end(), o.stale_404_samples.begin(),
                             o.stale_404_samples.end());
    for (auto& [id, events] : o.trace) {
      auto& mine = trace[id];
      mine.insert(mine.end(), events.begin(), events.end());
    }
    unexpected.insert(unexpected.end(), o.unexpected.begin(), o.unexpected.end());
  }
};

class pipeline_producer {
 public:
  pipeline_producer(int index, const config& cfg, shared_state& s)
      : index_(index),
        cfg_(cfg),
        s_(s),
        rng_(cfg.seed * 7919 + 500 + index),
        conn_(s, cfg.seed * 7919 + 700 + index) {}

  void run() {
    for (long long n = 0; !s_.stop_producing.load(); n += 2) {
      const std::string a = numbered(numbered("p", index_) + "-", n);
      const std::string b = numbered(numbered("p", index_) + "-", n + 1);
      if (rng_() % 10 < 3) {
        send({{"topic", cfg_.step_topic(0)}, {"messages", {message(a), message(b)}}}, a + ".batch",
             {a, b});
      } else {
        send(with_topic(message(a)), a, {a});
        send(with_topic(message(b)), b, {b});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg_.produce_pause_ms));
    }
  }

  pipeline_history take() {
    h_.add(conn_);
    return std::move(h_);
  }

 private:
  static json message(const std::string& id) {
    return {{"key", id}, {"value", id}, {"envelope", {{"idempotency_key", id}}}};
  }
  json with_topic(json m) const {
    m["topic"] = cfg_.step_topic(0);
    return m;
  }

  // The same body and Idempotency-Key until a 200 (stored once); gives up
  // 15 s after the producers were told to stop.
  void send(const json& body, const std::string& dedup_id, const std::vector<std::string>& ids) {
    h_.attempted.insert(ids.begin(), ids.end());
    std::optional<millis> give_up;
    for (;;) {
      if (!give_up && s_.stop_producing.load()) give_up = now_ms() + 15'000;
      if (give_up && now_ms() > *give_up) return;
      auto r = conn_.send("POST", "/v1/produce", body, {{"Idempotency-Key", dedup_id}});
      if (r && r->status == 200) {
        h_.answered.insert(ids.begin(), ids.end());
        return;
      }
      if (r && !retryable(r->status)) {
        h_.unexpected.push_back("produce " + dedup_id + ": " + std::to_string(r->status) + " " +
                                r->body);
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  int index_;
  const config& cfg_;
  shared_state& s_;
  std::mt19937_64 rng_;
  connection conn_;
  pipeline_history h_;
};

// A worker of one step: consumes its topic in group g and acks each
// delivery with the next step's message (the last step: a plain ack).
// Some deliveries are dropped (a crash: the next owner is another
// incarnation) or acked after their lease ran out.
class step_worker {
 public:
  step_worker(int step, int index, const config& cfg, shared_state& s)
      : step_(step),
        index_(index),
        cfg_(cfg),
        s_(s),
        rng_(cfg.seed * 7919 + 900 + step * 100 + index),
        conn_(s, cfg.seed * 7919 + 1300 + step * 100 + index) {}

  void run() {
    while (!s_.stop_consuming.load()) {
      const bool final_phase = s_.final_phase.load();
      const std::int64_t lease_ms = final_phase ? 5000 : 200 + pick(301);
      json body = {{"topic", cfg_.step_topic(step_)}, {"group", k_group}, {"owner", owner()},
                   {"max_messages", 1 + pick(4)},     {"wait_ms", 100},   {"lease_ms", lease_ms}};
      auto r = conn_.send("POST", "/v1/consume", body);
      if (!r || r->status != 200) {
        if (r && !retryable(r->status)) add_unexpected("consume", *r);
        std::this_thread::sleep_for(20ms);
        continue;
      }
      std::vector<got> ds;
      for (const auto& m : r->ndjson()) {
        ds.push_back({m.at("value").get<std::string>(), m.at("partition").get<std::uint32_t>(),
                      m.at("offset").get<std::uint64_t>(), m.at("attempts").get<std::int64_t>()});
        ++h_.deliveries[step_];
        if (ds.back().attempts > 1) ++h_.redeliveries[step_];
        note(ds.back(), "delivered to " + owner() + " via " + r->header("X-Onceq-Node"));
      }
      settle_all(ds, final_phase, lease_ms);
    }
  }

  pipeline_history take() {
    h_.add(conn_);
    return std::move(h_);
  }

 private:
  struct got {
    std::string id;
    std::uint32_t partition;
    std::uint64_t offset;
    std::int64_t attempts;
  };

  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
  std::string owner() const {
    return "w" + std::to_string(step_ + 1) + "." + std::to_string(index_) + "." +
           std::to_string(incarnation_);
  }
  void add_unexpected(const std::string& what, const http_response& r) {
    h_.unexpected.push_back(cfg_.step_topic(step_) + " " + what + ": " + std::to_string(r.status) +
                            " " + r.body);
  }

  void settle_all(const std::vector<got>& ds, bool final_phase, std::int64_t lease_ms) {
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const int roll = final_phase ? 99 : pick(100);
      if (roll < 6) {  // crash: the rest stay unacked until their leases lapse
        ++h_.crashes;
        ++incarnation_;
        return;
      }
      if (roll < 12) {  // slow: acks after its lease ran out
        ++h_.slow;
        std::this_thread::sleep_for(std::chrono::milliseconds(lease_ms + 20 + pick(180)));
      } else if (ds.size() - i >= 2 && roll < 35) {
        ack(std::vector<got>(ds.begin() + static_cast<std::ptrdiff_t>(i), ds.end()));
        return;
      }
      ack({ds[i]});
    }
  }

  json item(const got& d) const {
    json x = {{"partition", d.partition}, {"offset", d.offset}, {"attempts", d.attempts}};
    if (step_ + 1 < k_steps) {
      json m = {{"topic", cfg_.step_topic(step_ + 1)}, {"key", d.id}, {"value", d.id}};
      // step2's messages carry the id as idempotency key, step3's none.
      if (step_ == 0) m["envelope"] = {{"idempotency_key", d.id}};
      x["produce"] = json::array({m});
    }
    return x;
  }

  // In a cluster, the node an ack reaches checks that the next step's topic
  // exists with a read of its own replica of that topic's shard, which may
  // lag (a node just restarted): it answers 404 "topic ... not found" for a
  // topic that exists, and stores nothing. Counted (with the first
  // answers' node and time), not a violation: the delivery is acked again
  // later, and the audit still checks every id.
  bool stale_404(const http_response& r) {
    if (!s_.cluster || r.status != 404 || step_ + 1 >= k_steps ||
        r.body.find("topic '" + cfg_.step_topic(step_ + 1) + "' not found") == std::string::npos) {
      return false;
    }
    if (h_.stale_404++ < 3) {
      h_.stale_404_samples.push_back(cfg_.step_topic(step_) + " ack answered by node " +
                                     r.header("X-Onceq-Node") + " at " + std::to_string(now_ms()) +
                                     " ms (Unix): " + r.body);
    }
    return true;
  }

  void note(const got& d, const std::string& what) {
    if (step_ == 0) return;
    h_.trace[d.id].push_back(std::to_string(now_ms()) + " " + cfg_.step_topic(step_) + " " +
                             std::to_string(d.partition) + "/" + std::to_string(d.offset) +
                             " (attempts " + std::to_string(d.attempts) + ") " + what);
  }

  // An accepted ack's produced list: each "stored" entry's place.
  void note_produced(const got& d, const json& outcome) {
    if (step_ + 1 >= k_steps) return;
    if (!outcome.contains("produced")) {
      h_.unexpected.push_back(cfg_.step_topic(step_) + " ack without produced: " + outcome.dump());
      return;
    }
    for (const auto& p : outcome.at("produced")) {
      const std::string st = p.value("status", "");
      if (p.value("topic", "") != cfg_.step_topic(step_ + 1)) {
        h_.unexpected.push_back(cfg_.step_topic(step_) +
                                " ack produced another topic: " + p.dump());
      } else if (st == "stored" && !p.contains("partition")) {
        ++h_.stored_unplaced;  // stored, the answer does not know where
      } else if (st == "stored") {
        ++h_.stored_answers;
        h_.places.push_back(
            {d.id,
             step_ + 1,
             {p.at("partition").get<std::uint32_t>(), p.at("offset").get<std::uint64_t>()}});
      } else if (st == "pending") {
        ++h_.pending_answers;
      } else {
        h_.unexpected.push_back(cfg_.step_topic(step_) + " ack produced: " + p.dump());
      }
    }
  }

  // One ack (single, or batch when ds has several), retried on no answer
  // or 429/503 for up to 5 s. A refusal after a try without answer (in a
  // cluster also after a 503: the node may have passed the ack on to the
  // shard leader, which applied it) is "unknown", not "fenced": the first
  // try may have been applied.
  void ack(const std::vector<got>& ds) {
    const bool batch = ds.size() > 1;
    json body = {{"topic", cfg_.step_topic(step_)}, {"group", k_group}, {"owner", owner()}};
    if (batch) {
      body["acks"] = json::array();
      for (const auto& d : ds) body["acks"].push_back(item(d));
    } else {
      body.update(item(ds.front()));
    }
    const millis sent = now_ms();
    bool lost_one = false;
    std::optional<http_response> r;
    for (;;) {
      r = conn_.send("POST", "/v1/ack", body);
      if (r && !retryable(r->status)) break;
      lost_one = lost_one || !r || (s_.cluster && r->status == 503);
      if (now_ms() - sent > 5000 || s_.stop_consuming.load()) {
        r.reset();
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    for (const auto& d : ds) {
      note(d, std::string(batch ? "batch " : "") + "ack by " + owner() +
                  (lost_one ? " (a try lost or 503)" : "") + ": " +
                  (r ? std::to_string(r->status) + " via " + r->header("X-Onceq-Node") + " " +
                           r->body.substr(0, 400)
                     : std::string("no answer")));
    }
    if (!r) {
      h_.acks_unknown[step_] += ds.size();
      return;
    }
    auto refused = [&] {
      if (lost_one) {
        ++h_.acks_unknown[step_];
      } else {
        ++h_.acks_fenced[step_];
      }
    };
    if (!batch) {
      const bool with_produce = step_ + 1 < k_steps;
      if (r->status == (with_produce ? 200u : 204u)) {
        ++h_.acks_ok[step_];
        if (with_produce) note_produced(ds.front(), r->json());
      } else {
        if (r->status != 409 && !stale_404(*r)) add_unexpected("ack", *r);
        refused();
      }
      return;
    }
    if (r->status != 200) {
      if (!stale_404(*r)) add_unexpected("batch ack", *r);
      for (std::size_t i = 0; i < ds.size(); ++i) refused();
      return;
    }
    const auto results = r->json().at("results");
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const auto& x = results.at(i);
      if (x.at("status") == "acked") {
        ++h_.acks_ok[step_];
        note_produced(ds[i], x);
      } else {
        if (x.value("error", "") != "FAILED_PRECONDITION") {
          h_.unexpected.push_back(cfg_.step_topic(step_) + " batch ack item: " + x.dump());
        }
        refused();
      }
    }
  }

  int step_;
  int index_;
  const config& cfg_;
  shared_state& s_;
  std::mt19937_64 rng_;
  connection conn_;
  pipeline_history h_;
  int incarnation_ = 0;
};

// What group "audit" found in one step's topic: each id's places.
struct step_audit {
  std::map<std::string, std::set<position>> places;
  std::size_t messages = 0;  // distinct places
  bool complete = false;     // drained, nothing auto-acked
  std::string problem;
};

// Reads a whole topic with group "audit" (acking what it got, so that a
// duplicate of a keyed message would show as auto_acked), then checks that
// the group is empty and auto-acked nothing. A consume without an answer
// (or a 503 in a cluster) may have leased messages all the same: the read
// goes on until that lease (lease_ms) ran out and they came back.
step_audit audit_topic(const std::string& topic, const getter& get,
                       const std::function<std::optional<http_response>(const json&)>& post_ack,
                       const std::function<std::optional<http_response>(const json&)>& consume,
                       std::int64_t lease_ms) {
  step_audit a;
  int empty_in_a_row = 0;
  int failures = 0;
  std::set<position> seen;
  std::optional<std::chrono::steady_clock::time_point> unsure_until;
  auto settled = [&] { return !unsure_until || std::chrono::steady_clock::now() > *unsure_until; };
  while (empty_in_a_row < 3 || !settled()) {
    auto r = consume({{"topic", topic},
                      {"group", k_audit_group},
                      {"owner", "auditor"},
                      {"max_messages", 1000},
                      {"wait_ms", 200},
                      {"lease_ms", lease_ms}});
    if (!r || r->status != 200) {
      if (++failures > 100) {
        a.problem =
            "consume failed: " + (r ? std::to_string(r->status) + " " + r->body : "no answer");
        return a;
      }
      unsure_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(lease_ms) + 1s;
      std::this_thread::sleep_for(100ms);
      continue;
    }
    const auto ms = r->ndjson();
    if (ms.empty()) {
      ++empty_in_a_row;
      continue;
    }
    empty_in_a_row = 0;
    json acks = json::array();
    for (const auto& m : ms) {
      const position pos{m.at("partition").get<std::uint32_t>(),
                         m.at("offset").get<std::uint64_t>()};
      if (seen.insert(pos).second) a.places[m.at("value").get<std::string>()].insert(pos);
      acks.push_back({{"partition", pos.first},
                      {"offset", pos.second},
                      {"attempts", m.at("attempts").get<std::int64_t>()}});
    }
    auto ar = post_ack(
        {{"topic", topic}, {"group", k_audit_group}, {"owner", "auditor"}, {"acks", acks}});
    if (!ar || ar->status != 200) {
      a.problem = "audit ack: " + (ar ? std::to_string(ar->status) + " " + ar->body : "no answer");
      return a;
    }
  }
  a.messages = seen.size();
  auto t = get("/v1/topics/" + topic);
  if (!t || t->status != 200) {
    a.problem = "GET /v1/topics/" + topic + ": " + (t ? std::to_string(t->status) : "no answer");
    return a;
  }
  const auto g = t->json().at("groups").value(std::string(k_audit_group), json::object());
  const auto backlog = g.value("backlog", std::uint64_t{1});
  const auto inflight = g.value("inflight", std::uint64_t{1});
  const auto auto_acked = g.value("auto_acked", std::uint64_t{1});
  if (backlog != 0 || inflight != 0 || auto_acked != 0) {
    a.problem = "group audit after reading: " + g.dump() +
                (auto_acked != 0 ? " (auto_acked: a keyed message stored twice)" : "");
    return a;
  }
  a.complete = true;
  return a;
}

// The pipeline's promises, checked against the audit of the three topics.
std::vector<violation> check_pipeline(const config& cfg, const pipeline_history& h,
                                      const std::array<step_audit, k_steps>& audit,
                                      std::vector<std::string>& flagged) {
  std::vector<violation> v;
  for (int s = 0; s < k_steps; ++s) {
    if (!audit[s].complete)
      v.push_back({"audit_incomplete", cfg.step_topic(s) + ": " + audit[s].problem});
  }
  auto count = [&](int s, const std::string& id) {
    auto it = audit[s].places.find(id);
    return it == audit[s].places.end() ? std::size_t{0} : it->second.size();
  };
  auto places_of = [&](int s, const std::string& id) {
    std::string out;
    auto it = audit[s].places.find(id);
    if (it == audit[s].places.end()) return out;
    for (const auto& p : it->second) {
      out += " " + std::to_string(p.first) + "/" + std::to_string(p.second);
    }
    return out;
  };
  // Every answered id, and every stored one: once in each step.
  std::set<std::string> ids = h.answered;
  for (const auto& [id, _] : audit[0].places) ids.insert(id);
  for (const auto& id : ids) {
    for (int s = 0; s < k_steps; ++s) {
      const auto n = count(s, id);
      if (n != 0 && n != 1 && flagged.size() < 3) flagged.push_back(id);
      if (n == 0 && flagged.size() < 3) flagged.push_back(id);
      if (n == 0) {
        v.push_back(
            {"lost_step" + std::to_string(s + 1),
             id + (h.answered.count(id) ? " (produce answered 2xx)" : " (stored, unanswered)") +
                 ": in step1 x" + std::to_string(count(0, id)) + ", step2 x" +
                 std::to_string(count(1, id)) + ", step3 x" + std::to_string(count(2, id))});
      } else if (n > 1) {
        v.push_back({"duplicate_step" + std::to_string(s + 1),
                     id + " stored " + std::to_string(n) + " times at" + places_of(s, id)});
      }
    }
  }
  // Nothing in a later step without its message in the step before.
  for (int s = 1; s < k_steps; ++s) {
    for (const auto& [id, _] : audit[s].places) {
      if (count(s - 1, id) == 0) {
        v.push_back({"orphan_step" + std::to_string(s + 1),
                     id + " in " + cfg.step_topic(s) + " at" + places_of(s, id) + " but not in " +
                         cfg.step_topic(s - 1) +
                         (h.attempted.count(id) ? "" : " (never produced)")});
      }
    }
  }
  // An accepted ack's answer names where the message is.
  for (const auto& p : h.places) {
    auto it = audit[p.step].places.find(p.id);
    if (it == audit[p.step].places.end() || it->second.count(p.pos) == 0) {
      v.push_back({"wrong_place", cfg.step_topic(p.step) + " " + p.id + ": the ack answered " +
                                      std::to_string(p.pos.first) + "/" +
                                      std::to_string(p.pos.second) + ", the audit found it at" +
                                      places_of(p.step, p.id)});
    }
  }
  for (const auto& u : h.unexpected) v.push_back({"unexpected_status", u});
  return v;
}

bool pipeline_drained(const config& cfg, const getter& get) {
  for (int s = 0; s < k_steps; ++s) {
    auto r = get("/v1/topics/" + cfg.step_topic(s));
    if (!r || r->status != 200) return false;
    auto j = r->json();
    if (!j.at("groups").contains(k_group)) return false;
    const auto& g = j.at("groups").at(k_group);
    if (g.at("backlog").get<std::uint64_t>() != 0 || g.at("inflight").get<std::uint64_t>() != 0) {
      return false;
    }
  }
  return true;
}

// How the pipeline's phases reach one onceqd or a cluster.
struct pipeline_env {
  getter get;  // the harness's reads (retried on another node in a cluster)
  // The audit's acks (retried in a cluster) and consumes (one try: a retry
  // could lease what the lost try leased).
  std::function<std::optional<http_response>(const json&)> audit_ack, audit_consume;
  std::int64_t audit_lease_ms = 60'000;
  std::function<void(run_outcome&)> kill_phase;
  // One more kill and restart before the audit; false: setup_error says why.
  std::function<bool(run_outcome&)> final_kill;
  std::function<std::string()> setup_error;
  std::function<int(const std::string&)> setup_failure;  // prints why; 3
  std::function<std::vector<std::string>()> figure_lines;
  // A cluster's replicas compared (compare_replicas); null on one node.
  std::function<std::vector<violation>()> compare_replicas;
  std::string title;  // after "--pipeline, seed S"
};

// The pipeline's run once its topics and group audit exist: producers and
// step workers under the killer, the drain, one more kill, the audit, the
// check and its report; the exit status.
int run_pipeline_phases(const config& cfg, shared_state& s, pipeline_env& env,
                        const stopwatch& clock) {
  std::vector<std::unique_ptr<pipeline_producer>> producers;
  std::vector<std::unique_ptr<step_worker>> workers;
  std::vector<std::thread> producer_threads, worker_threads;
  for (int i = 0; i < cfg.producers; ++i) {
    producers.push_back(std::make_unique<pipeline_producer>(i, cfg, s));
    producer_threads.emplace_back([p = producers.back().get()] { p->run(); });
  }
  for (int step = 0; step < k_steps; ++step) {
    for (int i = 0; i < cfg.consumers; ++i) {
      workers.push_back(std::make_unique<step_worker>(step, i, cfg, s));
      worker_threads.emplace_back([w = workers.back().get()] { w->run(); });
    }
  }
  auto join = [](std::vector<std::thread>& ts) {
    for (auto& t : ts) {
      if (t.joinable()) t.join();
    }
  };

  run_outcome o;
  env.kill_phase(o);

  s.stop_producing = true;
  join(producer_threads);
  s.final_phase = true;
  if (env.setup_error().empty()) {
    // Quiet for 6 polls (1.8 s): longer than the relay's retry period.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(cfg.drain_limit_s);
    int quiet = 0;
    while (std::chrono::steady_clock::now() < end && quiet < 6) {
      std::this_thread::sleep_for(300ms);
      quiet = pipeline_drained(cfg, env.get) ? quiet + 1 : 0;
    }
    o.drain_ok = quiet >= 6;
  }
  s.stop_consuming = true;
  join(worker_threads);
  pipeline_history h;
  for (auto& p : producers) h.append(p->take());
  for (auto& w : workers) h.append(w->take());

  // One more kill: the audit reads what survived it.
  std::array<step_audit, k_steps> audit;
  if (env.setup_error().empty() && env.final_kill(o)) {
    // A relay pass after the restart may still carry outbox entries.
    std::this_thread::sleep_for(1s);
    for (int st = 0; st < k_steps; ++st) {
      audit[st] = audit_topic(cfg.step_topic(st), env.get, env.audit_ack, env.audit_consume,
                              env.audit_lease_ms);
    }
  }
  if (!env.setup_error().empty()) return env.setup_failure(env.setup_error());

  std::vector<std::string> flagged;
  auto violations = env.compare_replicas ? env.compare_replicas() : std::vector<violation>{};
  for (auto& v : check_pipeline(cfg, h, audit, flagged)) violations.push_back(std::move(v));
  if (!o.drain_ok) {
    violations.push_back(
        {"not_drained", "group g of the three steps still had backlog or inflight after " +
                            std::to_string(cfg.drain_limit_s) + " s"});
  }
  std::map<std::string, std::size_t> by_rule;
  for (const auto& v : violations) ++by_rule[v.rule];
  std::size_t redeliveries = 0, acks_ok = 0;
  std::cout << "crash_loop: --pipeline, seed " << cfg.seed << env.title
            << (cfg.shards > 0 ? ", --shards " + std::to_string(cfg.shards) : std::string()) << "\n"
            << "  kills                       " << o.kills << " (" << cfg.kills
            << " asked + 1 before the audit)\n"
            << "  kill phase                  " << static_cast<int>(o.kill_phase_s) << " s\n"
            << "  step1 produces              " << h.attempted.size() << " sent, "
            << h.answered.size() << " answered 2xx\n";
  for (int st = 0; st < k_steps; ++st) {
    redeliveries += h.redeliveries[st];
    acks_ok += h.acks_ok[st];
    std::cout << "  " << cfg.step_topic(st) << ": stored " << audit[st].messages << " ("
              << audit[st].places.size() << " ids), deliveries " << h.deliveries[st] << " ("
              << h.redeliveries[st] << " redeliveries), acks ok " << h.acks_ok[st] << ", fenced "
              << h.acks_fenced[st] << ", unknown " << h.acks_unknown[st] << "\n";
  }
  std::cout << "  produced answers            " << h.stored_answers << " stored, "
            << h.stored_unplaced << " stored without a place, " << h.pending_answers << " pending\n"
            << "  worker crashes / slow acks  " << h.crashes << " / " << h.slow << "\n";
  if (env.figure_lines) {
    for (const auto& l : env.figure_lines()) std::cout << "  " << l << "\n";
    std::cout << "  answers 503 / no answer     " << h.unavailable << " / " << h.no_answer << "\n"
              << "  acks 404 by a stale replica " << h.stale_404 << "\n";
    for (std::size_t i = 0; i < h.stale_404_samples.size() && i < 5; ++i) {
      std::cout << "    " << h.stale_404_samples[i] << "\n";
    }
  }
  std::cout << "  violations                  " << violations.size() << "\n"
            << "  elapsed                     " << static_cast<int>(clock.seconds()) << " s\n";
  for (const auto& [rule, n] : by_rule) std::cout << "    " << rule << ": " << n << "\n";
  int shown = 0;
  for (const auto& v : violations) {
    if (++shown > 30) break;
    std::cout << "  VIOLATION " << v.rule << ": " << v.detail << "\n";
  }
  for (const auto& id : flagged) {
    std::cout << "  history of " << id << " (ms since the epoch):\n";
    auto it = h.trace.find(id);
    if (it == h.trace.end()) continue;
    auto events = it->second;
    std::sort(events.begin(), events.end());
    for (const auto& e : events) std::cout << "    " << e << "\n";
    for (int st = 0; st < k_steps; ++st) {
      auto p = audit[st].places.find(id);
      if (p == audit[st].places.end()) continue;
      std::cout << "    audit: " << cfg.step_topic(st) << " at";
      for (const auto& pos : p->second) std::cout << " " << pos.first << "/" << pos.second;
      std::cout << "\n";
    }
  }
  return verdict(cfg, o, !violations.empty(),
                 !h.answered.empty() && acks_ok > 0 && redeliveries > 0);
}

// One onceqd: create step1, step3, step2 (in that order: with --shards 2
// placement puts step1 and step2 on one shard, step3 on the other, so that
// step1 -> step2 is written in the ack's transaction and step2 -> step3
// goes through the outbox), run the producers and step workers under the
// killer, drain, kill once more, audit.
int run_pipeline_single(config cfg) {
  const stopwatch clock;
  auto server = start_single(cfg);
  if (!server) return 3;
  shared_state s(1);
  s.ports[0] = server->port();
  for (int step : {0, 2, 1}) {
    http_client c(server->port(), k_client_timeout);
    auto r = c.post("/v1/topics", {{"name", cfg.step_topic(step)},
                                   {"partitions", 4},
                                   {"lease_ms", 300},
                                   {"dedup_window_ms", 3'600'000}});
    if (r.status != 201) {
      std::cerr << "crash_loop: create topic: " << r.status << " " << r.body << "\n";
      return 3;
    }
  }
  // Group "audit" exists from the start, so that every message stays for it
  // (a message every group acked is gone).
  for (int step = 0; step < k_steps; ++step) {
    http_client c(server->port(), k_client_timeout);
    auto r = c.post("/v1/consume", {{"topic", cfg.step_topic(step)},
                                    {"group", k_audit_group},
                                    {"owner", "auditor"},
                                    {"max_messages", 1},
                                    {"wait_ms", 0}});
    if (r.status != 200) {
      std::cerr << "crash_loop: create group audit: " << r.status << " " << r.body << "\n";
      return 3;
    }
  }
  for (int sh = 0; sh < std::min(cfg.shards, k_steps); ++sh) {
    http_client c(server->port(), k_client_timeout);
    const std::string none = "onceq_shard_topics{shard=\"" + std::to_string(sh) + "\"} 0\n";
    auto r = c.get("/metrics");
    if (r.status != 200 || r.body.find(none) != std::string::npos) {
      std::cerr << "crash_loop: shard " << sh << " got no topic: " << r.status << "\n";
      return 3;
    }
  }

  std::string setup_error;
  connection conn(s, cfg.seed ^ 0x9e3779b97f4a7c15ULL);
  pipeline_env env;
  env.get = [&](const std::string& t) { return conn.send("GET", t); };
  env.audit_ack = [&](const json& b) { return conn.send("POST", "/v1/ack", b); };
  env.audit_consume = [&](const json& b) { return conn.send("POST", "/v1/consume", b); };
  env.kill_phase = [&](run_outcome& o) { kill_single(cfg, *server, s, o, clock, setup_error); };
  env.final_kill = [&](run_outcome& o) {
    s.ports[0] = 0;
    server->kill9();
    ++o.kills;
    return restart_single(*server, s, setup_error);
  };
  env.setup_error = [&] { return setup_error; };
  env.setup_failure = [&](const std::string& why) {
    std::cerr << "crash_loop: " << why << "\n" << server->log_tail() << "\n";
    return 3;
  };
  return run_pipeline_phases(cfg, s, env, clock);
}

// FNV-1a 64 of a name modulo the shards: where a cluster places a topic
// (shard/shard_set.cpp, shard_set::hashed).
unsigned hashed_shard(std::string_view name, int shards) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return static_cast<unsigned>(h % static_cast<std::uint64_t>(shards));
}

// A cluster (--shards 2 or more): placement hashes the name, so the steps'
// names are chosen for it: "step1", the first of "step2", "step2-1", ... on
// step1's shard (step1 -> step2 in the ack's transaction), the first of
// "step3", "step3-1", ... on another shard (step2 -> step3 through the
// outbox, whose relay forwards to the target shard's leader wherever it
// is). The killer aims at the leaders of both shards.
int run_pipeline_cluster(config cfg) {
  const stopwatch clock;
  auto pick = [&](const std::string& base, bool same_shard) {
    const unsigned first = hashed_shard(cfg.steps[0], cfg.shards);
    for (int i = 0;; ++i) {
      const std::string name = i == 0 ? base : base + "-" + std::to_string(i);
      if ((hashed_shard(name, cfg.shards) == first) == same_shard) return name;
    }
  };
  cfg.steps = {"step1", pick("step2", true), pick("step3", false)};

  std::string why;
  auto lc = led_cluster(cfg);
  if (!lc) return 3;
  shared_state s(lc->size());
  share_nodes(*lc, s);
  cluster_asker ask(s, cfg.seed ^ 0x9e3779b97f4a7c15ULL);

  std::array<unsigned, k_steps> shard{};
  for (int step = 0; step < k_steps; ++step) {
    const auto sh = create_cluster_topic(ask, cfg.step_topic(step), why);
    if (!sh) return cluster_setup_failure(*lc, why);
    shard[static_cast<std::size_t>(step)] = *sh;
  }
  if (shard[0] != shard[1] || shard[1] == shard[2]) {
    return cluster_setup_failure(
        *lc, "the cluster placed " + cfg.steps[0] + ", " + cfg.steps[1] + ", " + cfg.steps[2] +
                 " on shards " + std::to_string(shard[0]) + ", " + std::to_string(shard[1]) + ", " +
                 std::to_string(shard[2]) + ": not step1 and step2 on one shard, step3 on another");
  }
  // Group "audit" exists from the start (a message every group acked is
  // gone). A consume of an empty topic leases nothing: retrying is safe.
  for (int step = 0; step < k_steps; ++step) {
    auto r = ask("POST", "/v1/consume",
                 {{"topic", cfg.step_topic(step)},
                  {"group", k_audit_group},
                  {"owner", "auditor"},
                  {"max_messages", 1},
                  {"wait_ms", 0}},
                 30s);
    if (!r || r->status != 200) {
      return cluster_setup_failure(
          *lc,
          "create group audit: " + (r ? std::to_string(r->status) + " " + r->body : "no answer"));
    }
  }

  cluster_killer killer(cfg, *lc, s);
  const std::vector<std::string> aims(cfg.steps.begin(), cfg.steps.end());
  pipeline_env env;
  env.get = ask.get();
  env.audit_ack = [&](const json& b) { return ask("POST", "/v1/ack", b, 30s); };
  env.audit_consume = [&](const json& b) { return ask.conn().send("POST", "/v1/consume", b); };
  env.audit_lease_ms = 10'000;
  env.kill_phase = [&](run_outcome& o) { killer.kill_phase(aims, o, clock); };
  env.final_kill = [&](run_outcome& o) { return killer.final_kill(cfg.step_topic(0), o); };
  env.setup_error = [&] { return killer.setup_error; };
  env.setup_failure = [&](const std::string& w) { return cluster_setup_failure(*lc, w); };
  std::string compared;  // the replica check's figure line, once it ran
  env.figure_lines = [&] {
    auto lines = killer.figure_lines();
    if (!compared.empty()) lines.push_back(compared);
    lines.push_back("topics (shard)              " + cfg.steps[0] + " (" +
                    std::to_string(shard[0]) + "), " + cfg.steps[1] + " (" +
                    std::to_string(shard[1]) + "), " + cfg.steps[2] + " (" +
                    std::to_string(shard[2]) + ")");
    return lines;
  };
  env.compare_replicas = [&] { return compare_replicas(*lc, compared); };
  env.title = ", --cluster " + std::to_string(cfg.cluster);
  const int status = run_pipeline_phases(cfg, s, env, clock);
  if (status == 1) {
    lc->keep_root();
    std::cout << "crash_loop: data and logs kept in " << lc->root() << "\n";
  }
  return status;
}

int run_pipeline(const config& cfg) {
  return cfg.cluster > 0 ? run_pipeline_cluster(cfg) : run_pipeline_single(cfg);
}

// ---- ordering per key (--ordering) --------------------------------------------
//
// Topic "ordered" is created with "ordering":"key". k_order_keys message
// keys are split over the producers; a producer sends one message at a
// time (a key's next only after the one before was answered), so the order
// of a key's seq numbers is its offset order. The value is "<key>#<seq>".
// Consumers take batches, ack (alone, in a batch, late, or carried on the
// next consume), nack, or crash. The check, per key, from client times
// (the machine's clock, the one lease_expires_at_ms is on):
//  key_lease_overlap  two deliveries of the key, both acked 2xx, certainly
//                     leased at the same moment: each is certainly live from
//                     its consume's answer until min(lease_expires_at_ms -
//                     margin, its ack sent), and those intervals intersect
//  key_ack_order      a 2xx ack of a later offset answered before a 2xx ack
//                     of an earlier offset of the key was sent
//  double_ack         two deliveries of one message acked 2xx
//  never_acked        an answered message without a 2xx ack (nor an ack
//                     without answer) after the drain
//  after_ack          a message delivered by a consume sent after its 2xx ack
//                     was answered (also after the final kill)
//  id_moved           a delivery's value at another place than its produce
//                     answered, or a key's messages in two partitions

constexpr int k_order_keys = 50;
constexpr millis k_order_margin_ms = 50;
const std::string k_order_topic = "ordered";

struct order_produce {
  int key = 0;
  int seq = 0;
  position pos;
  millis answered_ms = 0;
};
struct order_delivery {
  std::string owner;
  int key = 0;
  int seq = 0;
  position pos;
  std::int64_t attempts = 0;
  millis lease_expires_at_ms = 0;
  millis consume_sent_ms = 0;
  millis consume_answered_ms = 0;
};
struct order_settle {
  settle_record::kind what = settle_record::kind::ack;
  settle_record::outcome result = settle_record::outcome::unknown;
  bool carried = false;  // sent as "acks" of a consume
  std::string owner;
  position pos;
  std::int64_t attempts = 0;
  millis sent_ms = 0;
  millis answered_ms = 0;
};
struct order_history {
  std::vector<order_produce> produces;
  std::vector<order_delivery> deliveries;
  std::vector<order_settle> settles;
  std::size_t crashes = 0, slow = 0, carried = 0;
  std::vector<std::string> unexpected;
  void append(order_history&& o) {
    auto move_all = [](auto& to, auto& from) {
      to.insert(to.end(), std::make_move_iterator(from.begin()),
                std::make_move_iterator(from.end()));
    };
    move_all(produces, o.produces);
    move_all(deliveries, o.deliveries);
    move_all(settles, o.settles);
    move_all(unexpected, o.unexpected);
    crashes += o.crashes;
    slow += o.slow;
    carried += o.carried;
  }
};

std::string order_value(int key, int seq) {
  return numbered(numbered("k", key) + "#", seq);
}

class order_producer : public worker {
 public:
  order_producer(int index, const config& cfg, shared_state& s) : worker(index, cfg, s, 300) {}

  void run() {
    std::vector<int> keys;
    for (int k = index_; k < k_order_keys; k += cfg_.producers) keys.push_back(k);
    std::map<int, int> next;
    while (!s_.stop_producing.load() && !keys.empty()) {
      const int key = keys[static_cast<std::size_t>(pick(static_cast<int>(keys.size())))];
      const int seq = next[key];
      const std::string value = order_value(key, seq);
      json body = {{"topic", k_order_topic}, {"key", numbered("k", key)}, {"value", value}};
      std::optional<millis> give_up;
      for (;;) {
        if (!give_up && s_.stop_producing.load()) give_up = now_ms() + 15'000;
        if (give_up && now_ms() > *give_up) return;  // the key's order is unknown from here
        auto r = conn_.send("POST", "/v1/produce", body, {{"Idempotency-Key", value}});
        if (r && r->status == 200) {
          auto j = r->json();
          oh_.produces.push_back(
              {key,
               seq,
               {j.at("partition").get<std::uint32_t>(), j.at("offset").get<std::uint64_t>()},
               now_ms()});
          break;
        }
        if (r && !retryable(r->status)) {
          oh_.unexpected.push_back("produce " + value + ": " + std::to_string(r->status) + " " +
                                   r->body);
          return;
        }
        std::this_thread::sleep_for(20ms);
      }
      ++next[key];
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg_.produce_pause_ms));
    }
  }

  order_history take_order() { return std::move(oh_); }

 private:
  order_history oh_;
};

class order_consumer : public worker {
 public:
  order_consumer(int index, const config& cfg, shared_state& s) : worker(index, cfg, s, 400) {}

  void run() {
    std::vector<order_delivery> carry;  // acked on the next consume
    while (!s_.stop_consuming.load()) {
      const bool final_phase = s_.final_phase.load();
      const std::int64_t lease_ms = final_phase ? 5000 : 200 + pick(301);
      json body = {{"topic", k_order_topic},      {"group", k_group}, {"owner", owner()},
                   {"max_messages", 1 + pick(5)}, {"wait_ms", 100},   {"lease_ms", lease_ms}};
      if (!carry.empty()) {
        body["acks"] = json::array();
        for (const auto& d : carry) body["acks"].push_back(item(d));
      }
      const millis sent = now_ms();
      auto r = conn_.send("POST", "/v1/consume", body);
      const millis answered = now_ms();
      std::vector<json> lines;
      if (r && r->status == 200) lines = r->ndjson();
      if (!carry.empty()) {
        oh_.carried += carry.size();
        if (r && r->status == 200 && !lines.empty() && lines.front().contains("acks")) {
          record_results(carry, lines.front().at("acks"), sent, answered, true, false);
          lines.erase(lines.begin());
        } else {
          // No answer or an error: the acks may or may not stand; the same
          // acks again by the same owner settle it.
          settle(settle_record::kind::ack, carry, json::object(), sent, true);
        }
        carry.clear();
      }
      if (!r) {  // deliveries lost with the answer: like a consumer crash
        std::this_thread::sleep_for(20ms);
        continue;
      }
      if (r->status != 200) {
        if (!retryable(r->status)) note_unexpected("consume", *r);
        std::this_thread::sleep_for(20ms);
        continue;
      }
      std::vector<order_delivery> got;
      for (const auto& m : lines) {
        const std::string v = m.at("value").get<std::string>();
        const auto hash = v.find('#');
        got.push_back(
            {owner(),
             std::stoi(v.substr(1, hash - 1)),
             std::stoi(v.substr(hash + 1)),
             {m.at("partition").get<std::uint32_t>(), m.at("offset").get<std::uint64_t>()},
             m.at("attempts").get<std::int64_t>(),
             m.at("lease_expires_at_ms").get<millis>(),
             sent,
             answered});
      }
      oh_.deliveries.insert(oh_.deliveries.end(), got.begin(), got.end());
      for (std::size_t i = 0; i < got.size(); ++i) {
        const int roll = final_phase ? 99 : pick(100);
        if (roll < 7) {  // crash: the rest lapse; the next incarnation is another owner
          ++oh_.crashes;
          ++incarnation_;
          break;
        }
        if (roll < 15) {
          settle(settle_record::kind::nack, {got[i]}, json{{"delay_ms", pick(31)}}, now_ms());
          continue;
        }
        if (roll < 19) {  // slow: acked after the lease ran out
          ++oh_.slow;
          std::this_thread::sleep_for(std::chrono::milliseconds(lease_ms + 20 + pick(180)));
        } else if (roll < 45) {  // carried on the next consume
          carry.push_back(got[i]);
          continue;
        } else if (roll < 60 && got.size() - i >= 2) {
          settle(
              settle_record::kind::ack,
              std::vector<order_delivery>(got.begin() + static_cast<std::ptrdiff_t>(i), got.end()),
              json::object(), now_ms());
          break;
        }
        settle(settle_record::kind::ack, {got[i]}, json::object(), now_ms());
      }
    }
    if (!carry.empty()) settle(settle_record::kind::ack, carry, json::object(), now_ms());
  }

  order_history take_order() { return std::move(oh_); }

 private:
  std::string owner() const { return numbered(numbered("o", index_) + ".", incarnation_); }

  static json item(const order_delivery& d) {
    return {{"partition", d.pos.first}, {"offset", d.pos.second}, {"attempts", d.attempts}};
  }

  void note_unexpected(std::string_view what, const http_response& r) {
    oh_.unexpected.push_back(std::string(what) + ": " + std::to_string(r.status) + " " + r.body);
  }

  void record(const order_delivery& d, settle_record::kind what, settle_record::outcome result,
              millis sent, millis answered, bool carried) {
    oh_.settles.push_back({what, result, carried, d.owner, d.pos, d.attempts, sent,
                           result == settle_record::outcome::unknown ? 0 : answered});
  }

  // lost_one: an earlier try of these acks got no answer (or an error
  // after which they may stand): a refusal now may be of acks that applied
  // then, so it is recorded as unknown.
  void record_results(const std::vector<order_delivery>& ds, const json& results, millis sent,
                      millis answered, bool carried, bool lost_one) {
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const auto& x = results.at(i);
      if (x.at("status") == "acked") {
        record(ds[i], settle_record::kind::ack, settle_record::outcome::ok, sent, answered,
               carried);
      } else {
        if (x.value("error", "") != "FAILED_PRECONDITION") {
          oh_.unexpected.push_back("ack item: " + x.dump());
        }
        record(ds[i], settle_record::kind::ack,
               lost_one ? settle_record::outcome::unknown : settle_record::outcome::rejected, sent,
               answered, carried);
      }
    }
  }

  // One ack/nack (a batch ack when ds has several), retried on no answer
  // for up to 5 s; sent is when the first try (maybe a carried one) went.
  void settle(settle_record::kind what, const std::vector<order_delivery>& ds, json body,
              millis sent, bool lost_one = false) {
    using o = settle_record::outcome;
    const bool batch = ds.size() > 1;
    body["topic"] = k_order_topic;
    body["group"] = k_group;
    body["owner"] = ds.front().owner;
    if (batch) {
      body["acks"] = json::array();
      for (const auto& d : ds) body["acks"].push_back(item(d));
    } else {
      body.update(item(ds.front()));
    }
    const std::string target = what == settle_record::kind::ack ? "/v1/ack" : "/v1/nack";
    const millis first = now_ms();
    std::optional<http_response> r;
    for (;;) {
      r = conn_.send("POST", target, body);
      if (r && !retryable(r->status)) break;
      lost_one = lost_one || !r;
      if (now_ms() - first > 5000 || s_.stop_consuming.load()) {
        r.reset();
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    const millis answered = now_ms();
    if (!r) {
      for (const auto& d : ds) record(d, what, o::unknown, sent, answered, false);
      return;
    }
    if (batch && r->status == 200) {
      record_results(ds, r->json().at("results"), sent, answered, false, lost_one);
      return;
    }
    if (r->status == 204) {
      record(ds.front(), what, o::ok, sent, answered, false);
      return;
    }
    if (r->status != 409) note_unexpected(target, *r);
    for (const auto& d : ds)
      record(d, what, lost_one ? o::unknown : o::rejected, sent, answered, false);
  }

  int incarnation_ = 0;
  order_history oh_;
};

std::vector<violation> check_ordering(const order_history& h) {
  using o = settle_record::outcome;
  std::vector<violation> v;
  auto pos_text = [](const position& p) {
    return "p" + std::to_string(p.first) + "@" + std::to_string(p.second);
  };
  auto delivery_text = [&](const order_delivery& d) {
    return order_value(d.key, d.seq) + " " + pos_text(d.pos) + " attempts " +
           std::to_string(d.attempts) + " to " + d.owner + " consume [" +
           std::to_string(d.consume_sent_ms) + ", " + std::to_string(d.consume_answered_ms) +
           "] lease_expires_at " + std::to_string(d.lease_expires_at_ms);
  };
  auto settle_text = [&](const order_settle& s) {
    return std::string(s.carried ? "carried ack" : "ack") + " sent " + std::to_string(s.sent_ms) +
           " answered " + std::to_string(s.answered_ms);
  };

  std::map<std::pair<int, int>, position> produced;  // (key, seq) -> place
  for (const auto& p : h.produces) produced[{p.key, p.seq}] = p.pos;
  // A delivery by (owner, place, attempts).
  using dkey = std::tuple<std::string, position, std::int64_t>;
  std::map<dkey, const order_delivery*> by_id;
  std::map<int, std::set<std::uint32_t>> partitions;  // key -> partitions seen
  for (const auto& d : h.deliveries) {
    by_id[{d.owner, d.pos, d.attempts}] = &d;
    partitions[d.key].insert(d.pos.first);
    auto it = produced.find({d.key, d.seq});
    if (it != produced.end() && it->second != d.pos) {
      v.push_back({"id_moved", delivery_text(d) + ", produce answered " + pos_text(it->second)});
    }
  }
  for (const auto& [key, ps] : partitions) {
    if (ps.size() > 1) v.push_back({"id_moved", numbered("key k", key) + " in several partitions"});
  }

  // Per key: its deliveries acked 2xx, with their first 2xx ack.
  struct acked {
    const order_delivery* d;
    const order_settle* s;
  };
  std::map<int, std::vector<acked>> by_key;
  std::map<position, std::vector<acked>> ok_by_pos;
  std::set<position> unknown_acked;
  std::set<dkey> seen;
  for (const auto& s : h.settles) {
    if (s.what != settle_record::kind::ack) continue;
    if (s.result == o::unknown) unknown_acked.insert(s.pos);
    if (s.result != o::ok) continue;
    auto it = by_id.find({s.owner, s.pos, s.attempts});
    if (it == by_id.end()) {
      v.push_back({"unexpected_status", "ack of an unrecorded delivery " + pos_text(s.pos)});
      continue;
    }
    if (!seen.insert(it->first).second) continue;
    by_key[it->second->key].push_back({it->second, &s});
    ok_by_pos[s.pos].push_back({it->second, &s});
  }
  for (const auto& [pos, list] : ok_by_pos) {
    if (list.size() > 1) {
      v.push_back({"double_ack", delivery_text(*list[0].d) + " (" + settle_text(*list[0].s) +
                                     ") and " + delivery_text(*list[1].d) + " (" +
                                     settle_text(*list[1].s) + ")"});
    }
  }
  for (auto& [key, list] : by_key) {
    // Overlap: [answered, min(expiry - margin, ack sent)] of two of them.
    for (std::size_t i = 0; i < list.size(); ++i) {
      for (std::size_t j = i + 1; j < list.size(); ++j) {
        const auto& a = list[i];
        const auto& b = list[j];
        const millis a0 = a.d->consume_answered_ms;
        const millis a1 = std::min(a.d->lease_expires_at_ms - k_order_margin_ms, a.s->sent_ms);
        const millis b0 = b.d->consume_answered_ms;
        const millis b1 = std::min(b.d->lease_expires_at_ms - k_order_margin_ms, b.s->sent_ms);
        if (std::max(a0, b0) + k_order_margin_ms < std::min(a1, b1)) {
          v.push_back({"key_lease_overlap", delivery_text(*a.d) + " (" + settle_text(*a.s) +
                                                ") and " + delivery_text(*b.d) + " (" +
                                                settle_text(*b.s) + ")"});
        }
        // Order: the later offset's ack answered before the earlier's was sent.
        const auto& lo = a.d->pos.second < b.d->pos.second ? a : b;
        const auto& hi = a.d->pos.second < b.d->pos.second ? b : a;
        if (lo.d->pos.second != hi.d->pos.second && hi.s->answered_ms < lo.s->sent_ms) {
          v.push_back({"key_ack_order", delivery_text(*hi.d) + " (" + settle_text(*hi.s) +
                                            ") before " + delivery_text(*lo.d) + " (" +
                                            settle_text(*lo.s) + ")"});
        }
      }
    }
  }
  for (const auto& p : h.produces) {
    if (!ok_by_pos.contains(p.pos) && !unknown_acked.contains(p.pos)) {
      std::string seen_as;
      for (const auto& d : h.deliveries) {
        if (d.pos == p.pos) seen_as += "; delivered " + delivery_text(d);
      }
      for (const auto& st : h.settles) {
        if (st.pos != p.pos) continue;
        seen_as += std::string("; ") + (st.what == settle_record::kind::ack ? "" : "n") +
                   settle_text(st) + " by " + st.owner + " attempts " +
                   std::to_string(st.attempts) + " outcome " +
                   std::to_string(static_cast<int>(st.result));
      }
      v.push_back({"never_acked", order_value(p.key, p.seq) + " " + pos_text(p.pos) + " answered " +
                                      std::to_string(p.answered_ms) + seen_as});
    }
  }
  for (const auto& d : h.deliveries) {
    auto it = ok_by_pos.find(d.pos);
    if (it == ok_by_pos.end()) continue;
    for (const auto& a : it->second) {
      if (a.s->answered_ms < d.consume_sent_ms) {
        v.push_back({"after_ack", delivery_text(d) + " after " + settle_text(*a.s)});
      }
    }
  }
  for (const auto& u : h.unexpected) v.push_back({"unexpected_status", u});
  return v;
}

// One onceqd: the ordered topic under the killer, drain, one more kill, and
// a consume that must find nothing.
int run_ordering(config cfg) {
  const stopwatch clock;
  auto server = start_single(cfg);
  if (!server) return 3;
  shared_state s(1);
  s.ports[0] = server->port();
  {
    http_client c(server->port(), k_client_timeout);
    auto r = c.post("/v1/topics", {{"name", k_order_topic},
                                   {"partitions", 4},
                                   {"lease_ms", 300},
                                   {"backoff_ms", 20},
                                   {"max_attempts", 0},
                                   {"ordering", cfg.ordering_off ? "none" : "key"},
                                   {"dedup_window_ms", 3'600'000}});
    if (r.status != 201) {
      std::cerr << "crash_loop: create topic: " << r.status << " " << r.body << "\n";
      return 3;
    }
  }
  std::vector<std::unique_ptr<order_producer>> producers;
  std::vector<std::unique_ptr<order_consumer>> consumers;
  std::vector<std::thread> producer_threads, consumer_threads;
  for (int i = 0; i < cfg.producers; ++i) {
    producers.push_back(std::make_unique<order_producer>(i, cfg, s));
    producer_threads.emplace_back([p = producers.back().get()] { p->run(); });
  }
  for (int i = 0; i < cfg.consumers; ++i) {
    consumers.push_back(std::make_unique<order_consumer>(i, cfg, s));
    consumer_threads.emplace_back([c = consumers.back().get()] { c->run(); });
  }
  auto join = [](std::vector<std::thread>& ts) {
    for (auto& t : ts) {
      if (t.joinable()) t.join();
    }
  };

  run_outcome o;
  std::string setup_error;
  kill_single(cfg, *server, s, o, clock, setup_error);
  s.stop_producing = true;
  join(producer_threads);
  s.final_phase = true;
  cfg.topic_names = {k_order_topic};
  cfg.topics = 1;
  if (setup_error.empty()) {
    http_client c(server->port(), k_client_timeout);
    o.drain_ok = drain(
        [&](const std::string& t) -> std::optional<http_response> {
          try {
            return c.get(t);
          } catch (const std::exception&) {
            return std::nullopt;
          }
        },
        cfg);
  }
  s.stop_consuming = true;
  join(consumer_threads);
  order_history h;
  for (auto& p : producers) h.append(p->take_order());
  for (auto& c : consumers) h.append(c->take_order());

  // One more kill: every ack must have been durable, nothing comes again.
  std::vector<json> after;
  if (setup_error.empty()) {
    s.ports[0] = 0;
    server->kill9();
    ++o.kills;
    if (restart_single(*server, s, setup_error)) {
      http_client c(server->port(), k_client_timeout);
      const millis sent = now_ms();
      auto r = c.post("/v1/consume", {{"topic", k_order_topic},
                                      {"group", k_group},
                                      {"owner", "final"},
                                      {"max_messages", 100},
                                      {"wait_ms", 500}});
      if (r.status != 200) {
        h.unexpected.push_back("final consume: " + std::to_string(r.status) + " " + r.body);
      } else {
        for (const auto& m : r.ndjson()) {
          const std::string val = m.at("value").get<std::string>();
          const auto hash = val.find('#');
          h.deliveries.push_back(
              {"final",
               std::stoi(val.substr(1, hash - 1)),
               std::stoi(val.substr(hash + 1)),
               {m.at("partition").get<std::uint32_t>(), m.at("offset").get<std::uint64_t>()},
               m.at("attempts").get<std::int64_t>(),
               m.at("lease_expires_at_ms").get<millis>(),
               sent,
               now_ms()});
          after.push_back(m);
        }
      }
    }
  }
  if (!setup_error.empty()) {
    std::cerr << "crash_loop: " << setup_error << "\n" << server->log_tail() << "\n";
    return 3;
  }

  auto violations = check_ordering(h);
  for (const auto& m : after) {
    violations.push_back({"redelivered_after_drain", m.dump()});
  }
  if (!o.drain_ok) {
    violations.push_back({"not_drained", "group g still had backlog or inflight after " +
                                             std::to_string(cfg.drain_limit_s) + " s"});
  }
  std::map<std::string, std::size_t> by_rule;
  for (const auto& v : violations) ++by_rule[v.rule];
  std::size_t redeliveries = 0, acks_ok = 0, acks_fenced = 0, acks_unknown = 0, nacks_ok = 0;
  for (const auto& d : h.deliveries) redeliveries += d.attempts > 1 ? 1 : 0;
  for (const auto& st : h.settles) {
    if (st.what == settle_record::kind::nack) {
      nacks_ok += st.result == settle_record::outcome::ok ? 1 : 0;
      continue;
    }
    acks_ok += st.result == settle_record::outcome::ok ? 1 : 0;
    acks_fenced += st.result == settle_record::outcome::rejected ? 1 : 0;
    acks_unknown += st.result == settle_record::outcome::unknown ? 1 : 0;
  }
  // Deliveries while the key's next message was already stored: the ones
  // the ordering had to hold something back for.
  std::map<std::pair<int, int>, millis> answered_at;
  for (const auto& p : h.produces) answered_at[{p.key, p.seq}] = p.answered_ms;
  std::size_t with_next_waiting = 0;
  for (const auto& d : h.deliveries) {
    auto it = answered_at.find({d.key, d.seq + 1});
    if (it != answered_at.end() && it->second < d.consume_sent_ms) ++with_next_waiting;
  }
  std::cout << "crash_loop: " << (cfg.ordering_off ? "--ordering-off" : "--ordering") << ", seed "
            << cfg.seed << ", " << k_order_keys << " keys\n"
            << "  kills                       " << o.kills << " (" << cfg.kills
            << " asked + 1 before the final consume)\n"
            << "  kill phase                  " << static_cast<int>(o.kill_phase_s) << " s\n"
            << "  produces answered           " << h.produces.size() << "\n"
            << "  deliveries                  " << h.deliveries.size() << " (" << redeliveries
            << " redeliveries)\n"
            << "  with the key's next stored  " << with_next_waiting << "\n"
            << "  consumer crashes / slow     " << h.crashes << " / " << h.slow << "\n"
            << "  acks ok / fenced / unknown  " << acks_ok << " / " << acks_fenced << " / "
            << acks_unknown << " (" << h.carried << " carried on a consume)\n"
            << "  nacks ok                    " << nacks_ok << "\n"
            << "  violations                  " << violations.size() << "\n"
            << "  elapsed                     " << static_cast<int>(clock.seconds()) << " s\n";
  for (const auto& [rule, n] : by_rule) std::cout << "    " << rule << ": " << n << "\n";
  int shown = 0;
  for (const auto& v : violations) {
    if (++shown > 30) break;
    std::cout << "  VIOLATION " << v.rule << ": " << v.detail << "\n";
  }
  return verdict(cfg, o, !violations.empty(),
                 !h.produces.empty() && acks_ok > 0 && redeliveries > 0);
}

int run(const config& cfg) {
  if (cfg.pipeline) return run_pipeline(cfg);
  if (cfg.ordering) return run_ordering(cfg);
  return cfg.cluster > 0 ? run_cluster(cfg) : run_single(cfg);
}

}  // namespace
}  // namespace onceq::itest::crash_loop

int main(int argc, char** argv) {
  // A write to a killed server's socket must fail, not kill the harness.
  ::signal(SIGPIPE, SIG_IGN);
  std::optional<onceq::itest::crash_loop::config> cfg;
  try {
    cfg = onceq::itest::crash_loop::parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "crash_loop: " << e.what() << "\n";
    return 3;
  }
  if (!cfg) return 3;
  return onceq::itest::crash_loop::run(*cfg);
}
