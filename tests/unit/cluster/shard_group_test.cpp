// shard_group over a real single-voter raft_node in process (127.0.0.1, a
// fresh directory): what it adds to raft_node is checked where a shard
// sees it, in the replica's applied state and in log_health().
// - A new leader's grace (leader_grace_test has the arithmetic): the
//   entries it proposes while the grace lasts are applied at their clock
//   minus the grace, and at their clock after.
// - log_health(): writable while the group applies; not writable, with
//   why, once the group stopped on this node.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cluster/replica.hpp"
#include "cluster/shard_group.hpp"
#include "storage/memory_store.hpp"

namespace onceq::cluster {
namespace {

using namespace std::chrono_literals;

constexpr millis k_grace = 500;
constexpr millis k_max_lease = 60'000;
constexpr millis k_t0 = 1'700'000'000'000;

// A port the kernel just gave out and took back.
int ephemeral_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

template <class Pred>
bool within(std::chrono::milliseconds limit, Pred pred) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

class shard_group_test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "onceq-shard-group-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto cfg = cluster_config::parse(
        fmt::format("[[node]]\nid = \"n1\"\nhttp = \"127.0.0.1:{}\"\nraft = \"127.0.0.1:{}\"\n",
                    ephemeral_port(), ephemeral_port()),
        "<test>", "n1");
    ASSERT_TRUE(cfg.ok()) << cfg.err().message;
    cfg_.emplace(std::move(*cfg));
    replica_ = std::make_unique<replica>(store_, nullptr, broker_options{});
    auto opened = replica_->open();
    ASSERT_TRUE(opened.ok()) << opened.err().message;
    group_ = std::make_unique<shard_group>(0, *replica_, *cfg_, k_grace, k_max_lease);
    raft_node_options o;
    o.data_dir = dir_;
    o.groups = 1;
    o.election_timeout_ms = 200;
    o.heartbeat_timeout_ms = 20;
    auto started = raft_node::start(*cfg_, o, {replica_.get()});
    ASSERT_TRUE(started.ok()) << started.err().message;
    node_ = std::move(*started);
    group_->attach(*node_);
    ASSERT_TRUE(within(10s, [&] { return node_->status(0)->leader_ready; })) << "never led";
  }

  void TearDown() override {
    if (node_) node_->stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // Proposes cmd through the group as the shard would, at its clock `now`.
  result<log_reply> propose(millis now, log_command cmd) {
    auto done = std::make_shared<std::promise<result<log_reply>>>();
    auto answer = done->get_future();
    group_->propose(log_entry{now, std::move(cmd)},
                    [done](result<log_reply> r) { done->set_value(std::move(r)); });
    if (answer.wait_for(10s) != std::future_status::ready) {
      return make_error(errc::internal, "no answer in 10 s");
    }
    return answer.get();
  }

  std::string dir_;
  std::optional<cluster_config> cfg_;
  storage::memory_store store_;
  std::unique_ptr<replica> replica_;
  std::unique_ptr<shard_group> group_;
  std::unique_ptr<raft_node> node_;
};

TEST_F(shard_group_test, a_new_leader_applies_its_entries_behind_its_clock_while_the_grace_lasts) {
  ASSERT_TRUE(propose(k_t0, create_topic_cmd{"t", 1, {}}).ok());
  EXPECT_EQ(replica_->applied().now_ms, k_t0 - k_grace);
  ASSERT_TRUE(propose(k_t0 + 1'000, create_topic_cmd{"u", 1, {}}).ok());
  EXPECT_EQ(replica_->applied().now_ms, k_t0 + 1'000 - k_grace);
  ASSERT_TRUE(propose(k_t0 + k_max_lease, create_topic_cmd{"v", 1, {}}).ok());
  EXPECT_EQ(replica_->applied().now_ms, k_t0 + k_max_lease) << "the grace is over";
}

TEST_F(shard_group_test, log_health_says_why_once_the_group_stopped_on_this_node) {
  ASSERT_TRUE(propose(k_t0, create_topic_cmd{"t", 1, {}}).ok());
  EXPECT_TRUE(group_->log_health().writable);
  EXPECT_EQ(group_->log_health().reason, "");

  store_.fail_writes(true);  // the replica's store refuses: it cannot apply
  produce_cmd p{"t", {}, {}, {}};
  p.messages.resize(1);
  p.messages[0].value = "v";
  EXPECT_FALSE(propose(k_t0 + 10, p).ok());
  ASSERT_TRUE(within(5s, [&] { return !group_->log_health().writable; }))
      << "log_health() still says writable";
  const auto h = group_->log_health();
  EXPECT_NE(h.reason.find("replication stopped on this node"), std::string::npos) << h.reason;
  const std::string failure = node_->status(0)->failure;
  EXPECT_FALSE(failure.empty());
  EXPECT_TRUE(h.reason.ends_with(failure)) << h.reason << " / " << failure;
}

}  // namespace
}  // namespace onceq::cluster
