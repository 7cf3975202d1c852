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
#include "cluster_fixture.hpp"
#include "cluster_support.hpp"

namespace onceq::itest {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view k_topic = "cu";

class cluster_catchup : public cluster_test {
 protected:
  cluster_catchup() : cluster_test(k_topic) {}

  void SetUp() override {
    local_cluster::options o;
    o.members = free_loopback_members(3, 42);
    o.extra_args = {"--raft-snapshot-every", "64"};
    start_cluster(std::move(o), 5);
  }
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

  auto delivered = drain_expecting_once({F, O}, k_topic, k_group, answered);
  std::cout << "catch-up: " << answered.size() << " answered writes, " << delivered.size()
            << " distinct messages delivered after the old leader's kill\n";
}

}  // namespace
}  // namespace onceq::itest
