// crash_loop: SIGKILLs and restarts a real onceqd over and over under a
// producer/consumer workload, then drains everything without kills and
// checks the client-side history (crash_loop_history.hpp) for broken
// promises. Exit status: 0 clean, 1 violations, 2 the run was incomplete
// (fewer kills than asked within --duration-limit, or no load), 3 setup
// failure (the server did not start or recover).
//
//   crash_loop --kills 20 --seed 7 --duration-limit 90
//
// The kill moments and every client decision come from --seed; thread
// interleavings and the server's timing do not, so a seed reproduces the
// schedule of a failing run, not its exact history.

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

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
  std::atomic<std::uint16_t> port{0};  // 0 while the server is down
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

// A keep-alive connection to whichever server is up: reconnects to the
// current port, answers nullopt when there was no answer (down, killed,
// timeout).
class connection {
 public:
  explicit connection(const shared_state& s) : s_(s) {}

  std::optional<http_response> send(std::string_view method, std::string_view target,
                                    const json& body = nullptr, const header_list& headers = {}) {
    const std::uint16_t p = s_.port.load();
    if (p == 0) return std::nullopt;
    if (p != port_ || !client_) {
      client_ = std::make_unique<http_client>(p, k_client_timeout);
      port_ = p;
    }
    try {
      return client_->request(method, target, body.is_null() ? std::string() : body.dump(),
                              headers);
    } catch (const std::exception&) {
      client_.reset();
      return std::nullopt;
    }
  }

 private:
  const shared_state& s_;
  std::unique_ptr<http_client> client_;
  std::uint16_t port_ = 0;
};

bool retryable(unsigned status) {
  return status == 429 || status == 503;
}

// ---- producers ----------------------------------------------------------

class producer {
 public:
  producer(int index, const config& cfg, shared_state& s)
      : index_(index),
        topic_(index % cfg.topics),
        cfg_(cfg),
        s_(s),
        rng_(cfg.seed * 7919 + 100 + index),
        conn_(s) {}

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

  history take() { return std::move(h_); }
  unexpected_log& unexpected() { return unexpected_; }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }

  static json message(const std::string& key, const std::string& id) {
    // The value is the dedup id, so that a delivery names its produce. The
    // message key spreads the two messages of one idempotency key over
    // partitions (the key's lease must hold across them).
    return {{"key", id}, {"value", id}, {"envelope", {{"idempotency_key", key}}}};
  }

  void produce_one(const std::string& key, const std::string& id) {
    json body = message(key, id);
    body["topic"] = topic_name(topic_);
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
    json body = {{"topic", topic_name(topic_)},
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
    for (;;) {
      if (!give_up && s_.stop_producing.load()) give_up = now_ms() + 15'000;
      if (give_up && now_ms() > *give_up) return std::nullopt;
      auto r = conn_.send("POST", "/v1/produce", body, {{"Idempotency-Key", dedup_id}});
      if (r && r->status == 200) return r->json();
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

  int index_;
  int topic_;
  const config& cfg_;
  shared_state& s_;
  std::mt19937_64 rng_;
  connection conn_;
  history h_;
  unexpected_log unexpected_;
};

// ---- consumers ----------------------------------------------------------

class consumer {
 public:
  consumer(int index, const config& cfg, shared_state& s)
      : index_(index),
        topic_(index % cfg.topics),
        rng_(cfg.seed * 7919 + 200 + index),
        s_(s),
        conn_(s) {}

  void run() {
    while (!s_.stop_consuming.load()) {
      const bool final_phase = s_.final_phase.load();
      const std::int64_t lease_ms = final_phase ? 5000 : 200 + pick(301);
      json body = {{"topic", topic_name(topic_)}, {"group", k_group}, {"owner", owner()},
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
                       answered});
      }
      h_.deliveries.insert(h_.deliveries.end(), got.begin(), got.end());
      settle_all(got, final_phase, lease_ms);
    }
  }

  history take() { return std::move(h_); }
  unexpected_log& unexpected() { return unexpected_; }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
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
    body["topic"] = topic_name(topic_);
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
      lost_one = lost_one || !r;
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
                            result == o::unknown ? 0 : answered});
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

  int index_;
  int topic_;
  std::mt19937_64 rng_;
  shared_state& s_;
  connection conn_;
  int incarnation_ = 0;
  std::size_t crashes_ = 0;
  history h_;
  unexpected_log unexpected_;

 public:
  std::size_t crashes() const { return crashes_; }
};

// ---- the harness --------------------------------------------------------

std::optional<config> parse_args(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--kills") {
      c.kills = std::stoi(value());
    } else if (a == "--seed") {
      c.seed = std::stoull(value());
    } else if (a == "--data-dir") {
      c.data_dir = value();
    } else if (a == "--onceqd") {
      c.onceqd = value();
    } else if (a == "--duration-limit") {
      c.duration_limit_s = std::stoi(value());
    } else if (a == "--producers") {
      c.producers = std::stoi(value());
    } else if (a == "--consumers") {
      c.consumers = std::stoi(value());
    } else if (a == "--kill-min-ms") {
      c.kill_min_ms = std::stoi(value());
    } else if (a == "--kill-max-ms") {
      c.kill_max_ms = std::stoi(value());
    } else if (a == "--produce-pause-ms") {
      c.produce_pause_ms = std::stoi(value());
    } else if (a == "--drain-limit") {
      c.drain_limit_s = std::stoi(value());
    } else if (a == "--rollback-at-kill") {
      c.rollback_at_kill = std::stoi(value());
    } else if (a == "--shards") {
      c.shards = std::stoi(value());
    } else if (a == "--topics") {
      c.topics = std::stoi(value());
    } else {
      std::cerr << "crash_loop: unknown flag " << a
                << "\nflags: --kills N --seed S --data-dir DIR --onceqd PATH --duration-limit SEC"
                   " --producers N --consumers N --kill-min-ms MS --kill-max-ms MS"
                   " --produce-pause-ms MS --drain-limit SEC --rollback-at-kill K"
                   " --shards N --topics N\n";
      return std::nullopt;
    }
  }
  if (c.kills < 0 || c.producers < 1 || c.consumers < 1 || c.kill_min_ms < 0 ||
      c.kill_max_ms < c.kill_min_ms || c.shards < 0 || c.topics < 1) {
    std::cerr << "crash_loop: bad flag values\n";
    return std::nullopt;
  }
  return c;
}

// Group g's backlog and inflight are both 0 on every topic.
bool drained(http_client& c, int topics) {
  for (int t = 0; t < topics; ++t) {
    auto r = c.get("/v1/topics/" + topic_name(t));
    if (r.status != 200) return false;
    auto j = r.json();
    if (!j.at("groups").contains(k_group)) return false;
    const auto& g = j.at("groups").at(k_group);
    if (g.at("backlog").get<std::uint64_t>() != 0 || g.at("inflight").get<std::uint64_t>() != 0) {
      return false;
    }
  }
  return true;
}

// The topic of a key "p<producer>-<n>".
std::string topic_of_key(const std::string& key, int topics) {
  const int producer = std::stoi(key.substr(1, key.find('-') - 1));
  return topic_name(producer % topics);
}

int run(const config& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  server_process::options opts;
  opts.onceqd_path = cfg.onceqd;
  opts.data_dir = cfg.data_dir;
  if (cfg.shards > 0) opts.extra_args = {"--shards", std::to_string(cfg.shards)};
  std::unique_ptr<server_process> server;
  try {
    server = std::make_unique<server_process>(opts);
  } catch (const std::exception& e) {
    std::cerr << "crash_loop: onceqd did not start: " << e.what() << "\n";
    return 3;
  }
  shared_state s;
  s.port = server->port();
  for (int t = 0; t < cfg.topics; ++t) {
    http_client c(server->port(), k_client_timeout);
    auto r = c.post("/v1/topics", {{"name", topic_name(t)},
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

  std::vector<std::unique_ptr<producer>> producers;
  std::vector<std::unique_ptr<consumer>> consumers;
  std::vector<std::thread> producer_threads, consumer_threads;
  for (int i = 0; i < cfg.producers; ++i) {
    producers.push_back(std::make_unique<producer>(i, cfg, s));
    producer_threads.emplace_back([p = producers.back().get()] { p->run(); });
  }
  for (int i = 0; i < cfg.consumers; ++i) {
    consumers.push_back(std::make_unique<consumer>(i, cfg, s));
    consumer_threads.emplace_back([c = consumers.back().get()] { c->run(); });
  }

  // Kill phase.
  std::mt19937_64 rng(cfg.seed);
  int kills = 0;
  std::string setup_error;
  auto restart = [&]() -> bool {
    try {
      server->start();
    } catch (const std::exception& e) {
      setup_error = std::string("onceqd did not recover: ") + e.what();
      return false;
    }
    s.port = server->port();
    return true;
  };
  while (kills < cfg.kills && elapsed_s() < cfg.duration_limit_s) {
    const auto up =
        cfg.kill_min_ms +
        static_cast<int>(rng() % static_cast<std::uint64_t>(cfg.kill_max_ms - cfg.kill_min_ms + 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(up));
    s.port = 0;
    server->kill9();
    ++kills;
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 100));
    if (cfg.rollback_at_kill > 0) {
      namespace fs = std::filesystem;
      const fs::path data = server->data_dir();
      const fs::path copy = data.string() + ".rollback";
      if (kills == cfg.rollback_at_kill) {
        fs::remove_all(copy);
        fs::copy(data, copy, fs::copy_options::recursive);
      } else if (kills == cfg.rollback_at_kill + 2) {
        fs::remove_all(data);
        fs::rename(copy, data);
        std::cerr << "crash_loop: rolled " << data << " back to its copy of kill "
                  << cfg.rollback_at_kill << " (fault injection)\n";
      }
    }
    if (!restart()) break;
    if (kills % 25 == 0) {
      std::cerr << "crash_loop: " << kills << " kills, " << static_cast<int>(elapsed_s()) << " s\n";
    }
  }
  const double kill_phase_s = elapsed_s();

  // Final phase: no more kills; producers finish, consumers ack everything
  // until the group is drained.
  s.stop_producing = true;
  for (auto& t : producer_threads) t.join();
  s.final_phase = true;
  bool drain_ok = false;
  if (setup_error.empty()) {
    http_client c(server->port(), k_client_timeout);
    const auto drain_end =
        std::chrono::steady_clock::now() + std::chrono::seconds(cfg.drain_limit_s);
    int quiet = 0;
    while (std::chrono::steady_clock::now() < drain_end && quiet < 3) {
      std::this_thread::sleep_for(300ms);
      quiet = drained(c, cfg.topics) ? quiet + 1 : 0;
    }
    drain_ok = quiet >= 3;
  }
  s.stop_consuming = true;
  for (auto& t : consumer_threads) t.join();

  history h;
  std::vector<std::string> unexpected;
  std::size_t crashes = 0;
  for (auto& p : producers) {
    h.append(p->take());
    for (auto& l : p->unexpected().lines) unexpected.push_back(std::move(l));
  }
  for (auto& c : consumers) {
    h.append(c->take());
    crashes += c->crashes();
    for (auto& l : c->unexpected().lines) unexpected.push_back(std::move(l));
  }

  // One more kill before reading the keys: the commits must be durable too.
  final_key_states keys;
  if (setup_error.empty()) {
    s.port = 0;
    server->kill9();
    ++kills;
    if (restart()) {
      std::set<std::string> wanted;
      for (const auto& p : h.produces) wanted.insert(p.key);
      http_client c(server->port(), k_client_timeout);
      for (const auto& k : wanted) {
        auto r = c.get("/v1/keys?topic=" + topic_of_key(k, cfg.topics) +
                       "&group=" + std::string(k_group) + "&key=" + k);
        if (r.status != 200) {
          unexpected.push_back("GET /v1/keys " + k + ": " + std::to_string(r.status) + " " +
                               r.body);
          continue;
        }
        keys[k] = r.json().at("state").get<std::string>();
      }
    }
  }
  if (!setup_error.empty()) {
    std::cerr << "crash_loop: " << setup_error << "\n" << server->log_tail() << "\n";
    return 3;
  }

  auto violations = check(h, keys);
  for (const auto& u : unexpected) violations.push_back({"unexpected_status", u});
  if (!drain_ok) {
    violations.push_back({"not_drained", "group " + std::string(k_group) +
                                             " still had backlog or inflight after " +
                                             std::to_string(cfg.drain_limit_s) + " s"});
  }
  const figures f = count(h, keys);
  const double elapsed = elapsed_s();
  std::map<std::string, std::size_t> by_rule;
  for (const auto& v : violations) ++by_rule[v.rule];

  std::cout << "crash_loop: seed " << cfg.seed << ", " << cfg.topics << " topic(s)"
            << (cfg.shards > 0 ? ", --shards " + std::to_string(cfg.shards) : std::string()) << "\n"
            << "  kills                       " << kills << " (" << cfg.kills
            << " asked + 1 before the final key check)\n"
            << "  kill phase                  " << static_cast<int>(kill_phase_s) << " s\n"
            << "  produces answered           " << f.produces_answered << " (" << f.keys_answered
            << " keys)\n"
            << "  produce retries deduped     " << f.produce_duplicates << "\n"
            << "  deliveries                  " << f.deliveries << " (" << f.redeliveries
            << " redeliveries)\n"
            << "  consumer crashes            " << crashes << "\n"
            << "  acks answered ok            " << f.acks_ok << "\n"
            << "  acks fenced (409)           " << f.acks_rejected << "\n"
            << "  acks without answer         " << f.acks_unknown << "\n"
            << "  nacks ok                    " << f.nacks_ok << "\n"
            << "  key duplicates suppressed   " << f.key_duplicates_suppressed << "\n"
            << "  violations                  " << violations.size() << "\n"
            << "  elapsed                     " << static_cast<int>(elapsed) << " s\n";
  for (const auto& [rule, n] : by_rule) std::cout << "    " << rule << ": " << n << "\n";
  int shown = 0;
  for (const auto& v : violations) {
    if (++shown > 20) break;
    std::cout << "  VIOLATION " << v.rule << ": " << v.detail << "\n";
  }
  if (!violations.empty()) return 1;
  if (kills < cfg.kills + 1) {
    std::cout << "crash_loop: INCOMPLETE: " << kills - 1 << " of " << cfg.kills
              << " kills within --duration-limit " << cfg.duration_limit_s << " s\n";
    return 2;
  }
  if (f.produces_answered == 0 || f.acks_ok == 0 || f.redeliveries == 0) {
    std::cout << "crash_loop: INCOMPLETE: too little load to mean anything\n";
    return 2;
  }
  std::cout << "crash_loop: OK\n";
  return 0;
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
