#pragma once

// The fixture of the cluster tests (cluster_*_test.cpp): a local_cluster,
// a cluster_api over its members, and on a failure the nodes' log tails
// printed and their whole root (logs, data) kept.

#include <signal.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_api.hpp"
#include "cluster_support.hpp"

namespace onceq::itest {

using json = nlohmann::json;
using namespace std::chrono_literals;

class cluster_test : public ::testing::Test {
 protected:
  // The group every cluster test consumes as.
  static constexpr std::string_view k_group = "g";

  // topic: the one topic of the test, whose shard shard_at() reports.
  explicit cluster_test(std::string_view topic) : topic_(topic) { ::signal(SIGPIPE, SIG_IGN); }

  void TearDown() override {
    if (HasFailure() && cluster_) {
      std::cerr << cluster_->log_tails() << "\n";
      cluster_->keep_root();  // the nodes' full logs and data
    }
    api_.reset();
    cluster_.reset();
  }

  // Starts the cluster of o and an api (3 s per request) over its members;
  // seed picks the api's random nodes.
  void start_cluster(local_cluster::options o, std::uint64_t seed) {
    cluster_ = std::make_unique<local_cluster>(std::move(o));
    // Each shard handed to its preferred leader, once, before the test,
    // when it can be: a test that starts a node on a disk that is too small
    // may never see its preferred leader take over (best effort, 15 s).
    if (!cluster_->wait_settled(std::chrono::seconds(15))) {
      std::cerr << "cluster_test: the placement did not settle in 15 s; going on\n";
    }
    api_ = std::make_unique<cluster_api>(members(), std::chrono::seconds(3), seed);
  }

  std::vector<cluster_member> members() const {
    std::vector<cluster_member> out;
    for (std::size_t i = 0; i < cluster_->size(); ++i) out.push_back(cluster_->member(i));
    return out;
  }

  // The shard of the test's topic as node i reports it (nullopt when it does not
  // answer). A node that has not applied the topic's creation does not list
  // it; with one shard (a cluster's default) it is that one.
  std::optional<cluster_shard_status> shard_at(int i) {
    auto s = cluster_->status(static_cast<std::size_t>(i), std::chrono::seconds(2));
    if (!s) return std::nullopt;
    const auto* sh = s->shard_of_topic(topic_);
    if (sh == nullptr && s->shards.size() == 1) sh = &s->shards.front();
    if (sh == nullptr) return std::nullopt;
    return *sh;
  }

  // Drains topic's group through nodes (acking every message) and expects
  // each key of answered (the writes answered 2xx) delivered exactly once.
  // Returns the deliveries per value.
  template <class Answered>
  std::map<std::string, int> drain_expecting_once(const std::vector<int>& nodes,
                                                  std::string_view topic, std::string_view group,
                                                  const Answered& answered) {
    std::vector<std::string> errors;
    auto delivered = api_->drain(nodes, topic, group, std::chrono::seconds(60), errors);
    EXPECT_TRUE(api_->drained()) << "the group was not drained within 60 s";
    for (const auto& e : errors) ADD_FAILURE() << e;
    for (const auto& entry : answered) {
      const std::string& id = entry.first;
      EXPECT_EQ(delivered[id], 1) << id << " (answered 2xx) delivered " << delivered[id]
                                  << " times";
    }
    return delivered;
  }

  std::string_view topic_;
  std::unique_ptr<local_cluster> cluster_;
  std::unique_ptr<cluster_api> api_;
};

}  // namespace onceq::itest
