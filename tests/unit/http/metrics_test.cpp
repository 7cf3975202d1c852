#include "http/metrics.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace onceq::http {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsTest, HistogramIsCumulative) {
  http_metrics m({"/v1/produce", "/v1/ack"});
  m.observe(0, 0.0002, 200);  // le 0.00025
  m.observe(0, 0.003, 200);   // le 0.005
  m.observe(0, 100.0, 500);   // +Inf only
  std::string out;
  m.render(out);
  EXPECT_TRUE(has_line(out, "# TYPE onceq_http_request_duration_seconds histogram"));
  EXPECT_TRUE(has_line(
      out, R"(onceq_http_request_duration_seconds_bucket{route="/v1/produce",le="0.0001"} 0)"));
  EXPECT_TRUE(has_line(
      out, R"(onceq_http_request_duration_seconds_bucket{route="/v1/produce",le="0.00025"} 1)"));
  EXPECT_TRUE(has_line(
      out, R"(onceq_http_request_duration_seconds_bucket{route="/v1/produce",le="0.005"} 2)"));
  EXPECT_TRUE(has_line(
      out, R"(onceq_http_request_duration_seconds_bucket{route="/v1/produce",le="2.5"} 2)"));
  EXPECT_TRUE(has_line(
      out, R"(onceq_http_request_duration_seconds_bucket{route="/v1/produce",le="+Inf"} 3)"));
  EXPECT_TRUE(has_line(out, R"(onceq_http_request_duration_seconds_count{route="/v1/produce"} 3)"));
  EXPECT_TRUE(has_line(out, R"(onceq_http_request_duration_seconds_count{route="/v1/ack"} 0)"));
  EXPECT_TRUE(has_line(out, R"(onceq_http_responses_total{route="/v1/produce",code="200"} 2)"));
  EXPECT_TRUE(has_line(out, R"(onceq_http_responses_total{route="/v1/produce",code="500"} 1)"));
  EXPECT_EQ(m.count(0), 3u);
}

TEST(MetricsTest, BrokerFamilies) {
  topic_info t;
  t.name = "orders";
  t.produced = 10;
  t.produce_duplicates = 2;
  group_stats g;
  g.delivered = 9;
  g.redelivered = 1;
  g.acked = 7;
  g.auto_acked = 1;
  g.nacked = 1;
  g.lease_expired = 1;
  g.dead_lettered = 0;
  g.stale_acks_rejected = 3;
  g.backlog = 2;
  g.inflight = 1;
  g.oldest_unacked_produced_at_ms = 1'000'000;
  t.groups["g\"1"] = g;
  std::string out;
  render_broker_metrics(out, {t}, 1'002'500);
  EXPECT_TRUE(has_line(out, R"(onceq_produced_total{topic="orders"} 10)"));
  EXPECT_TRUE(has_line(out, R"(onceq_produce_duplicates_total{topic="orders"} 2)"));
  EXPECT_TRUE(has_line(out, R"(onceq_delivered_total{topic="orders",group="g\"1"} 9)"));
  EXPECT_TRUE(has_line(out, R"(onceq_acked_total{topic="orders",group="g\"1"} 7)"));
  EXPECT_TRUE(has_line(out, R"(onceq_auto_acked_total{topic="orders",group="g\"1"} 1)"));
  EXPECT_TRUE(has_line(out, R"(onceq_stale_acks_rejected_total{topic="orders",group="g\"1"} 3)"));
  EXPECT_TRUE(has_line(out, R"(onceq_backlog{topic="orders",group="g\"1"} 2)"));
  EXPECT_TRUE(has_line(out, R"(onceq_inflight{topic="orders",group="g\"1"} 1)"));
  EXPECT_TRUE(
      has_line(out, R"(onceq_oldest_unacked_age_seconds{topic="orders",group="g\"1"} 2.5)"));
  EXPECT_TRUE(has_line(out, "# TYPE onceq_backlog gauge"));
  EXPECT_TRUE(has_line(out, "# TYPE onceq_lease_expired_total counter"));
}

TEST(MetricsTest, NothingUnackedIsZeroAge) {
  topic_info t;
  t.name = "t";
  t.groups["g"] = group_stats{};
  std::string out;
  render_broker_metrics(out, {t}, 5000);
  EXPECT_TRUE(has_line(out, R"(onceq_oldest_unacked_age_seconds{topic="t",group="g"} 0)"));
}

TEST(MetricsTest, WalSyncFamilies) {
  storage::sync_stats s;
  s.buckets[0] = 1;                                        // <= 50 µs
  s.buckets[2] = 3;                                        // <= 250 µs
  s.buckets[storage::sync_stats::k_bounds_ns.size()] = 1;  // above 1 s
  s.count = 5;
  s.sum_ns = 2'000'600'000;
  s.waiters = 12;
  std::string out;
  render_wal_sync_metrics(out, s);
  EXPECT_TRUE(has_line(out, "# TYPE onceq_wal_sync_duration_seconds histogram"));
  EXPECT_TRUE(has_line(out, R"(onceq_wal_sync_duration_seconds_bucket{le="5e-05"} 1)"));
  EXPECT_TRUE(has_line(out, R"(onceq_wal_sync_duration_seconds_bucket{le="0.0001"} 1)"));
  EXPECT_TRUE(has_line(out, R"(onceq_wal_sync_duration_seconds_bucket{le="0.00025"} 4)"));
  EXPECT_TRUE(has_line(out, R"(onceq_wal_sync_duration_seconds_bucket{le="1"} 4)"));
  EXPECT_TRUE(has_line(out, R"(onceq_wal_sync_duration_seconds_bucket{le="+Inf"} 5)"));
  EXPECT_TRUE(has_line(out, "onceq_wal_sync_duration_seconds_sum 2.0006"));
  EXPECT_TRUE(has_line(out, "onceq_wal_sync_duration_seconds_count 5"));
  EXPECT_TRUE(has_line(out, "# TYPE onceq_wal_sync_waiters_total counter"));
  EXPECT_TRUE(has_line(out, "onceq_wal_sync_waiters_total 12"));
}

// The HTTP and WAL histograms are one type: the same bucket bounds, in
// the same order, rendered the same way.
TEST(MetricsTest, HttpAndWalHistogramsShareTheirBuckets) {
  auto bounds = [](const std::string& text, const std::string& prefix) {
    std::vector<std::string> les;
    for (std::size_t at = text.find(prefix); at != std::string::npos;
         at = text.find(prefix, at + 1)) {
      const auto le = text.find("le=\"", at) + 4;
      les.push_back(text.substr(le, text.find('"', le) - le));
    }
    return les;
  };
  http_metrics m({"/v1/produce"});
  std::string http_out;
  m.render(http_out);
  std::string wal_out;
  render_wal_sync_metrics(wal_out, storage::sync_stats{});
  const auto http_les = bounds(http_out, "onceq_http_request_duration_seconds_bucket{");
  const auto wal_les = bounds(wal_out, "onceq_wal_sync_duration_seconds_bucket{");
  ASSERT_EQ(http_les.size(), latency_snapshot::k_bounds_ns.size() + 1);
  EXPECT_EQ(http_les, wal_les);
  EXPECT_EQ(http_les.front(), "5e-05");
  EXPECT_EQ(http_les.back(), "+Inf");
}

TEST(MetricsTest, EscapeLabel) {
  EXPECT_EQ(escape_label("a\\b\"c\nd"), R"(a\\b\"c\nd)");
}

}  // namespace
}  // namespace onceq::http
