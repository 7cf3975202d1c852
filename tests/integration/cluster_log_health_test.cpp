// A node whose raft log cannot be written says so: a 3-node cluster on
// 127.0.0.1 where one node's raft directory (<data-dir>/raft) is a tmpfs
// too small for a segment of the log, while its RocksDB is on an ordinary
// disk. Appends of that node fail from the first; the other two carry
// every write. The node's GET /v1/cluster names the failure, and its GET
// /v1/healthz answers 503 (the other two: 200), where it used to answer 200
// with only the apply lag to show it.
// Needs root (mounts a tmpfs); skipped otherwise.

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
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

constexpr std::string_view k_topic = "lh";
constexpr int k_broken = 2;  // the member whose raft log cannot be written

class cluster_log_health : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs as a raft directory";
    std::string tmpl = (fs::temp_directory_path() / "onceq-cl-loghealth-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    const std::string data = root_ + "/data";
    raft_dir_ = data + "/raft";
    fs::create_directories(raft_dir_);
    // Room for raft_uv's metadata and the bootstrap entry, not for an open
    // segment of the log (onceqd's are 64 MiB, preallocated).
    ASSERT_EQ(::mount("tmpfs", raft_dir_.c_str(), "tmpfs", 0, "size=4M"), 0)
        << std::strerror(errno);
    mounted_ = true;
    local_cluster::options o;
    o.members = free_loopback_members(3, 4242);
    o.data_dirs = {"", "", data};
    // It never stands for election: a leader whose log cannot be written
    // crashes in raft 0.15 (sendSnapshotGetCb), which is not what this
    // test is about.
    o.command_prefixes = {
        {}, {}, {"/bin/sh", "-c", "exec \"$0\" \"$@\" --election-timeout-ms 60000"}};
    cluster_ = std::make_unique<local_cluster>(std::move(o));
    std::vector<cluster_member> members;
    for (std::size_t i = 0; i < cluster_->size(); ++i) members.push_back(cluster_->member(i));
    api_ = std::make_unique<cluster_api>(members, 3s, 11);
  }

  void TearDown() override {
    if (HasFailure() && cluster_) {
      std::cerr << cluster_->log_tails() << "\n";
      cluster_->keep_root();
    }
    api_.reset();
    cluster_.reset();  // the nodes stop before their raft directory goes
    if (mounted_) {
      EXPECT_EQ(::umount(raft_dir_.c_str()), 0) << std::strerror(errno);
    }
    if (!root_.empty()) {
      std::error_code ec;
      fs::remove_all(root_, ec);
    }
  }

  std::string root_, raft_dir_;
  bool mounted_ = false;
  std::unique_ptr<local_cluster> cluster_;
  std::unique_ptr<cluster_api> api_;
};

// The two healthy nodes take a topic and 10 writes; then polls the broken
// node's GET /v1/cluster (up to 20 s) for the failure of its shard.
// Returns it ("" if none was reported).
std::string write_and_wait_for_failure(local_cluster& cluster, cluster_api& api) {
  const std::vector<int> others = api.all_but(k_broken);
  EXPECT_TRUE(api.create_topic(k_topic)) << "the two healthy nodes did not take the topic";
  for (int i = 0; i < 10; ++i) {
    const std::string id = "w-" + std::to_string(i);
    auto r = api.send_retry(others, "POST", "/v1/produce",
                            cluster_api::produce_body(k_topic, id, "k-" + id),
                            cluster_api::produce_headers(id), 20s);
    EXPECT_TRUE(r && r->status == 200) << id << ": " << (r ? r->body : "no answer");
  }
  const auto t = std::chrono::steady_clock::now();
  std::string failure;
  while (failure.empty() && ms_since(t) < 20'000) {
    if (auto s = cluster.status(k_broken, 2s); s && !s->shards.empty()) {
      failure = s->shards.front().failure;
    }
    if (failure.empty()) std::this_thread::sleep_for(100ms);
  }
  std::cout << "log-health: " << cluster.member(k_broken).id << " reported '" << failure << "' "
            << ms_since(t) << " ms after 10 writes through the others\n";
  return failure;
}

TEST_F(cluster_log_health, a_node_whose_raft_log_cannot_be_written_names_it_in_cluster_status) {
  const std::string failure = write_and_wait_for_failure(*cluster_, *api_);
  EXPECT_NE(failure.find("raft log cannot be written"), std::string::npos)
      << "GET /v1/cluster on " << cluster_->member(k_broken).id << " says '" << failure << "'";
  // Only there: the two others are healthy.
  for (int i : api_->all_but(k_broken)) {
    auto s = cluster_->status(static_cast<std::size_t>(i), 2s);
    ASSERT_TRUE(s && !s->shards.empty());
    EXPECT_EQ(s->shards.front().failure, "") << cluster_->member(i).id;
  }
}

// The shard reports its log's health (shard_log::log_health, which
// cluster::shard_group implements) in GET /v1/healthz.
TEST_F(cluster_log_health, a_node_whose_raft_log_cannot_be_written_says_so_in_healthz) {
  ASSERT_FALSE(write_and_wait_for_failure(*cluster_, *api_).empty());
  std::optional<http_response> health;
  const auto asked = std::chrono::steady_clock::now();
  while (ms_since(asked) < 10'000) {
    health = cluster_->request(k_broken, "GET", "/v1/healthz", {}, {}, 2s);
    if (health && health->status == 503) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(health.has_value()) << "no answer from /v1/healthz";
  EXPECT_EQ(health->status, 503u) << health->body;
  EXPECT_NE(health->body.find("raft log cannot be written"), std::string::npos) << health->body;
  for (int i : api_->all_but(k_broken)) {
    auto ok = cluster_->request(static_cast<std::size_t>(i), "GET", "/v1/healthz", {}, {}, 2s);
    ASSERT_TRUE(ok.has_value());
    EXPECT_EQ(ok->status, 200u) << cluster_->member(i).id << ": " << ok->body;
  }
}

}  // namespace
}  // namespace onceq::itest
