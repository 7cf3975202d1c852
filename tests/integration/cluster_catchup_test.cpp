// A follower far behind catches up: a 3-node cluster on 127.0.0.1 with
// snapshots every 64 entries; one follower is down while hundreds of
// writes go through the other two (so the entries it misses are compacted
// into snapshots), then restarts and must reach the leader's commit index
// (measured). It then must carry writes: with the other follower down, the
// leader commits only with its acknowledgement; and with the old leader
// killed too, it and the follower that missed those last writes elect a
// leader and every answered write is consumed exactly once.

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_api.hpp"
#include "cluster_support.hpp"

namespace onceq::itest {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr std::string_view k_topic = "cu";
constexpr std::string_view k_group = "g";

class cluster_catchup : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);
    local_cluster::options o;
    o.members = free_loopback_members(3, 42);
    o.extra_args = {"--raft-snapshot-every", "64"};
    cluster_ = std::make_unique<local_cluster>(std::move(o));
    std::vector<cluster_member> members;
    for (std::size_t i = 0; i < cluster_->size(); ++i) members.push_back(cluster_->member(i));
    api_ = std::make_unique<cluster_api>(members, 3s, 5);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) {
      std::cerr << cluster_->log_tails() << "\n";
      cluster_->keep_root();  // the nodes' full logs and data
    }
    api_.reset();
    cluster_.reset();
  }

  // The topic's shard as node i reports it.
  std::optional<cluster_shard_status> shard_at(int i) {
    auto s = cluster_->status(static_cast<std::size_t>(i), 2s);
    const auto* sh = s ? s->shard_of_topic(k_topic) : nullptr;
    if (sh == nullptr) return std::nullopt;
    return *sh;
  }

  std::unique_ptr<local_cluster> cluster_;
  std::unique_ptr<cluster_api> api_;
};

TEST_F(cluster_catchup, follower_far_behind_catches_up_by_snapshot_and_then_carries_writes) {
  ASSERT_FALSE(cluster_->wait_for_leader("", 30s).empty());
  ASSERT_TRUE(api_->create_topic(k_topic, k_group));
  const std::string leader = cluster_->wait_for_leader(k_topic, 20s);
  ASSERT_FALSE(leader.empty());
  const int L = cluster_->index_of(leader);
  const int F = (L + 1) % 3;  // the follower that falls behind
  const int O = (L + 2) % 3;  // the other follower

  std::map<std::string, bool> answered;
  auto produce = [&](const std::vector<int>& nodes, const std::string& id) {
    auto r = api_->send_retry(nodes, "POST", "/v1/produce",
                              cluster_api::produce_body(k_topic, id, "k-" + id),
                              cluster_api::produce_headers(id), 20s);
    if (r && r->status == 200) answered[id] = true;
    return r;
  };

  auto f_before = shard_at(F);
  ASSERT_TRUE(f_before.has_value());
  cluster_->kill9(static_cast<std::size_t>(F));
  const std::vector<int> up = {L, O};
  const auto t_writes = std::chrono::steady_clock::now();
  for (int i = 0; i < 400; ++i) {
    const std::string id = "behind-" + std::to_string(i);
    auto r = produce(up, id);
    ASSERT_TRUE(r && r->status == 200) << id << ": " << (r ? r->body : "no answer");
  }
  std::cout << "catch-up: 400 writes with " << cluster_->member(F).id << " down in "
            << ms_since(t_writes) << " ms\n";
  auto lead = shard_at(L);
  ASSERT_TRUE(lead.has_value());
  const std::uint64_t target = lead->commit_index;
  // The scenario holds only if the leader compacted what F misses: its
  // newest snapshot (raft/<group>/snapshot-TERM-INDEX-TIME, cluster/README.md)
  // minus the 64 entries it keeps must lie past F's last entry.
  std::uint64_t snapshot_index = 0;
  {
    std::error_code ec;
    const auto dir = fs::path(cluster_->node(static_cast<std::size_t>(L)).data_dir()) / "raft" /
                     std::to_string(lead->shard);
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      unsigned long long term = 0, index = 0, time = 0;
      char tail = 0;
      if (std::sscanf(name.c_str(), "snapshot-%llu-%llu-%llu%c", &term, &index, &time, &tail) ==
          3) {
        snapshot_index = std::max<std::uint64_t>(snapshot_index, index);
      }
    }
    ASSERT_FALSE(ec) << dir << ": " << ec.message();
  }
  ASSERT_GT(snapshot_index, f_before->applied_index + 64)
      << "the leader kept every entry " << cluster_->member(F).id
      << " misses: it would catch up without a snapshot";

  const auto restarted_at = std::chrono::steady_clock::now();
  cluster_->restart(static_cast<std::size_t>(F));
  std::uint64_t applied = 0;
  while (ms_since(restarted_at) < 60'000) {
    auto f = shard_at(F);
    if (f) applied = f->applied_index;
    if (applied >= target) break;
    std::this_thread::sleep_for(100ms);
  }
  const long long catchup_ms = ms_since(restarted_at);
  ASSERT_GE(applied, target) << cluster_->member(F).id << " applied " << applied << " of " << target
                             << " within 60 s of its restart";
  std::cout << "catch-up: " << cluster_->member(F).id << " applied index " << target
            << " (the leader's commit index) " << catchup_ms << " ms after its restart\n";
  RecordProperty("catchup_ms", std::to_string(catchup_ms));

  // With the other follower down, the leader commits only with F.
  cluster_->kill9(static_cast<std::size_t>(O));
  for (int i = 0; i < 20; ++i) {
    const std::string id = "with-f-" + std::to_string(i);
    auto r = produce({L, F}, id);
    ASSERT_TRUE(r && r->status == 200) << id << ": " << (r ? r->body : "no answer");
  }
  // Only L and F hold those 20: kill L, bring O back; F must lead (O's log
  // is older) and hand everything out.
  cluster_->kill9(static_cast<std::size_t>(L));
  cluster_->restart(static_cast<std::size_t>(O));
  const std::string new_leader = cluster_->wait_for_leader(k_topic, 30s);
  ASSERT_FALSE(new_leader.empty()) << "no leader after the old one was killed";
  EXPECT_EQ(new_leader, cluster_->member(F).id)
      << "only " << cluster_->member(F).id << " holds the last writes, so only it may lead";

  std::vector<std::string> errors;
  auto delivered = api_->drain({F, O}, k_topic, k_group, 60s, errors);
  EXPECT_TRUE(api_->drained()) << "the group was not drained within 60 s";
  for (const auto& e : errors) ADD_FAILURE() << e;
  std::size_t missing = 0;
  for (const auto& [id, ok] : answered) {
    if (delivered[id] != 1) ++missing;
    EXPECT_EQ(delivered[id], 1) << id << " delivered " << delivered[id] << " times";
  }
  EXPECT_EQ(missing, 0u);
  std::cout << "catch-up: " << answered.size() << " answered writes, " << delivered.size()
            << " distinct messages delivered after the old leader's kill\n";
}

}  // namespace
}  // namespace onceq::itest
