// How busy a loop is (shard/loop_load.hpp), the rules that spread a hot
// topic's sessions over loops with room (http/spread.hpp), and a real
// server over two shard loops whose loads the test sets: a session on a
// saturated loop moves to the idle one and stays there while its topic's
// loop is busy and for k_settle, comes back once it is not, and nothing moves while cores
// are scarce. And the meter of idle cores (shard/cpu_idle.hpp).

#include "http/spread.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "http/server.hpp"
#include "http/session.hpp"
#include "router_test_support.hpp"

namespace onceq::http {
namespace {

using namespace test;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using tcp = asio::ip::tcp;
namespace beast = boost::beast;

constexpr std::uint64_t ns(std::chrono::nanoseconds d) {
  return static_cast<std::uint64_t>(d.count());
}

// --- the meter ---------------------------------------------------------

TEST(loop_load, nothing_is_published_before_a_whole_window) {
  loop_load l;
  const auto t0 = steady::now();
  l.sample(t0, 0, 0);
  EXPECT_EQ(l.read(t0), loop_reading{});
  l.sample(t0 + 30ms, ns(30ms), 0);  // within the window: ignored
  EXPECT_EQ(l.read(t0 + 30ms), loop_reading{});
}

TEST(loop_load, a_window_publishes_cpu_and_run_delay_as_fractions_of_wall_time) {
  loop_load l;
  const auto t0 = steady::now();
  l.sample(t0, 1'000'000, 500);
  l.sample(t0 + 100ms, 1'000'000 + ns(75ms), 500 + ns(10ms));
  const auto r = l.read(t0 + 100ms);
  EXPECT_DOUBLE_EQ(r.busy, 0.75);
  EXPECT_DOUBLE_EQ(r.waiting, 0.10);
  // The next window counts from this one's end.
  l.sample(t0 + 200ms, 1'000'000 + ns(80ms), 500 + ns(10ms));
  EXPECT_DOUBLE_EQ(l.read(t0 + 200ms).busy, 0.05);
  EXPECT_DOUBLE_EQ(l.read(t0 + 200ms).waiting, 0.0);
}

TEST(loop_load, fractions_are_capped_and_counters_that_go_back_count_zero) {
  loop_load l;
  const auto t0 = steady::now();
  l.sample(t0, ns(10ms), ns(10ms));
  l.sample(t0 + 50ms, ns(500ms), ns(1ms));  // more CPU than wall; delay went back
  EXPECT_DOUBLE_EQ(l.read(t0 + 50ms).busy, 1.0);
  EXPECT_DOUBLE_EQ(l.read(t0 + 50ms).waiting, 0.0);
}

TEST(loop_load, a_loop_that_stopped_publishing_reads_idle) {
  loop_load l;
  const auto t0 = steady::now();
  l.sample(t0, 0, 0);
  l.sample(t0 + 50ms, ns(50ms), 0);
  // (The stamp is in whole milliseconds: a margin of one each way.)
  EXPECT_DOUBLE_EQ(l.read(t0 + 49ms + loop_load::k_stale_after).busy, 1.0);
  EXPECT_EQ(l.read(t0 + 52ms + loop_load::k_stale_after), loop_reading{});
  // A reader whose clock is a little behind the loop's still sees it.
  EXPECT_DOUBLE_EQ(l.read(t0 + 40ms).busy, 1.0);
}

TEST(loop_load, the_loop_thread_measures_itself) {
  loop_load l;
  auto t = steady::now();
  l.sample(t);
  // Spin for a window: the thread is runnable all along, so the time it
  // ran and the time it waited for a core (under load) add up to most of
  // the wall time.
  while (steady::now() - t < 60ms) {
  }
  l.sample(steady::now());
  const auto r = l.read(steady::now());
  EXPECT_GT(r.busy, 0.0);
  EXPECT_GT(r.busy + r.waiting, 0.5);
  EXPECT_LE(r.busy, 1.0);
}

// --- idle cores --------------------------------------------------------

constexpr std::string_view k_proc_stat =
    "cpu  900 0 90 9000 100 0 0 0 0 0\n"
    "cpu0 100 0 10 1000 10 0 0 0 0 0\n"
    "cpu1 200 0 20 2000 20 0 0 0 0 0\n"
    "cpu2 300 0 30 3000 30 0 0 0 0 0\n"
    "cpu12 300 0 30 3000 40 0 0 0 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n";

TEST(cpu_idle, idle_and_iowait_of_the_allowed_cores_only) {
  EXPECT_EQ(idle_ticks_of(k_proc_stat, {0, 1, 2, 12}), 1010u + 2020 + 3030 + 3040);
  EXPECT_EQ(idle_ticks_of(k_proc_stat, {1, 12}), 2020u + 3040);  // not the "cpu " total
  EXPECT_EQ(idle_ticks_of(k_proc_stat, {7}), std::nullopt);
  EXPECT_EQ(idle_ticks_of("", {0}), std::nullopt);
  EXPECT_EQ(idle_ticks_of("cpu0 1 2 3\ncpux 1 2 3 4 5\n", {0}), std::nullopt);  // cut short
}

TEST(cpu_idle, idle_cores_over_each_period_and_nothing_across_a_long_gap) {
  std::uint64_t ticks = 1000;
  bool readable = true;
  cpu_idle idle(
      [&]() -> std::optional<std::uint64_t> {
        if (!readable) return std::nullopt;
        return ticks;
      },
      100.0);
  const auto t0 = steady::now();
  EXPECT_EQ(idle.read(t0), std::nullopt);  // a start only
  static_assert(cpu_idle::k_period == 200ms && cpu_idle::k_max_gap == 800ms);
  ticks += 60;  // 60 ticks in 200 ms: 3 cores idle
  EXPECT_NEAR(*idle.read(t0 + 200ms), 3.0, 1e-9);
  ticks += 100;  // within the period: the last reading, no new sample
  EXPECT_NEAR(*idle.read(t0 + 300ms), 3.0, 1e-9);
  EXPECT_NEAR(*idle.read(t0 + 400ms), 5.0, 1e-9);  // those 100 ticks over 200 ms
  // Unreadable: the last reading while it is recent, then unknown.
  readable = false;
  EXPECT_NEAR(*idle.read(t0 + 700ms), 5.0, 1e-9);
  EXPECT_EQ(idle.read(t0 + 1300ms), std::nullopt);
  // After a gap longer than k_max_gap a sample only starts again.
  readable = true;
  ticks += 5000;
  EXPECT_EQ(idle.read(t0 + 3s), std::nullopt);
  ticks += 20;
  EXPECT_NEAR(*idle.read(t0 + 3s + 200ms), 1.0, 1e-9);
}

TEST(cpu_idle, reads_this_machine) {
  auto read = cpu_idle::proc_stat_reader();
  EXPECT_EQ(read(steady::now()), std::nullopt);
  std::this_thread::sleep_for(cpu_idle::k_period + 50ms);
  const auto idle = read(steady::now());
  ASSERT_TRUE(idle.has_value());
  EXPECT_GE(*idle, 0.0);
  EXPECT_LE(*idle, static_cast<double>(std::thread::hardware_concurrency()) + 0.5);
}

// --- the rules ---------------------------------------------------------

constexpr std::optional<double> k_spare = 8.0;

TEST(spread_rules, a_session_stays_off_a_busy_loop_only_while_its_own_has_room) {
  EXPECT_TRUE(stays_off({0.95, 0}, {0.1, 0}, k_spare));
  EXPECT_TRUE(stays_off({k_stay_away, 0}, {k_room, 0}, k_spare));
  EXPECT_FALSE(stays_off({k_stay_away - 0.01, 0}, {0.1, 0}, k_spare));  // room there: migrate
  EXPECT_FALSE(stays_off({0.95, 0}, {k_room + 0.01, 0}, k_spare));      // no room here
  EXPECT_FALSE(stays_off({0.95, k_scarce}, {0.1, 0}, k_spare));         // cores scarce
  EXPECT_FALSE(stays_off({0.95, 0}, {0.1, k_scarce}, k_spare));
  EXPECT_FALSE(stays_off({}, {}, k_spare));  // both idle (or never measured)
}

TEST(spread_rules, two_loops_never_keep_each_others_sessions) {
  static_assert(k_room < k_stay_away && k_stay_away < k_saturated);
  for (double a = 0; a <= 1.0; a += 0.05) {
    for (double b = 0; b <= 1.0; b += 0.05) {
      EXPECT_FALSE(stays_off({a, 0}, {b, 0}, k_spare) && stays_off({b, 0}, {a, 0}, k_spare))
          << a << " " << b;
    }
  }
}

TEST(spread_rules, a_saturated_loop_spreads_to_the_least_busy_loop_with_room) {
  const std::vector<loop_reading> loops{{0.95, 0}, {0.25, 0}, {0.20, 0}, {k_saturated, 0}};
  EXPECT_EQ(spread_to(0, loops, k_spare), 2u);
  EXPECT_EQ(spread_to(3, loops, k_spare), 2u);
  EXPECT_EQ(spread_to(1, loops, k_spare), std::nullopt);  // not saturated
  EXPECT_EQ(spread_to(9, loops, k_spare), std::nullopt);  // no such loop
}

TEST(spread_rules, nothing_spreads_without_room_or_while_cores_are_scarce) {
  const std::vector<loop_reading> roomy{{1.0, 0}, {0.0, 0}};
  EXPECT_EQ(spread_to(0, std::vector<loop_reading>{{1.0, 0}, {k_room + 0.01, 0}}, k_spare),
            std::nullopt);
  EXPECT_EQ(spread_to(0, std::vector<loop_reading>{{1.0, 0.2}, {0.0, 0}}, k_spare), std::nullopt);
  EXPECT_EQ(spread_to(0, std::vector<loop_reading>{{1.0, 0}, {0.0, 0.2}}, k_spare), std::nullopt);
  EXPECT_EQ(spread_to(0, std::vector<loop_reading>{{1.0, 0}}, k_spare), std::nullopt);
  // Fewer idle cores than k_spare_cores, or not known: nothing moves.
  EXPECT_EQ(spread_to(0, roomy, k_spare_cores), 1u);
  EXPECT_EQ(spread_to(0, roomy, k_spare_cores - 0.01), std::nullopt);
  EXPECT_EQ(spread_to(0, roomy, std::nullopt), std::nullopt);
  EXPECT_TRUE(stays_off({1.0, 0}, {0.0, 0}, k_spare_cores));
  EXPECT_FALSE(stays_off({1.0, 0}, {0.0, 0}, 0.5));
  EXPECT_FALSE(stays_off({1.0, 0}, {0.0, 0}, std::nullopt));
}

// --- a server over two shard loops --------------------------------------

// A loop whose readings the test sets: each set() publishes a fresh window.
// Its windows end a minute ahead of the real clock, so that a slow machine
// (a sanitizer build under load) cannot let a reading go stale between
// set() and the session reading it.
struct fake_loop {
  static steady::time_point ahead() { return steady::now() + 60s; }
  loop_load load;
  steady::time_point t = ahead() - 1s;
  std::uint64_t cpu = 0;
  std::uint64_t delay = 0;
  bool started = false;

  void set(double busy, double waiting) {
    if (!started) {
      load.sample(t, cpu, delay);
      started = true;
    }
    const auto next = std::max(ahead(), t + loop_load::k_window);
    const auto wall = static_cast<double>(ns(next - t));
    cpu += static_cast<std::uint64_t>(busy * wall);
    delay += static_cast<std::uint64_t>(waiting * wall);
    load.sample(next, cpu, delay);
    t = next;
  }
};

class spread_server : public ::testing::Test {
 protected:
  static http_options options() {
    http_options o = test_options();
    o.port = 0;
    return o;
  }

  spread_server() : spread_server(options()) {}
  explicit spread_server(const http_options& opts)
      : h_(opts, nullptr, 2),
        srv_({&h_.core(0).context(), &h_.core(1).context()}, h_.routes(), opts, nullptr,
             {&loops_[0].load, &loops_[1].load},
             [this](steady::time_point) -> std::optional<double> {
               const double v = idle_cores_.load();
               if (v < 0) return std::nullopt;
               return v;
             }) {
    auto ep = srv_.listen();
    EXPECT_TRUE(ep.ok());
    port_ = ep->port();
    srv_.start();
  }

  ~spread_server() override {
    srv_.stop();
    for (int i = 0; i < 500 && srv_.session_count() > 0; ++i) {
      std::this_thread::sleep_for(10ms);
    }
  }

  connection_stats& stats() { return h_.routes().metrics().connections(); }
  std::uint64_t spreads() { return stats().spreads.load(); }
  std::uint64_t migrations() { return stats().migrations.load(); }
  // A session moves after its answer is written, so the client may read
  // the answer before the count changes: waits up to 5 s for it.
  static std::uint64_t settled(const std::function<std::uint64_t()>& count, std::uint64_t want) {
    for (int i = 0; i < 500 && count() != want; ++i) std::this_thread::sleep_for(10ms);
    return count();
  }
  std::uint64_t spreads_now(std::uint64_t want) {
    return settled([this] { return spreads(); }, want);
  }
  std::uint64_t migrations_now(std::uint64_t want) {
    return settled([this] { return migrations(); }, want);
  }

  // Sets both loops' readings, then produces one message on s.
  unsigned produce(tcp::socket& s, loop_reading owner, loop_reading other, int i) {
    loops_[0].set(owner.busy, owner.waiting);
    loops_[1].set(other.busy, other.waiting);
    request req{bhttp::verb::post, "/v1/produce", 11};
    req.set(bhttp::field::host, "127.0.0.1");
    req.body() = json{{"topic", "hot"}, {"value", "m" + std::to_string(i)}}.dump();
    req.prepare_payload();
    bhttp::write(s, req);
    beast::flat_buffer buf;
    response res;
    bhttp::read(s, buf, res);
    return res.result_int();
  }

  // With loop 0 calm and loop 1 idle: a session on loop 1 that moved or
  // decided to stay at `since` does not migrate to loop 0 before k_settle
  // has passed, and does after it.
  void holds_still_then_follows(tcp::socket& s, steady::time_point since, int& n) {
    const loop_reading calm{0.2, 0}, idle{0, 0};
    const auto before = migrations();
    for (int i = 0; i < k_migrate_after + 1; ++i) ASSERT_EQ(produce(s, calm, idle, n++), 200);
    if (steady::now() - since < k_settle - 200ms) {  // (a slow machine may be past it)
      std::this_thread::sleep_for(50ms);
      EXPECT_EQ(migrations(), before);
    }
    std::this_thread::sleep_until(since + k_settle + 200ms);
    for (int i = 0; i < k_migrate_after; ++i) ASSERT_EQ(produce(s, calm, idle, n++), 200);
    EXPECT_EQ(migrations_now(before + 1), before + 1);
  }

  fake_loop loops_[2];
  std::atomic<double> idle_cores_{8.0};  // what the server reads as idle cores; < 0: unknown
  router_harness h_;
  server srv_;
  std::uint16_t port_ = 0;
  asio::io_context client_ioc_;
};

TEST_F(spread_server, a_hot_topics_session_spreads_stays_while_busy_and_comes_back) {
  // The topic lands on shard 0 (the emptier shard; ties go to the first).
  ASSERT_EQ(h_.post("/v1/topics", json{{"name", "hot"}, {"partitions", 1}}).result_int(), 201);
  ASSERT_EQ(h_.shards().placed_on("hot"), 0u);

  // The first connection is accepted on loop 0, the topic's loop.
  tcp::socket s(client_ioc_);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
  const loop_reading saturated{0.95, 0}, idle{0, 0};
  int n = 0;

  // Loop 0 saturated, loop 1 idle: after its first answer the session
  // moves to loop 1, and its commands cross back to shard 0.
  ASSERT_EQ(produce(s, saturated, idle, n++), 200);
  const auto spread_at = steady::now();
  EXPECT_EQ(spreads_now(1), 1u);
  EXPECT_EQ(migrations_now(1), 1u);
  // While loop 0 stays busy it does not migrate back.
  for (int i = 0; i < 6; ++i) ASSERT_EQ(produce(s, saturated, idle, n++), 200);
  EXPECT_EQ(spreads(), 1u);
  EXPECT_EQ(migrations(), 1u);
  // Nor for k_settle after it spread, however calm loop 0 gets; then,
  // after k_migrate_after answers from shard 0, the session follows its
  // topic, as it always did.
  holds_still_then_follows(s, spread_at, n);
  EXPECT_EQ(spreads(), 1u);

  // Saturated while cores are scarce: it stays with its topic, whether
  // the loop waits for a core, no core sits idle, or that is not known.
  const loop_reading starved{0.95, 0.3};
  for (int i = 0; i < 4; ++i) ASSERT_EQ(produce(s, starved, idle, n++), 200);
  idle_cores_ = 0.5;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(produce(s, saturated, idle, n++), 200);
  idle_cores_ = -1;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(produce(s, saturated, idle, n++), 200);
  EXPECT_EQ(spreads(), 1u);
  EXPECT_EQ(migrations(), 2u);

  // Every message was stored once, in order.
  auto got = h_.post("/v1/consume",
                     json{{"topic", "hot"}, {"group", "g"}, {"owner", "o"}, {"max_messages", 100}});
  ASSERT_EQ(got.result_int(), 200);
  std::vector<json> lines;
  std::string_view rest = got.body();
  while (!rest.empty()) {
    const auto end = rest.find('\n');
    if (end != 0) lines.push_back(json::parse(rest.substr(0, end)));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(lines[static_cast<std::size_t>(i)].at("value"), "m" + std::to_string(i));
  }
}

TEST_F(spread_server, a_session_stays_off_a_busy_loop_and_looks_again_after_k_settle) {
  ASSERT_EQ(h_.post("/v1/topics", json{{"name", "hot"}, {"partitions", 1}}).result_int(), 201);
  ASSERT_EQ(h_.shards().placed_on("hot"), 0u);
  // Connections are dealt to the loops in turn: the second lands on loop 1.
  tcp::socket first(client_ioc_), s(client_ioc_);
  first.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
  const loop_reading busy{k_stay_away + 0.05, 0}, idle{0, 0};
  int n = 0;

  // Loop 0 busy, loop 1 with room: the session stays on loop 1.
  for (int i = 0; i < k_migrate_after; ++i) ASSERT_EQ(produce(s, busy, idle, n++), 200);
  const auto stayed_at = steady::now();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(migrations(), 0u);
  // Loop 0 calm: for k_settle it does not look again, then it follows
  // its topic.
  holds_still_then_follows(s, stayed_at, n);
  EXPECT_EQ(spreads(), 0u);
}

// --no-spread-connections: the server is given the loads and idle cores
// all the same, and a session on a saturated loop only migrates.
class no_spread_server : public spread_server {
 protected:
  static http_options without_spread() {
    http_options o = options();
    o.spread_connections = false;
    return o;
  }
  no_spread_server() : spread_server(without_spread()) {}
};

TEST_F(no_spread_server, a_session_on_a_saturated_loop_stays_with_its_topic) {
  ASSERT_EQ(h_.post("/v1/topics", json{{"name", "hot"}, {"partitions", 1}}).result_int(), 201);
  ASSERT_EQ(h_.shards().placed_on("hot"), 0u);
  tcp::socket s(client_ioc_);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
  const loop_reading saturated{0.95, 0}, idle{0, 0};
  for (int n = 0; n < 4; ++n) ASSERT_EQ(produce(s, saturated, idle, n), 200);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(spreads(), 0u);
  EXPECT_EQ(migrations(), 0u);
}

}  // namespace
}  // namespace onceq::http
