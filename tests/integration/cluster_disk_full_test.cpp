// A follower whose disk is full does not stop the other two: a 3-node
// cluster on 127.0.0.1 where one follower's --data-dir is a small tmpfs
// that the test fills up. Writes through the two others keep being
// answered 2xx; once the space is back (the tmpfs grown, and the follower
// restarted if its shard stopped applying) it catches up, and every
// answered write is consumed exactly once.
// Needs root (mounts a tmpfs); skipped otherwise.

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
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
#include "tmpfs_mount.hpp"

namespace onceq::itest {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view k_topic = "df";
constexpr int k_full = 2;  // the member whose disk fills up

class cluster_disk_full : public cluster_test {
 protected:
  cluster_disk_full() : cluster_test(k_topic) {}

  void SetUp() override {
    if (!tmpfs_mount::can_mount()) {
      GTEST_SKIP() << "needs root to mount a small tmpfs as a node's data dir";
    }
    disk_ = std::make_unique<tmpfs_mount>("96M");
    ASSERT_TRUE(disk_->mounted()) << disk_->error();
    local_cluster::options o;
    o.members = free_loopback_members(3, 99);
    o.data_dirs = {"", "", disk_->path() + "/data"};
    start_cluster(std::move(o), 9);
  }

  void TearDown() override {
    cluster_test::TearDown();  // the nodes stop before their disk goes
    disk_.reset();
  }

  // Writes a file into the tmpfs until it is full; its size.
  std::size_t fill() {
    const std::string path = disk_->path() + "/filler";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return 0;
    const std::string chunk(1 << 16, 'f');
    std::size_t total = 0;
    for (;;) {
      const std::size_t n = std::fwrite(chunk.data(), 1, chunk.size(), f);
      total += n;
      if (n < chunk.size() || std::fflush(f) != 0) break;
    }
    std::fclose(f);
    return total;
  }

  std::unique_ptr<tmpfs_mount> disk_;
};

TEST_F(cluster_disk_full, follower_with_a_full_disk_does_not_stop_the_other_two) {
  ASSERT_FALSE(cluster_->wait_for_leader("", 30s).empty());
  ASSERT_TRUE(api_->create_topic(k_topic, k_group));
  // The node on the tmpfs must be a follower: if it leads, kill it and let
  // the others elect.
  std::string leader = cluster_->wait_for_leader(k_topic, 20s);
  if (cluster_->index_of(leader) == k_full) {
    cluster_->kill9(k_full);
    leader = cluster_->wait_for_leader(k_topic, 20s);
    cluster_->restart(k_full);
  }
  ASSERT_FALSE(leader.empty());
  ASSERT_NE(cluster_->index_of(leader), k_full);
  const std::vector<int> others = api_->all_but(k_full);

  std::map<std::string, bool> answered;
  // 32 KiB a message: raft_uv preallocates three 8 MiB segments, so the
  // follower feels its full disk only after ~25 MiB of entries.
  const std::string value(32768, 'v');
  long long slowest_ms = 0;
  auto produce = [&](const std::string& id) {
    json body = cluster_api::produce_body(k_topic, id, "k-" + id);
    body["envelope"]["headers"] = {{"pad", value}};
    const auto t = std::chrono::steady_clock::now();
    auto r = api_->send_retry(others, "POST", "/v1/produce", body, cluster_api::produce_headers(id),
                              20s);
    slowest_ms = std::max(slowest_ms, ms_since(t));
    if (r && r->status == 200) answered[id] = true;
    return r;
  };
  for (int i = 0; i < 20; ++i) {
    auto r = produce("before-" + std::to_string(i));
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  }

  const std::size_t filled = fill();
  std::cout << "disk-full: filled " << cluster_->member(k_full).id << "'s tmpfs with " << filled
            << " bytes\n";
  // Write until the follower is stuck (dead, or 100 entries behind twice in
  // a row), then 200 more: every one answered 2xx by the other two.
  const int leader_index = cluster_->index_of(leader);
  const auto t_full = std::chrono::steady_clock::now();
  int written = 0;
  int stuck_checks = 0;
  int more = -1;  // writes left once stuck
  std::string follower_state;
  while (more != 0 && written < 3000) {
    const std::string id = "full-" + std::to_string(written++);
    auto r = produce(id);
    ASSERT_TRUE(r.has_value()) << id << ": no answer";
    ASSERT_EQ(r->status, 200u) << id << ": " << r->body;
    if (more > 0) {
      --more;
      continue;
    }
    if (written % 50 != 0) continue;
    auto lead = shard_at(leader_index);
    auto f = cluster_->alive(k_full) ? shard_at(k_full) : std::nullopt;
    const bool dead = !cluster_->alive(k_full);
    const bool behind = lead && (!f || f->applied_index + 100 < lead->commit_index);
    stuck_checks = dead || behind ? stuck_checks + 1 : 0;
    if (stuck_checks >= 2) {
      auto health =
          dead ? std::nullopt : cluster_->request(k_full, "GET", "/v1/healthz", {}, {}, 2s);
      follower_state =
          dead ? std::string("dead")
               : "alive, applied " +
                     (f ? std::to_string(f->applied_index) + (f->failure.empty() ? "" : " (failed)")
                        : std::string("(no status)")) +
                     " of the leader's " + std::to_string(lead->commit_index) + ", healthz " +
                     (health ? std::to_string(health->status) : std::string("no answer"));
      more = 200;
    }
  }
  ASSERT_FALSE(follower_state.empty())
      << cluster_->member(k_full).id << " kept up through " << written
      << " writes of 32 KiB on a full disk: the test did not fill it";
  std::cout << "disk-full: " << cluster_->member(k_full).id << " stuck (" << follower_state
            << ") after " << written - 200 << " writes; " << written << " writes through the other"
            << " two in " << ms_since(t_full) << " ms, all 2xx (slowest " << slowest_ms << " ms)\n";

  // Space back: the follower catches up, by itself or (when its shard
  // stopped applying for good, group_status::failure) after a restart.
  // (The node's own raft log and RocksDB files filled the tmpfs further:
  // the space back is the filler gone and the tmpfs grown.)
  fs::remove(disk_->path() + "/filler");
  ASSERT_TRUE(disk_->resize("512M")) << std::strerror(errno);
  auto catch_up = [&](std::chrono::milliseconds limit) -> std::optional<cluster_shard_status> {
    auto lead = shard_at(leader_index);
    if (!lead) return std::nullopt;
    const auto t = std::chrono::steady_clock::now();
    std::optional<cluster_shard_status> f;
    while (std::chrono::steady_clock::now() - t < limit) {
      f = cluster_->alive(k_full) ? shard_at(k_full) : std::nullopt;
      if (f && f->applied_index >= lead->commit_index) return f;
      std::this_thread::sleep_for(100ms);
    }
    return f;
  };
  auto lead_now = shard_at(leader_index);
  ASSERT_TRUE(lead_now.has_value());
  const auto back = std::chrono::steady_clock::now();
  auto f = catch_up(15s);
  if (f && f->applied_index >= lead_now->commit_index) {
    std::cout << "disk-full: " << cluster_->member(k_full).id << " caught up by itself "
              << ms_since(back) << " ms after getting space back\n";
  } else {
    std::cout << "disk-full: " << cluster_->member(k_full).id
              << " did not catch up by itself within 15 s of getting space back ("
              << (f ? "applied " + std::to_string(f->applied_index) + ", last " +
                          std::to_string(f->last_index) + ", failure '" + f->failure + "'"
                    : std::string("no status"))
              << "); restarting it\n";
    RecordProperty("follower_recovered_by_itself", "no");
    if (cluster_->alive(k_full)) cluster_->kill9(k_full);
    cluster_->restart(k_full);
    const auto restarted = std::chrono::steady_clock::now();
    f = catch_up(60s);
    ASSERT_TRUE(f && f->applied_index >= lead_now->commit_index)
        << cluster_->member(k_full).id << " did not catch up within 60 s of its restart";
    std::cout << "disk-full: " << cluster_->member(k_full).id << " caught up "
              << ms_since(restarted) << " ms after its restart\n";
  }

  drain_expecting_once(api_->all(), k_topic, k_group, answered);
}

}  // namespace
}  // namespace onceq::itest
