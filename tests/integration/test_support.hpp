#pragma once

// Shared fixture and helpers for the integration tests: one real onceqd per
// test (see server_process.hpp) and a keep-alive client to it.

#include <chrono>
#include <cstdint>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>

#include "cluster_support.hpp"
#include "http_client.hpp"
#include "request_bodies.hpp"
#include "server_process.hpp"

namespace onceq::itest {

using json = nlohmann::json;
using namespace std::chrono_literals;

inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// prefix followed by n in decimal ("m" + std::to_string(n) trips a GCC 12
// -Wrestrict false positive at -O3).
inline std::string numbered(std::string_view prefix, long long n) {
  std::string out(prefix);
  out += std::to_string(n);
  return out;
}

using client::url_encode;

// Checks the spec's error shape: status, {"error":code,"message":str} and an
// X-Request-Id header.
inline ::testing::AssertionResult is_error(const http_response& res, unsigned status,
                                           std::string_view code) {
  if (res.status != status) {
    return ::testing::AssertionFailure()
           << "status " << res.status << " (want " << status << "), body: " << res.body;
  }
  if (!res.has_header("X-Request-Id") || res.header("X-Request-Id").empty()) {
    return ::testing::AssertionFailure() << "no X-Request-Id header";
  }
  json body;
  try {
    body = res.json();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "body is not JSON: '" << res.body << "'";
  }
  if (!body.is_object() || !body.contains("error") || body["error"] != code) {
    return ::testing::AssertionFailure() << "error code (want " << code << "), body: " << res.body;
  }
  if (!body.contains("message") || !body["message"].is_string()) {
    return ::testing::AssertionFailure() << "no string \"message\", body: " << res.body;
  }
  return ::testing::AssertionSuccess();
}

// Expects every field of want in object, with want's value.
inline void expect_fields(const json& object, const json& want) {
  for (const auto& [name, value] : want.items()) {
    EXPECT_EQ(object.value(name, json()), value) << "field " << name << " of " << object.dump();
  }
}

// The value of a series in GET /metrics (labels included in name, e.g.
// onceq_shard_topics{shard="0"}), or -1 if absent.
inline double metric(http_client& c, std::string_view name) {
  auto res = c.get("/metrics");
  if (res.status != 200) return -1;
  std::string prefix = std::string(name) + " ";
  for (std::size_t pos = 0; pos < res.body.size();) {
    auto end = res.body.find('\n', pos);
    if (end == std::string::npos) end = res.body.size();
    std::string_view line(res.body.data() + pos, end - pos);
    if (line.starts_with(prefix)) return std::stod(std::string(line.substr(prefix.size())));
    pos = end + 1;
  }
  return -1;
}

// POSTs body to target on a thread of its own, through the client that
// make_client() returns there (a std::unique_ptr<http_client>): the answer
// and how long it took (a long poll).
template <class MakeClient>
auto timed_post_async(MakeClient make_client, std::string target, json body) {
  return std::async(std::launch::async, [make_client = std::move(make_client),
                                         target = std::move(target), body = std::move(body)] {
    auto c = make_client();
    const auto t0 = std::chrono::steady_clock::now();
    auto res = c->post(target, body);
    return std::make_pair(res, std::chrono::steady_clock::now() - t0);
  });
}

class onceq_test : public ::testing::Test {
 protected:
  // ONCEQ_IT_CLUSTER=1 (ctest integration.cluster_contract): the test talks
  // to a node of a 3-node cluster that does not lead the shard, so that
  // every command is forwarded to the leader and the contract is the
  // cluster's. Only tests that start the default server may run so.
  void SetUp() override {
    if (std::getenv("ONCEQ_IT_CLUSTER") != nullptr) return start_cluster();
    start_server({});
  }

  void start_server(server_process::options opts) {
    server_ = std::make_unique<server_process>(std::move(opts));
    client_ = std::make_unique<http_client>(server_->port());
  }

  void start_cluster() {
    local_cluster::options o;
    o.members = free_loopback_members(3, static_cast<std::uint64_t>(::getpid()));
    // A new leader's grace (docs/REPLICATION.md section 4) shortens leases
    // by design: the single node's bound lease_expires_at >= now + lease
    // holds only without it.
    o.extra_args = {"--leader-grace-ms", "0"};
    cluster_ = std::make_unique<local_cluster>(std::move(o));
    // The placement hands each shard to its preferred leader once: a
    // long-poll parked on the old leader would end empty.
    if (!cluster_->wait_settled(30s)) {
      std::cerr << "onceq_test: the placement did not settle in 30 s; going on\n";
    }
    const std::string leader = cluster_->wait_for_leader({}, 30s);
    ASSERT_FALSE(leader.empty()) << cluster_->log_tails();
    std::size_t follower = 0;
    while (cluster_->member(follower).id == leader) ++follower;
    cluster_port_ = cluster_->member(follower).http_port;
    client_ = std::make_unique<http_client>(cluster_port_);
  }
  // After a restart the port changes: reconnect the default client.
  void restart_server() {
    client_.reset();
    server_->start();
    client_ = std::make_unique<http_client>(server_->port());
  }

  http_client& client() { return *client_; }
  std::uint16_t port() const { return cluster_ ? cluster_port_ : server_->port(); }

  void create_topic(const std::string& name, int partitions = 1, json extra = json::object()) {
    json body = extra;
    body["name"] = name;
    body["partitions"] = partitions;
    auto res = client().post("/v1/topics", body);
    ASSERT_EQ(res.status, 201u) << res.body;
  }

  // Produces one message; returns the answer's JSON (status checked).
  json produce(http_client& c, const std::string& topic, const std::string& value,
               std::optional<std::string> key = std::nullopt,
               std::optional<json> envelope = std::nullopt) {
    json body = {{"topic", topic}, {"value", value}};
    if (key) body["key"] = *key;
    if (envelope) body["envelope"] = *envelope;
    auto res = c.post("/v1/produce", body);
    EXPECT_EQ(res.status, 200u) << res.body;
    return res.status == 200 ? res.json() : json();
  }
  json produce(const std::string& topic, const std::string& value,
               std::optional<std::string> key = std::nullopt,
               std::optional<json> envelope = std::nullopt) {
    return produce(client(), topic, value, std::move(key), std::move(envelope));
  }

  // Long-poll consume; returns the delivered messages (status checked).
  std::vector<json> consume(http_client& c, const std::string& topic, const std::string& group,
                            const std::string& owner, int max_messages,
                            std::optional<std::int64_t> lease_ms = std::nullopt,
                            std::int64_t wait_ms = 0) {
    json body = consume_body(topic, group, owner, max_messages, {{"wait_ms", wait_ms}});
    if (lease_ms) body["lease_ms"] = *lease_ms;
    auto res = c.post("/v1/consume", body);
    EXPECT_EQ(res.status, 200u) << res.body;
    if (res.status != 200) return {};
    return res.ndjson();
  }
  std::vector<json> consume(const std::string& topic, const std::string& group,
                            const std::string& owner, int max_messages,
                            std::optional<std::int64_t> lease_ms = std::nullopt,
                            std::int64_t wait_ms = 0) {
    return consume(client(), topic, group, owner, max_messages, lease_ms, wait_ms);
  }

  http_response ack(http_client& c, const std::string& topic, const std::string& group,
                    const std::string& owner, const json& msg,
                    std::optional<json> result = std::nullopt) {
    return c.post("/v1/ack", delivery_body(topic, group, owner, msg,
                                           result ? json{{"result", *result}} : json::object()));
  }
  http_response ack(const std::string& topic, const std::string& group, const std::string& owner,
                    const json& msg, std::optional<json> result = std::nullopt) {
    return ack(client(), topic, group, owner, msg, std::move(result));
  }

  // Consumes everything currently available to group (lease 60 s), at most
  // max_rounds batches of 1000.
  std::vector<json> drain(const std::string& topic, const std::string& group,
                          const std::string& owner, int max_rounds = 100) {
    std::vector<json> all;
    for (int i = 0; i < max_rounds; ++i) {
      auto batch = consume(topic, group, owner, 1000, 60'000);
      if (batch.empty()) break;
      all.insert(all.end(), batch.begin(), batch.end());
    }
    return all;
  }

  json topic_info(const std::string& name) {
    auto res = client().get("/v1/topics/" + name);
    EXPECT_EQ(res.status, 200u) << res.body;
    return res.status == 200 ? res.json() : json();
  }

  std::unique_ptr<server_process> server_;
  std::unique_ptr<local_cluster> cluster_;  // ONCEQ_IT_CLUSTER
  std::uint16_t cluster_port_ = 0;
  std::unique_ptr<http_client> client_;
};

}  // namespace onceq::itest
