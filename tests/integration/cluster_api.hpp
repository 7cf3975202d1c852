#pragma once

// The broker's HTTP API spoken to the nodes of a cluster, for the cluster
// tests: one keep-alive host_client per node, single attempts at one node,
// or attempts at random nodes of a set, retried after no answer, 503 or
// 429 (the same request, so the same Idempotency-Key) until a deadline.
//
// Thread safety: none; one cluster_api per thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_support.hpp"
#include "http_client.hpp"

namespace onceq::itest {

class cluster_api {
 public:
  // One client per member; requests time out after timeout.
  cluster_api(const std::vector<cluster_member>& members, std::chrono::milliseconds timeout,
              std::uint64_t seed = 1);

  int size() const { return static_cast<int>(clients_.size()); }
  std::vector<int> all() const;
  std::vector<int> all_but(int node) const;

  // One attempt at node i; nullopt when there was no answer.
  std::optional<http_response> send(int i, std::string_view method, std::string_view target,
                                    const nlohmann::json& body = nullptr,
                                    const header_list& headers = {});
  // Attempts at random nodes of `nodes` until an answer other than 503/429
  // or the deadline (then the last answer, or nullopt). `last_node` names
  // the node that gave the returned answer.
  std::optional<http_response> send_retry(
      const std::vector<int>& nodes, std::string_view method, std::string_view target,
      const nlohmann::json& body = nullptr, const header_list& headers = {},
      std::chrono::milliseconds limit = std::chrono::seconds(20));
  int last_node() const { return last_node_; }

  // Creates topic (2 partitions, 10 s leases, then `settings`' fields)
  // through any node, retrying through elections; with a group, makes the
  // group exist too (one consume of nothing), so that nothing acked later
  // may go before the group is known.
  ::testing::AssertionResult create_topic(
      std::string_view topic, std::string_view group = {},
      const nlohmann::json& settings = nlohmann::json::object());

  // Consumes through `nodes` (lease 10 s) and acks every message, until
  // the group's backlog and inflight are 0 in three checks in a row or
  // `limit` passed. Returns deliveries per value; unexpected answers are
  // appended to errors. drained() says whether it ended drained.
  std::map<std::string, int> drain(const std::vector<int>& nodes, std::string_view topic,
                                   std::string_view group, std::chrono::milliseconds limit,
                                   std::vector<std::string>& errors);
  bool drained() const { return drained_; }

  // POST /v1/produce of one message: value = id, envelope.idempotency_key =
  // key, Idempotency-Key: id.
  static nlohmann::json produce_body(std::string_view topic, const std::string& id,
                                     const std::string& key);
  static header_list produce_headers(const std::string& id) { return {{"Idempotency-Key", id}}; }
  // POST /v1/ack body for a consumed message (committing its key with
  // result when result is not null).
  static nlohmann::json ack_body(std::string_view topic, std::string_view group,
                                 std::string_view owner, const nlohmann::json& message,
                                 const nlohmann::json& result);

 private:
  std::vector<std::unique_ptr<host_client>> clients_;
  std::mt19937_64 rng_;
  int last_node_ = -1;
  bool drained_ = false;
};

}  // namespace onceq::itest
