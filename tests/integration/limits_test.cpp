// Connection limits: --max-connections closes the connections past it at
// accept; --header-timeout-ms cuts a request whose header block stalls,
// while a kept-alive connection idle between requests keeps the idle
// timeout. Measurements go to stdout ([ measure ] lines) for the docs.

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "raw_socket.hpp"
#include "test_support.hpp"

namespace onceq::itest {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::string_view k_healthz = "GET /v1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
constexpr std::string_view k_half_header = "GET /v1/healthz HTTP/1.1\r\nHo";

// Waits up to timeout for metric(name) to satisfy ok; returns the last value.
template <class Ok>
double wait_metric(std::uint16_t port, std::string_view name, Ok ok,
                   std::chrono::milliseconds timeout = 5s) {
  const auto deadline = clock_type::now() + timeout;
  double v = -1;
  for (;;) {
    try {
      http_client c(port, 2s);
      v = metric(c, name);
      if (ok(v)) return v;
    } catch (const std::exception&) {
      // refused at accept while the limit is still reached
    }
    if (clock_type::now() > deadline) return v;
    std::this_thread::sleep_for(20ms);
  }
}

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// Waits for each socket to be closed by the server; returns each one's
// close time in ms after start (-1: still open at the deadline).
std::vector<double> wait_all_closed(const std::vector<std::unique_ptr<raw_socket>>& socks,
                                    clock_type::time_point start,
                                    std::chrono::milliseconds timeout) {
  std::vector<double> closed(socks.size(), -1);
  std::vector<pollfd> fds;
  for (const auto& s : socks) fds.push_back(pollfd{s->fd(), POLLIN, 0});
  std::size_t left = socks.size();
  const auto deadline = clock_type::now() + timeout;
  while (left > 0 && clock_type::now() < deadline) {
    if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[512];
      if (::recv(fds[i].fd, buf, sizeof buf, 0) > 0) continue;  // (nothing is expected)
      closed[i] = ms_since(start);
      fds[i].fd = -1;  // poll ignores it from now on
      --left;
    }
  }
  return closed;
}

class limits : public onceq_test {
 protected:
  void SetUp() override {}  // each test starts its server with its own flags
  void start(std::vector<std::string> args) {
    server_process::options o;
    o.extra_args = std::move(args);
    start_server(std::move(o));
  }
};

TEST_F(limits, connections_past_the_limit_are_closed_at_accept) {
  start({"--max-connections", "50"});
  client().close();  // (the fixture's client would count as one)
  wait_metric(port(), "onceq_connections_open", [](double v) { return v == 1; });
  std::this_thread::sleep_for(200ms);  // for the server to see the scrape's connection close

  std::vector<std::unique_ptr<raw_socket>> socks;
  for (int i = 0; i < 60; ++i) socks.push_back(std::make_unique<raw_socket>(port()));
  int served = 0, refused = 0;
  for (auto& s : socks) {
    if (!s->send(k_healthz)) {
      ++refused;
      continue;
    }
    std::string res = s->read_response(5s);
    if (res.starts_with("HTTP/1.1 200")) {
      ++served;
    } else if (res.empty()) {
      ++refused;
    }
  }
  std::printf("[ measure  ] max-connections 50: of 60 connections %d served, %d closed at accept\n",
              served, refused);
  EXPECT_EQ(served, 50);
  EXPECT_EQ(refused, 10);
  // The first 50 are the ones served: the accept order is the connect order.
  std::string extra;
  EXPECT_EQ(socks[59]->read_some(extra, 1s), raw_socket::got::closed);

  socks.clear();
  EXPECT_EQ(wait_metric(port(), "onceq_connections_open", [](double v) { return v == 1; }), 1);
  http_client c(port());
  EXPECT_EQ(metric(c, "onceq_connections_rejected_total"), 10);
  EXPECT_GE(metric(c, "onceq_connections_accepted_total"), 51);
  EXPECT_EQ(c.get("/v1/healthz").status, 200u);  // served again below the limit
}

TEST_F(limits, stalled_header_is_cut_but_idle_keep_alive_is_not) {
  start({"--header-timeout-ms", "300", "--idle-timeout-ms", "5000"});

  raw_socket keep(port());
  ASSERT_TRUE(keep.send(k_healthz));
  ASSERT_TRUE(keep.read_response(5s).starts_with("HTTP/1.1 200"));

  const auto start_at = clock_type::now();
  raw_socket slow(port());
  ASSERT_TRUE(slow.send(k_half_header));
  raw_socket silent(port());  // connects and sends nothing
  std::string got;
  ASSERT_EQ(slow.read_some(got, 5s), raw_socket::got::closed) << got;
  const double slow_ms = ms_since(start_at);
  ASSERT_EQ(silent.read_some(got, 5s), raw_socket::got::closed) << got;
  const double silent_ms = ms_since(start_at);
  std::printf(
      "[ measure  ] header-timeout 300 ms: half header cut after %.0f ms, silent "
      "connection after %.0f ms\n",
      slow_ms, silent_ms);
  EXPECT_GE(slow_ms, 250);
  EXPECT_LT(slow_ms, 3000);
  EXPECT_TRUE(got.empty()) << "closed without an answer, got: " << got;

  // Idle between requests for over 3x the header timeout: the idle timeout
  // (5 s) governs, so the same connection answers again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000) - (clock_type::now() - start_at));
  ASSERT_TRUE(keep.send(k_healthz));
  EXPECT_TRUE(keep.read_response(5s).starts_with("HTTP/1.1 200"));

  http_client c(port());
  EXPECT_GE(metric(c, "onceq_http_header_timeouts_total"), 2);
}

TEST_F(limits, many_stalled_headers_are_all_cut) {
  constexpr int k_conns = 500;
  start({"--header-timeout-ms", "300"});
  client().close();

  std::vector<std::unique_ptr<raw_socket>> socks;
  const auto start_at = clock_type::now();
  for (int i = 0; i < k_conns; ++i) {
    socks.push_back(std::make_unique<raw_socket>(port()));
    ASSERT_TRUE(socks.back()->send(k_half_header));
  }
  const double opened_ms = ms_since(start_at);
  http_client c(port());
  const double held = metric(c, "onceq_connections_open") - 1;  // (minus the scrape)
  c.close();

  auto closed = wait_all_closed(socks, start_at, 10s);
  const auto still_open = std::count(closed.begin(), closed.end(), -1.0);
  const double last = *std::max_element(closed.begin(), closed.end());
  std::printf(
      "[ measure  ] %d half-header connections opened in %.0f ms, %.0f held open at once, "
      "all cut %s after %.0f ms (header-timeout 300 ms)\n",
      k_conns, opened_ms, held, still_open == 0 ? "" : "NOT", last);
  EXPECT_EQ(still_open, 0);
  EXPECT_LT(last, opened_ms + 3000);
  EXPECT_GE(wait_metric(port(), "onceq_http_header_timeouts_total",
                        [](double v) { return v >= k_conns; }),
            k_conns);
  EXPECT_EQ(wait_metric(port(), "onceq_connections_open", [](double v) { return v == 1; }), 1);
}

}  // namespace
}  // namespace onceq::itest

namespace onceq::itest {
namespace {

class backlog_caps : public onceq_test {};

TEST_F(backlog_caps, a_produce_past_the_cap_gets_429_with_retry_after_and_stores_nothing) {
  create_topic("capped", 1, json{{"max_backlog_messages", 3}});
  for (int i = 0; i < 2; ++i) produce(client(), "capped", "v" + std::to_string(i));
  json batch = {{"topic", "capped"},
                {"messages", json::array({{{"value", "a"}}, {{"value", "b"}}})}};
  auto refused = client().post("/v1/produce", batch);
  ASSERT_EQ(refused.status, 429u) << refused.body;
  EXPECT_EQ(refused.header("Retry-After"), "1");
  EXPECT_EQ(refused.json()["error"], "RESOURCE_EXHAUSTED");
  EXPECT_GT(refused.json().value("retry_after_ms", 0), 0);
  auto topic = client().get("/v1/topics/capped");
  ASSERT_EQ(topic.status, 200u);
  EXPECT_EQ(topic.json()["settings"]["max_backlog_messages"], 3);
  auto got = client().post("/v1/consume", consume_body("capped", "g", "w", 10));
  ASSERT_EQ(got.status, 200u) << got.body;
  // NDJSON: one line per message.
  EXPECT_EQ(std::count(got.body.begin(), got.body.end(), '\n'), 2) << "the batch was refused whole";
}

}  // namespace
}  // namespace onceq::itest
