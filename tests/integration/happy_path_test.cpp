// End-to-end happy path: topics, produce, consume, ack, stats.

#include <set>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

class happy_path : public onceq_test {};

TEST_F(happy_path, health_version_and_request_id) {
  auto res = client().get("/v1/healthz");
  ASSERT_EQ(res.status, 200u);
  EXPECT_EQ(res.json(), json({{"status", "ok"}}));
  EXPECT_FALSE(res.header("X-Request-Id").empty());

  res = client().get("/v1/healthz", {{"X-Request-Id", "it-req-42"}});
  EXPECT_EQ(res.header("X-Request-Id"), "it-req-42");

  res = client().get("/v1/version");
  ASSERT_EQ(res.status, 200u);
  auto v = res.json();
  EXPECT_TRUE(v.at("version").is_string());
  EXPECT_TRUE(v.at("commit").is_string());
  EXPECT_EQ(v.at("wal_enabled"), true);
}

TEST_F(happy_path, produce_consume_ack_stats) {
  auto res = client().post("/v1/topics", {{"name", "orders"}, {"partitions", 2}});
  ASSERT_EQ(res.status, 201u) << res.body;
  EXPECT_EQ(res.json(), json({{"status", "created"}, {"name", "orders"}, {"partitions", 2}}));
  // Same settings again: idempotent; different settings: 409.
  res = client().post("/v1/topics", {{"name", "orders"}, {"partitions", 2}});
  EXPECT_EQ(res.status, 201u) << res.body;
  res = client().post("/v1/topics", {{"name", "orders"}, {"partitions", 3}});
  EXPECT_TRUE(is_error(res, 409, "ALREADY_EXISTS"));
  create_topic("audit");

  res = client().get("/v1/topics");
  ASSERT_EQ(res.status, 200u);
  EXPECT_EQ(res.json(), json({{"topics", {"audit", "orders"}}}));

  const json envelope = {{"tenant_id", "acme"},
                         {"run_id", "run-1"},
                         {"headers", {{"trace", "abc"}, {"x-custom", "1"}}}};
  auto p1 = produce("orders", "v1", "k1", envelope);
  auto p2 = produce("orders", "v2", "k2");
  auto p3 = produce("orders", "v3", std::nullopt, json{{"partition_override", 1}});
  for (const auto& p : {p1, p2, p3}) {
    ASSERT_EQ(p.at("status"), "produced");
    EXPECT_EQ(p.at("topic"), "orders");
    EXPECT_EQ(p.at("duplicate"), false);
    EXPECT_TRUE(p.at("partition").is_number_integer());
    EXPECT_TRUE(p.at("offset").is_number_integer());
    EXPECT_GE(p.at("partition").get<int>(), 0);
    EXPECT_LT(p.at("partition").get<int>(), 2);
  }
  EXPECT_EQ(p3.at("partition"), 1);
  // The same key always lands in the same partition.
  EXPECT_EQ(produce("orders", "v1b", "k1").at("partition"), p1.at("partition"));

  const auto before = now_ms();
  res = client().post("/v1/consume", {{"topic", "orders"},
                                      {"group", "g1"},
                                      {"owner", "alice"},
                                      {"max_messages", 10},
                                      {"lease_ms", 30000}});
  ASSERT_EQ(res.status, 200u) << res.body;
  EXPECT_NE(res.header("Content-Type").find("application/x-ndjson"), std::string::npos)
      << res.header("Content-Type");
  EXPECT_FALSE(res.header("X-Request-Id").empty());
  auto msgs = res.ndjson();
  ASSERT_EQ(msgs.size(), 4u) << res.body;

  std::set<std::string> values;
  std::set<std::pair<int, std::int64_t>> positions;
  for (const auto& m : msgs) {
    for (const char* field : {"topic", "partition", "offset", "attempts", "key", "value",
                              "last_error", "envelope", "lease_expires_at_ms"}) {
      EXPECT_TRUE(m.contains(field)) << "missing " << field << " in " << m.dump();
    }
    EXPECT_EQ(m.at("topic"), "orders");
    EXPECT_EQ(m.at("attempts"), 1);
    EXPECT_EQ(m.at("last_error"), "");
    EXPECT_GE(m.at("lease_expires_at_ms").get<std::int64_t>(), before + 29'000);
    EXPECT_LE(m.at("lease_expires_at_ms").get<std::int64_t>(), now_ms() + 31'000);
    values.insert(m.at("value").get<std::string>());
    positions.emplace(m.at("partition").get<int>(), m.at("offset").get<std::int64_t>());
    if (m.at("value") == "v1") {
      EXPECT_EQ(m.at("key"), "k1");
      EXPECT_EQ(m.at("envelope"), envelope);  // echoed as sent
      EXPECT_EQ(m.at("partition"), p1.at("partition"));
      EXPECT_EQ(m.at("offset"), p1.at("offset"));
    }
    if (m.at("value") == "v2") {
      EXPECT_EQ(m.at("key"), "k2");
    }
  }
  EXPECT_EQ(values, (std::set<std::string>{"v1", "v1b", "v2", "v3"}));
  EXPECT_EQ(positions.size(), 4u);  // (partition, offset) unique

  // Nothing left for the group while the leases run.
  EXPECT_TRUE(consume("orders", "g1", "bob", 10).empty());
  // Another group sees every message (fan-out), here via GET and query parameters.
  res = client().get("/v1/consume?topic=orders&group=g2&owner=carol&max_messages=10");
  ASSERT_EQ(res.status, 200u) << res.body;
  EXPECT_EQ(res.ndjson().size(), 4u);

  const json& first = msgs[0];
  res = ack("orders", "g1", "alice", first);
  EXPECT_EQ(res.status, 204u) << res.body;
  EXPECT_TRUE(res.body.empty());
  res = ack("orders", "g1", "alice", first);  // idempotent
  EXPECT_EQ(res.status, 204u) << res.body;
  res = ack("orders", "g1", "bob", first);  // not the owner
  EXPECT_TRUE(is_error(res, 409, "FAILED_PRECONDITION"));
  res = ack("orders", "g1", "bob", msgs[1]);  // leased to alice, not bob
  EXPECT_TRUE(is_error(res, 409, "FAILED_PRECONDITION"));
  res = ack("orders", "g1", "alice", msgs[1]);  // still alice's: the bob attempt changed nothing
  EXPECT_EQ(res.status, 204u) << res.body;

  auto info = topic_info("orders");
  EXPECT_EQ(info.at("name"), "orders");
  EXPECT_EQ(info.at("partitions"), 2);
  expect_fields(info.at("settings"), {{"lease_ms", 30000},
                                      {"max_attempts", 0},
                                      {"backoff_ms", 0},
                                      {"max_backoff_ms", 0},
                                      {"key_ttl_ms", 604800000},
                                      {"dedup_window_ms", 120000},
                                      {"retention_ms", 604800000}});
  expect_fields(info.at("groups").at("g1"), {{"backlog", 0},
                                             {"inflight", 2},
                                             {"acked", 2},
                                             {"auto_acked", 0},
                                             {"redelivered", 0},
                                             {"dead_lettered", 0}});
  EXPECT_EQ(info.at("groups").at("g2").at("inflight"), 4);

  // A group that never consumed sees the whole backlog once it does.
  EXPECT_EQ(drain("orders", "g3", "dave").size(), 4u);

  // /metrics answers Prometheus text.
  res = client().get("/metrics");
  EXPECT_EQ(res.status, 200u);
  EXPECT_NE(res.body.find("orders"), std::string::npos);
  // Under --fsync always every answer above waited for a WAL sync.
  auto value_of = [&](const std::string& series) -> long long {
    const auto at = res.body.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stoll(res.body.substr(at + series.size() + 2));
  };
  // A node of a cluster does not sync its store: the Raft log is durable.
  if (!cluster_) {
    EXPECT_GE(value_of(R"(onceq_wal_sync_duration_seconds_bucket{le="+Inf"})"), 1) << res.body;
  } else {
    EXPECT_NE(res.body.find("onceq_raft_commit_index{shard=\"0\"}"), std::string::npos);
  }
  EXPECT_EQ(value_of(R"(onceq_wal_sync_duration_seconds_bucket{le="+Inf"})"),
            value_of("onceq_wal_sync_duration_seconds_count"));
  EXPECT_GE(value_of("onceq_wal_sync_waiters_total"),
            value_of("onceq_wal_sync_duration_seconds_count"));

  // Delete a topic: gone from the list, its URL 404s, produce to it 400s.
  res = client().request("DELETE", "/v1/topics/audit");
  EXPECT_EQ(res.status, 204u) << res.body;
  EXPECT_EQ(client().get("/v1/topics").json(), json({{"topics", {"orders"}}}));
  EXPECT_TRUE(is_error(client().get("/v1/topics/audit"), 404, "NOT_FOUND"));
  EXPECT_TRUE(is_error(client().post("/v1/produce", {{"topic", "audit"}, {"value", "x"}}), 400,
                       "INVALID_ARGUMENT"));
}

TEST_F(happy_path, topic_lease_is_the_consumers_default) {
  create_topic("short", 1, {{"lease_ms", 1234}});
  produce("short", "x");
  const auto before = now_ms();
  auto msgs = consume("short", "g", "o", 1);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_GE(msgs[0].at("lease_expires_at_ms").get<std::int64_t>(), before + 1234);
  EXPECT_LE(msgs[0].at("lease_expires_at_ms").get<std::int64_t>(), now_ms() + 1234);

  // A topic lease the server accepts must work for consumers that give none.
  auto res = client().post("/v1/topics", {{"name", "long"}, {"lease_ms", 7'200'000}});
  if (res.status == 201) {
    produce("long", "y");
    res = client().post("/v1/consume", consume_body("long", "g", "o", 1));
    EXPECT_EQ(res.status, 200u) << "topic lease_ms 7200000 was accepted but consume without "
                                   "lease_ms fails: "
                                << res.body;
  } else {
    EXPECT_TRUE(is_error(res, 400, "INVALID_ARGUMENT"));
  }
}

TEST_F(happy_path, batch_produce_and_batch_ack) {
  create_topic("batch", 1);
  json messages = json::array();
  for (int i = 0; i < 5; ++i) messages.push_back({{"value", numbered("b", i)}});
  auto res = client().post("/v1/produce", {{"topic", "batch"}, {"messages", messages}});
  ASSERT_EQ(res.status, 200u) << res.body;
  auto reply = res.json();
  EXPECT_EQ(reply.at("status"), "produced");
  ASSERT_EQ(reply.at("results").size(), 5u);
  for (std::size_t i = 1; i < 5; ++i) {
    EXPECT_GT(reply["results"][i]["offset"].get<std::int64_t>(),
              reply["results"][i - 1]["offset"].get<std::int64_t>());
    EXPECT_EQ(reply["results"][i]["duplicate"], false);
  }

  auto msgs = consume("batch", "g", "o", 10);
  ASSERT_EQ(msgs.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(msgs[i].at("value"), numbered("b", i));  // partition order
  }
  json acks = json::array();
  for (const auto& m : msgs)
    acks.push_back({{"partition", m["partition"]}, {"offset", m["offset"]}});
  acks.push_back({{"partition", 0}, {"offset", 999}});  // never delivered
  res = client().post("/v1/ack",
                      {{"topic", "batch"}, {"group", "g"}, {"owner", "o"}, {"acks", acks}});
  ASSERT_EQ(res.status, 200u) << res.body;
  auto results = res.json().at("results");
  ASSERT_EQ(results.size(), 6u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(results[i].at("status"), "acked") << results[i];
  EXPECT_EQ(results[5].at("status"), "error");
  EXPECT_EQ(results[5].at("error"), "FAILED_PRECONDITION");
  EXPECT_EQ(topic_info("batch").at("groups").at("g").at("acked"), 5);
}

}  // namespace
}  // namespace onceq::itest
