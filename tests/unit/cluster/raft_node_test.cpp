// raft_node: real clusters of raft_nodes in this process, each node with
// its own libuv thread, data dir and 127.0.0.1 ports, talking raft's TCP.
// Every wait is a bounded poll (cluster_test::eventually), never a bare
// sleep, so that a loaded machine only makes the tests slower.
#include "cluster/raft_node.hpp"

#include "broker/log_entry.hpp"
#include "cluster/replica.hpp"
#include "storage/memory_store.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace onceq::cluster {
namespace {

using namespace std::chrono_literals;

// A deterministic machine: the list of applied entries. apply answers
// "<position>:<entry>", the same on every replica.
class log_machine : public state_machine {
 public:
  std::string apply(std::uint64_t index, std::string_view entry) override {
    std::lock_guard lock(mu_);
    if (index <= last_index_) {
      ADD_FAILURE() << "index " << index << " applied after " << last_index_;
    }
    last_index_ = index;
    if (!fail_on_.empty() && entry == fail_on_) throw std::runtime_error("disk on fire");
    entries_.emplace_back(entry);
    return fmt::format("{}:{}", entries_.size(), entry);
  }

  std::string snapshot() override {
    std::lock_guard lock(mu_);
    std::string out = fmt::format("{}\n", last_index_);
    for (const auto& e : entries_) out += fmt::format("{}:{}", e.size(), e);
    return out;
  }

  void restore(std::string_view s) override {
    std::lock_guard lock(mu_);
    const auto nl = s.find('\n');
    last_index_ = std::stoull(std::string(s.substr(0, nl)));
    entries_.clear();
    for (std::size_t at = nl + 1; at < s.size();) {
      const auto colon = s.find(':', at);
      const std::size_t n = std::stoull(std::string(s.substr(at, colon - at)));
      entries_.emplace_back(s.substr(colon + 1, n));
      at = colon + 1 + n;
    }
    restores_ += 1;
  }

  std::vector<std::string> entries() const {
    std::lock_guard lock(mu_);
    return entries_;
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return entries_.size();
  }
  // apply throws for this entry from now on (a local fault of one replica).
  void fail_on(std::string entry) {
    std::lock_guard lock(mu_);
    fail_on_ = std::move(entry);
  }
  int restores() const {
    std::lock_guard lock(mu_);
    return restores_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> entries_;
  std::uint64_t last_index_ = 0;
  int restores_ = 0;
  std::string fail_on_;
};

// Until f() holds, polling every 5 ms, at most `limit`.
template <class F>
bool eventually(F f, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return f();
}

bool port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// `count` runs of `width` free consecutive ports, none of them in `taken`
// (runs picked before: a node's raft ports must not cover another node's
// http port, which the cluster file refuses). They are taken below the
// kernel's ephemeral range (32768+), where no outgoing connection of the
// test (raft's own dials) can be given one of them between the check and
// the node's bind, or while a node is down for a restart.
std::vector<int> free_port_runs(std::size_t count, unsigned width,
                                const std::vector<int>& taken = {}) {
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                          static_cast<unsigned>(std::random_device{}()));
  std::uniform_int_distribution<int> pick(20000, 32000 - static_cast<int>(width));
  std::vector<int> bases;
  while (bases.size() < count) {
    const int base = pick(rng);
    bool ok = true;
    for (int b : bases)
      ok = ok && (base + static_cast<int>(width) <= b || b + static_cast<int>(width) <= base);
    for (int t : taken) ok = ok && (t < base || t >= base + static_cast<int>(width));
    for (unsigned i = 0; ok && i < width; ++i) ok = port_free(base + static_cast<int>(i));
    if (ok) bases.push_back(base);
  }
  return bases;
}

op_result wait_for(std::future<op_result>& f) {
  if (f.wait_for(15s) != std::future_status::ready) {
    return op_result{raft_errc::failed, "", "", "the test gave up waiting for the callback"};
  }
  return f.get();
}

class cluster_test : public ::testing::Test {
 protected:
  struct member {
    std::unique_ptr<raft_node> node;
    std::vector<std::unique_ptr<state_machine>> machines;
  };

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("onceq-raft-{}-{}", ::getpid(), counter_++);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }

  void TearDown() override {
    for (auto& m : members_) {
      if (m.node) m.node->stop();
    }
    members_.clear();
    std::filesystem::remove_all(dir_);
  }

  raft_node_options options() const {
    raft_node_options o;
    o.groups = groups_;
    // Short enough for quick tests, long enough that a loaded 2-core
    // machine (fsyncs, sanitizers) does not depose healthy leaders.
    o.election_timeout_ms = 400;
    o.heartbeat_timeout_ms = 50;
    o.connect_retry_delay_ms = 50;
    o.snapshot_threshold = snapshot_threshold_;
    o.snapshot_trailing = snapshot_trailing_;
    if (segment_bytes_ != 0) {
      o.segment_bytes = segment_bytes_;
      o.max_batch_bytes = std::min(o.max_batch_bytes, segment_bytes_);
    }
    // A promotion of a node that does not answer gives up after 1 s.
    o.max_catch_up_round_ms = 1'000;
    return o;
  }

  // Writes the cluster file of n nodes ("n1".."nN") with `groups` groups each.
  void make_cluster(std::size_t n, unsigned groups) {
    groups_ = groups;
    const auto http = free_port_runs(n, 1);
    const auto raft = free_port_runs(n, groups, http);
    cluster_file_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      cluster_file_ += fmt::format(
          "[[node]]\nid = \"n{}\"\nhttp = \"127.0.0.1:{}\"\nraft = "
          "\"127.0.0.1:{}\"\n",
          i + 1, http[i], raft[i]);
    }
    members_.resize(n);
  }

  cluster_config config_of(std::size_t i) const {
    auto c = cluster_config::parse(cluster_file_, "cluster.toml", fmt::format("n{}", i + 1));
    EXPECT_TRUE(c.ok()) << c.err().message;
    return std::move(c).value();
  }

  std::string data_dir(std::size_t i) const { return (dir_ / fmt::format("n{}", i + 1)).string(); }

  // Starts node i with fresh state machines (raft replays into them).
  void start(std::size_t i) {
    member& m = members_[i];
    m.machines.clear();
    std::vector<state_machine*> sms;
    for (unsigned g = 0; g < groups_; ++g) {
      m.machines.push_back(make_machine(i, g));
      sms.push_back(m.machines.back().get());
    }
    auto o = options();
    o.data_dir = data_dir(i);
    if (specs_) o.specs = specs_(i);
    auto node = raft_node::start(config_of(i), o, sms);
    ASSERT_TRUE(node.ok()) << node.err().message;
    m.node = std::move(node).value();
  }

  // A snapshot every 16 applied entries, keeping 4 in the log: a follower
  // stopped for a few dozen entries can only catch up from a snapshot.
  void snapshots_every_16_entries() {
    snapshot_threshold_ = 16;
    snapshot_trailing_ = 4;
  }

  // Group g's state machine on node i, made at each start. Default: a log_machine.
  virtual std::unique_ptr<state_machine> make_machine(std::size_t /*node*/, unsigned /*g*/) {
    return std::make_unique<log_machine>();
  }

  void start_all() {
    for (std::size_t i = 0; i < members_.size(); ++i) start(i);
  }

  void stop(std::size_t i) {
    members_[i].node->stop();
    members_[i].node.reset();
  }

  raft_node& node(std::size_t i) { return *members_[i].node; }
  log_machine& machine(std::size_t i, unsigned g = 0) {
    return static_cast<log_machine&>(*members_[i].machines[g]);
  }
  bool running(std::size_t i) const { return members_[i].node != nullptr; }

  group_status status_of(std::size_t i, unsigned g = 0) {
    auto s = node(i).status(g);
    EXPECT_TRUE(s.ok()) << s.err().message;
    return std::move(s).value();
  }

  // The node every running node agrees leads group g, once there is one.
  std::optional<std::size_t> leader(unsigned g = 0, std::chrono::milliseconds limit = 10s) {
    std::optional<std::size_t> found;
    eventually(
        [&] {
          found.reset();
          for (std::size_t i = 0; i < members_.size(); ++i) {
            if (running(i) && status_of(i, g).is_leader) found = i;
          }
          if (!found) return false;
          const std::string id = fmt::format("n{}", *found + 1);
          for (std::size_t i = 0; i < members_.size(); ++i) {
            if (running(i) && status_of(i, g).leader != id) return false;
          }
          return true;
        },
        limit);
    return found;
  }

  op_result propose(std::size_t i, std::string entry, unsigned g = 0) {
    auto p = std::make_shared<std::promise<op_result>>();
    auto f = p->get_future();
    auto r =
        node(i).propose(g, std::move(entry), [p](op_result res) { p->set_value(std::move(res)); });
    if (!r.ok()) return op_result{raft_errc::failed, "", "", r.err().message};
    return wait_for(f);
  }

  // Proposes every entry on the leader of g, each acknowledged before the next.
  void propose_all(std::size_t leader_index, const std::vector<std::string>& entries,
                   unsigned g = 0) {
    for (const auto& e : entries) {
      auto r = propose(leader_index, e, g);
      ASSERT_TRUE(r.ok()) << e << ": " << to_string(r.code) << " " << r.message;
    }
  }

  // Until every running node's machine of g holds exactly `want`.
  void expect_everywhere(const std::vector<std::string>& want, unsigned g = 0) {
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!running(i)) continue;
      EXPECT_TRUE(eventually([&] { return machine(i, g).entries() == want; }))
          << "node n" << i + 1 << " group " << g << " has " << machine(i, g).size() << " of "
          << want.size() << " entries; first differences:" << [&] {
               std::string d;
               const auto got = machine(i, g).entries();
               for (std::size_t k = 0, shown = 0; k < got.size() && shown < 3; ++k) {
                 if (k >= want.size() || got[k] != want[k]) {
                   d += fmt::format(" [{}] {} vs {}", k, got[k], k < want.size() ? want[k] : "-");
                   ++shown;
                 }
               }
               return d;
             }();
    }
  }

  static std::vector<std::string> names(std::string_view prefix, int from, int to) {
    std::vector<std::string> out;
    for (int i = from; i < to; ++i) out.push_back(fmt::format("{}{}", prefix, i));
    return out;
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string cluster_file_;
  unsigned groups_ = 1;
  unsigned snapshot_threshold_ = 1024;
  unsigned snapshot_trailing_ = 128;
  std::size_t segment_bytes_ = 0;  // 0: raft_node_options' default
  std::vector<member> members_;
  // Per node: its groups' specs (raft_node_options::specs); unset: every
  // group opened and bootstrapped with every node.
  std::function<std::vector<group_spec>(std::size_t)> specs_;

  // A raft_node call that answers through a callback, waited for.
  template <class Call>
  op_result call(Call c) {
    auto p = std::make_shared<std::promise<op_result>>();
    auto f = p->get_future();
    auto r = c([p](op_result res) { p->set_value(std::move(res)); });
    if (!r.ok()) return op_result{raft_errc::failed, "", "", r.err().message};
    return wait_for(f);
  }
  op_result change(std::size_t i, member_change::kind op, std::uint64_t id, unsigned g = 0) {
    return call([&](op_cb cb) { return node(i).change(g, member_change{op, id}, std::move(cb)); });
  }
  static std::optional<onceq::cluster::member> find_member(const group_status& s,
                                                           std::uint64_t id) {
    for (const auto& m : s.members) {
      if (m.id == id) return m;
    }
    return std::nullopt;
  }
};

TEST_F(cluster_test, leader_applies_bursts_from_many_threads_in_one_order_everywhere) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";

  // A burst: 4 threads queue 100 proposals each without waiting.
  constexpr int k_threads = 4, k_each = 100;
  std::vector<std::future<op_result>> futures[k_threads];
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < k_each; ++i) {
        auto p = std::make_shared<std::promise<op_result>>();
        futures[t].push_back(p->get_future());
        auto r = node(*l).propose(0, fmt::format("t{}-{}", t, i),
                                  [p](op_result res) { p->set_value(std::move(res)); });
        if (!r.ok()) p->set_value(op_result{raft_errc::failed, "", "", r.err().message});
      }
    });
  }
  for (auto& th : threads) th.join();

  std::set<std::string> replies;
  for (int t = 0; t < k_threads; ++t) {
    for (int i = 0; i < k_each; ++i) {
      op_result r = wait_for(futures[t][i]);
      ASSERT_TRUE(r.ok()) << to_string(r.code) << " " << r.message;
      // The reply is the machine's: "<position>:<entry>".
      const std::string suffix = fmt::format(":t{}-{}", t, i);
      ASSERT_TRUE(r.reply.ends_with(suffix)) << r.reply;
      replies.insert(r.reply);
    }
  }
  EXPECT_EQ(replies.size(), static_cast<std::size_t>(k_threads * k_each));

  // Every replica applied the same entries in the same order, and each
  // reply names the entry's position in that order.
  const auto order = machine(*l).entries();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(k_threads * k_each));
  expect_everywhere(order);
  for (const auto& reply : replies) {
    const auto colon = reply.find(':');
    const std::size_t pos = std::stoul(reply.substr(0, colon));
    ASSERT_GE(pos, 1u);
    EXPECT_EQ(order[pos - 1], reply.substr(colon + 1));
  }
  // One thread's proposals keep their order.
  for (int t = 0; t < k_threads; ++t) {
    int next = 0;
    for (const auto& e : order) {
      if (e.starts_with(fmt::format("t{}-", t))) {
        EXPECT_EQ(e, fmt::format("t{}-{}", t, next++));
      }
    }
  }
  // Group commit: the burst went to raft in fewer raft_apply calls than
  // proposals.
  const auto s = status_of(*l);
  EXPECT_EQ(s.proposals, static_cast<std::uint64_t>(k_threads * k_each));
  EXPECT_LT(s.apply_calls, s.proposals) << "no raft_apply call carried more than one entry";
  EXPECT_TRUE(s.is_leader);
  EXPECT_GE(s.commit_index, static_cast<std::uint64_t>(k_threads * k_each));
  EXPECT_TRUE(eventually([&] { return status_of(*l).last_applied == status_of(*l).commit_index; }));
}

TEST_F(cluster_test, follower_refuses_with_the_leaders_id) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";
  const std::size_t f = (*l + 1) % 3;
  auto r = propose(f, "x");
  EXPECT_EQ(r.code, raft_errc::not_leader) << r.message;
  EXPECT_EQ(r.leader, fmt::format("n{}", *l + 1));
  EXPECT_FALSE(status_of(f).is_leader);
  EXPECT_EQ(status_of(f).leader, fmt::format("n{}", *l + 1));
  // Nothing was appended anywhere.
  propose_all(*l, {"y"});
  expect_everywhere({"y"});

  // The same for a barrier and a transfer asked of a follower.
  auto p = std::make_shared<std::promise<op_result>>();
  auto fut = p->get_future();
  ASSERT_TRUE(node(f).barrier(0, [p](op_result res) { p->set_value(std::move(res)); }).ok());
  auto b = wait_for(fut);
  EXPECT_EQ(b.code, raft_errc::not_leader);
  EXPECT_EQ(b.leader, fmt::format("n{}", *l + 1));
}

TEST_F(cluster_test, bad_calls_are_refused_at_once) {
  make_cluster(1, 1);
  start_all();
  auto never = [](op_result) { ADD_FAILURE() << "callback of a refused call"; };
  auto r = node(0).propose(1, "x", never);
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_EQ(r.err().message, "no group 1");
  r = node(0).propose(0, "", never);
  EXPECT_EQ(r.code(), errc::invalid_argument);
  r = node(0).propose(0, std::string((1u << 20) + 1, 'x'), never);
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_EQ(r.err().message, "entry of 1048577 bytes; at most 1048576");
  r = node(0).transfer(0, "n7", never);
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_EQ(r.err().message, "no node \"n7\" in the cluster file");
  EXPECT_EQ(node(0).status(3).code(), errc::invalid_argument);
  EXPECT_EQ(node(0).barrier(2, never).code(), errc::invalid_argument);

  // A one-node cluster leads itself; a transfer has nobody to go to.
  ASSERT_TRUE(leader());
  auto t = std::make_shared<std::promise<op_result>>();
  auto tf = t->get_future();
  ASSERT_TRUE(node(0).transfer(0, "", [t](op_result res) { t->set_value(std::move(res)); }).ok());
  auto tr = wait_for(tf);
  EXPECT_EQ(tr.code, raft_errc::failed);
  EXPECT_NE(tr.message.find("raft_transfer"), std::string::npos) << tr.message;

  node(0).stop();
  node(0).stop();  // idempotent
  r = node(0).propose(0, "x", never);
  EXPECT_EQ(r.code(), errc::unavailable);
  EXPECT_EQ(node(0).rebalance().code(), errc::unavailable);
}

TEST_F(cluster_test, start_refuses_bad_setups) {
  make_cluster(1, 2);
  log_machine a, b;
  auto o = options();
  o.data_dir = data_dir(0);

  auto r = raft_node::start(config_of(0), o, {&a});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "raft_node: 1 state machines for 2 groups");
  auto bad = o;
  bad.heartbeat_timeout_ms = bad.election_timeout_ms;
  EXPECT_EQ(raft_node::start(config_of(0), bad, {&a, &b}).code(), errc::invalid_argument);
  bad = o;
  bad.data_dir.clear();
  EXPECT_EQ(raft_node::start(config_of(0), bad, {&a, &b}).code(), errc::invalid_argument);
  // Open segments that a batch would not fit in, the node's or a group's.
  bad = o;
  bad.segment_bytes = bad.max_batch_bytes - 1;
  r = raft_node::start(config_of(0), bad, {&a, &b});
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_NE(r.err().message.find("the groups' open segments"), std::string::npos)
      << r.err().message;
  bad = o;
  bad.specs = {group_spec{}, group_spec{}};
  bad.specs[1].segment_bytes = 4096;
  r = raft_node::start(config_of(0), bad, {&a, &b});
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_NE(r.err().message.find("group 1's open segments of 4096 bytes"), std::string::npos)
      << r.err().message;

  // A raft port already taken: raft's own reason, the group and its address.
  const auto c = config_of(0);
  const int port = c.self().raft_port + 1;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  r = raft_node::start(c, o, {&a, &b});
  ::close(fd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::unavailable);
  EXPECT_NE(r.err().message.find(fmt::format("group 1 (")), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find(fmt::format("127.0.0.1:{}", port)), std::string::npos)
      << r.err().message;

  // The port is free again: the same directory starts.
  auto ok = raft_node::start(c, o, {&a, &b});
  ASSERT_TRUE(ok.ok()) << ok.err().message;
  (*ok)->stop();

  // The directory now belongs to n1: a cluster file that makes it n2 is refused.
  cluster_file_ =
      "[[node]]\nid = \"n0\"\nhttp = \"127.0.0.1:1\"\nraft = \"127.0.0.1:3\"\n" + cluster_file_;
  auto moved = cluster_config::parse(cluster_file_, "cluster.toml", "n1");
  ASSERT_TRUE(moved.ok()) << moved.err().message;
  r = raft_node::start(*moved, o, {&a, &b});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_NE(r.err().message.find("never reordered or removed"), std::string::npos)
      << r.err().message;
}

TEST_F(cluster_test, a_new_leader_takes_over_and_the_old_one_catches_up_after_restart) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";
  auto want = names("a", 0, 10);
  propose_all(*l, want);

  const std::size_t old = *l;
  stop(old);
  auto l2 = leader();
  ASSERT_TRUE(l2) << "the two others elected nobody";
  ASSERT_NE(*l2, old);
  auto more = names("b", 0, 10);
  propose_all(*l2, more);
  want.insert(want.end(), more.begin(), more.end());
  expect_everywhere(want);

  // The old leader restarts from its directory with an empty machine:
  // raft replays its log and the leader sends what it missed.
  start(old);
  expect_everywhere(want);
  EXPECT_TRUE(eventually([&] { return status_of(old).leader == fmt::format("n{}", *l2 + 1); }));
  // And it keeps following.
  auto l3 = leader();
  ASSERT_TRUE(l3);
  propose_all(*l3, {"c0"});
  want.push_back("c0");
  expect_everywhere(want);
}

TEST_F(cluster_test, a_follower_far_behind_catches_up_through_a_snapshot) {
  snapshots_every_16_entries();
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";
  auto want = names("a", 0, 3);  // fewer than the threshold: no snapshot yet
  propose_all(*l, want);
  expect_everywhere(want);

  const std::size_t f = (*l + 1) % 3;
  stop(f);
  auto more = names("b", 0, 120);
  propose_all(*l, more);
  want.insert(want.end(), more.begin(), more.end());
  expect_everywhere(want);

  // Its log ends long before the leader's (kept: 4 entries behind the last
  // snapshot), so only an InstallSnapshot brings it up to date.
  start(f);
  EXPECT_EQ(machine(f).restores(), 0) << "restored a snapshot of its own at start";
  expect_everywhere(want);
  EXPECT_GE(machine(f).restores(), 1);
  EXPECT_GE(status_of(f).snapshots_restored, 1u);
  // And from there on it applies entries as usual.
  auto l2 = leader();
  ASSERT_TRUE(l2);
  propose_all(*l2, {"c0", "c1"});
  want.push_back("c0");
  want.push_back("c1");
  expect_everywhere(want);

  // A restart of any node now starts from its own snapshot plus its log.
  stop(f);
  start(f);
  expect_everywhere(want);
  EXPECT_GE(machine(f).restores(), 1);
}

TEST_F(cluster_test, a_follower_behind_by_more_than_a_segment_catches_up) {
  segment_bytes_ = 1u << 20;
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";
  std::vector<std::string> want = {"a0"};
  propose_all(*l, want);
  expect_everywhere(want);

  const std::size_t f = (*l + 1) % 3;
  stop(f);
  for (int i = 0; i < 48; ++i)
    want.push_back(std::string(64u << 10, static_cast<char>('a' + i % 26)));
  propose_all(*l, std::vector<std::string>(want.begin() + 1, want.end()));
  start(f);
  expect_everywhere(want);
}

// Raft preallocates a group's open segments at their full size and reads
// them whole at every start: a group spec sets its own size.
TEST_F(cluster_test, a_group_spec_sets_the_size_of_its_open_segments) {
  make_cluster(1, 2);
  specs_ = [](std::size_t) {
    std::vector<group_spec> s(2);
    for (auto& g : s) g.bootstrap = {onceq::cluster::member{1, member_role::voter}};
    s[1].segment_bytes = 4u << 20;
    return s;
  };
  start_all();
  ASSERT_TRUE(leader(0));
  ASSERT_TRUE(leader(1));
  propose_all(0, {"a"}, 0);
  propose_all(0, {"b"}, 1);
  auto open_sizes = [&](unsigned g) {
    std::set<std::uintmax_t> sizes;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(data_dir(0)) /
                                                             "raft" / std::to_string(g))) {
      if (e.path().filename().string().rfind("open-", 0) == 0) sizes.insert(e.file_size());
    }
    return sizes;
  };
  // raft_uv prepares spare open segments on its thread pool: one it has
  // just created may still be empty (seen under ASan). Wait for them.
  auto settled = [&](unsigned g) {
    std::set<std::uintmax_t> sizes;
    for (int i = 0; i < 200; ++i) {
      sizes = open_sizes(g);
      if (!sizes.contains(0)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return sizes;
  };
  EXPECT_EQ(settled(0), std::set<std::uintmax_t>{raft_node_options{}.segment_bytes});
  EXPECT_EQ(settled(1), std::set<std::uintmax_t>{4u << 20});
}

// Raft 0.15 only carries entries of 8-byte multiples intact: every length
// and every byte value must come back as proposed, over the network, from
// the disk after a restart, and through a snapshot.
TEST_F(cluster_test, entries_of_every_length_and_byte_come_back_intact) {
  snapshot_threshold_ = 32;
  snapshot_trailing_ = 2;
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l);
  std::vector<std::string> want;
  for (std::size_t n = 1; n <= 40; ++n) {
    std::string e;
    for (std::size_t k = 0; k < n; ++k) e.push_back(static_cast<char>((n * 7 + k) % 10));
    want.push_back(e);
  }
  want.push_back(std::string(1u << 20, '\x08'));  // the largest entry, ending like a pad
  propose_all(*l, want);
  expect_everywhere(want);

  // A follower reads them back from its own log (and snapshot) at start.
  const std::size_t f = (*l + 1) % 3;
  stop(f);
  start(f);
  expect_everywhere(want);
}

// A replica whose apply fails (a local disk error, say) stops applying and
// says why; the others, and the leader's answers, go on.
TEST_F(cluster_test, a_replica_whose_apply_fails_stalls_alone) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l);
  const std::size_t f = (*l + 1) % 3;
  machine(f).fail_on("b");
  propose_all(*l, {"a", "b", "c"});
  const std::vector<std::string> want{"a", "b", "c"};
  EXPECT_TRUE(eventually([&] { return machine(*l).entries() == want; }));
  EXPECT_TRUE(eventually([&] { return machine((*l + 2) % 3).entries() == want; }));
  EXPECT_TRUE(eventually([&] { return !status_of(f).failure.empty(); }));
  EXPECT_NE(status_of(f).failure.find("disk on fire"), std::string::npos) << status_of(f).failure;
  EXPECT_EQ(machine(f).entries(), std::vector<std::string>{"a"});
  propose_all(*l, {"d"});
  EXPECT_EQ(machine(f).entries(), std::vector<std::string>{"a"});
  // A restart (the fault repaired) replays the log into a fresh machine.
  stop(f);
  start(f);
  expect_everywhere({"a", "b", "c", "d"});
  EXPECT_EQ(status_of(f).failure, "");
}

// A leader whose apply fails cannot answer: it refuses, hands its
// leadership to another voter, and the group goes on there.
TEST_F(cluster_test, a_leader_whose_apply_fails_hands_its_leadership_over) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l);
  machine(*l).fail_on("b");
  propose_all(*l, {"a"});
  auto r = propose(*l, "b");
  EXPECT_EQ(r.code, raft_errc::failed) << to_string(r.code) << " " << r.message;
  EXPECT_NE(r.message.find("disk on fire"), std::string::npos) << r.message;
  // (status() is as of the loop's last iteration: wait for the move.)
  std::optional<std::size_t> l2;
  EXPECT_TRUE(eventually([&] {
    l2 = leader();
    return l2 && *l2 != *l;
  }));
  ASSERT_TRUE(l2 && *l2 != *l);
  propose_all(*l2, {"c"});
  EXPECT_TRUE(eventually([&] {
    return machine(*l2).entries() == std::vector<std::string>{"a", "b", "c"};
  }));
  r = propose(*l, "d");
  EXPECT_EQ(r.code, raft_errc::not_leader) << to_string(r.code) << " " << r.message;
  EXPECT_EQ(r.leader, fmt::format("n{}", *l2 + 1));
}

TEST_F(cluster_test, groups_on_the_same_nodes_are_independent) {
  make_cluster(3, 2);
  start_all();
  auto l0 = leader(0);
  auto l1 = leader(1);
  ASSERT_TRUE(l0 && l1);
  propose_all(*l0, names("g0-", 0, 5), 0);
  propose_all(*l1, names("g1-", 0, 7), 1);
  expect_everywhere(names("g0-", 0, 5), 0);
  expect_everywhere(names("g1-", 0, 7), 1);

  // Moving group 1's leadership leaves group 0 where it is.
  const std::size_t to = (*l1 + 1) % 3;
  auto p = std::make_shared<std::promise<op_result>>();
  auto fut = p->get_future();
  ASSERT_TRUE(
      node(*l1)
          .transfer(1, fmt::format("n{}", to + 1), [p](op_result r) { p->set_value(std::move(r)); })
          .ok());
  auto r = wait_for(fut);
  ASSERT_TRUE(r.ok()) << to_string(r.code) << " " << r.message;
  EXPECT_EQ(r.leader, fmt::format("n{}", to + 1));
  EXPECT_TRUE(eventually([&] { return leader(1) == to; }));
  EXPECT_EQ(leader(0), l0);
  propose_all(to, names("g1-", 7, 9), 1);
  propose_all(*l0, names("g0-", 5, 6), 0);
  expect_everywhere(names("g1-", 0, 9), 1);
  expect_everywhere(names("g0-", 0, 6), 0);

  // A group that loses its leader elects another; the other group's
  // leader, elsewhere, keeps going.
  if (*l0 != to) {
    stop(to);
    auto again = leader(1);
    ASSERT_TRUE(again);
    EXPECT_NE(*again, to);
    propose_all(*l0, names("g0-", 6, 8), 0);
    propose_all(*again, names("g1-", 9, 10), 1);
    expect_everywhere(names("g0-", 0, 8), 0);
    expect_everywhere(names("g1-", 0, 10), 1);
  }
}

TEST_F(cluster_test, barrier_and_transfer_on_the_leader) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l);
  propose_all(*l, {"a"});

  // A leader appends a barrier as its term begins; once applied it is ready.
  EXPECT_TRUE(eventually([&] { return status_of(*l).leader_ready; }));
  EXPECT_FALSE(status_of((*l + 1) % 3).leader_ready);

  auto p = std::make_shared<std::promise<op_result>>();
  auto fut = p->get_future();
  ASSERT_TRUE(node(*l).barrier(0, [p](op_result r) { p->set_value(std::move(r)); }).ok());
  auto b = wait_for(fut);
  EXPECT_TRUE(b.ok()) << b.message;
  // After the barrier the leader has applied everything before it.
  EXPECT_EQ(machine(*l).entries(), std::vector<std::string>{"a"});

  // Transfer to "" lets raft pick; the leadership moves.
  auto t = std::make_shared<std::promise<op_result>>();
  auto tf = t->get_future();
  ASSERT_TRUE(node(*l).transfer(0, "", [t](op_result r) { t->set_value(std::move(r)); }).ok());
  auto tr = wait_for(tf);
  ASSERT_TRUE(tr.ok()) << to_string(tr.code) << " " << tr.message;
  ASSERT_NE(tr.leader, fmt::format("n{}", *l + 1));
  std::optional<std::size_t> l2;
  EXPECT_TRUE(eventually([&] {
    l2 = leader();
    return l2 && fmt::format("n{}", *l2 + 1) == tr.leader;
  }));
  ASSERT_TRUE(l2);
  EXPECT_TRUE(eventually([&] { return status_of(*l2).leader_ready; }));
  EXPECT_FALSE(status_of(*l).leader_ready);
  propose_all(*l2, {"b"});
  expect_everywhere({"a", "b"});
}

TEST_F(cluster_test, rebalance_spreads_leaders_over_the_nodes) {
  make_cluster(3, 3);
  start_all();
  for (unsigned g = 0; g < 3; ++g) ASSERT_TRUE(leader(g)) << "group " << g;
  // Each node moves the groups it leads to their preferred node (group g:
  // node g); moves in flight may need a second round.
  EXPECT_TRUE(eventually(
      [&] {
        bool placed = true;
        for (unsigned g = 0; g < 3; ++g) {
          auto l = leader(g, 2s);
          placed = placed && l && *l == g;
        }
        if (!placed) {
          for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(node(i).rebalance().ok());
        }
        return placed;
      },
      20s));
  for (unsigned g = 0; g < 3; ++g) {
    propose_all(g, {fmt::format("g{}", g)}, g);
    expect_everywhere({fmt::format("g{}", g)}, g);
  }
}

// kill -9 of a node in the middle of a stream of writes: its directory
// restarts and holds every entry it acknowledged, in order, with no hole.
TEST_F(cluster_test, kill_9_during_writes_keeps_every_acknowledged_entry) {
  make_cluster(1, 1);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    log_machine m;
    auto o = options();
    o.data_dir = data_dir(0);
    auto n = raft_node::start(config_of(0), o, {&m});
    if (!n.ok()) ::_exit(2);
    // A one-node group elects itself; wait for it so that nothing is refused.
    if (!eventually([&] { return (*n)->status(0).value().is_leader; })) ::_exit(8);
    // Keeps 8 proposals in flight; reports every acknowledged count.
    std::mutex mu;
    std::condition_variable cv;
    std::uint64_t acked = 0, sent = 0;
    for (;;) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return sent - acked < 8; });
      const std::uint64_t i = sent++;
      lock.unlock();
      auto r = (*n)->propose(0, fmt::format("e{}", i), [&, i](op_result res) {
        if (!res.ok()) ::_exit(3);
        std::lock_guard l(mu);
        ++acked;
        // Acknowledgements come in log order.
        if (res.reply != fmt::format("{}:e{}", acked, i)) ::_exit(4);
        std::uint64_t a = acked;
        if (::write(fds[1], &a, sizeof a) != sizeof a) ::_exit(5);
        cv.notify_all();
      });
      if (!r.ok()) ::_exit(6);
      if (sent > 100000) ::_exit(7);
    }
  }
  ::close(fds[1]);
  std::uint64_t acked = 0, a = 0;
  while (acked < 200 && ::read(fds[0], &a, sizeof a) == sizeof a) acked = a;
  ASSERT_GE(acked, 200u) << "the child stopped early";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // Whatever the child reported before it died was acknowledged.
  while (::read(fds[0], &a, sizeof a) == sizeof a) acked = a;
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

  start(0);
  ASSERT_TRUE(leader());
  // Restarted: one more entry commits everything before it.
  auto r = propose(0, "after");
  ASSERT_TRUE(r.ok()) << r.message;
  const auto got = machine(0).entries();
  ASSERT_GE(got.size(), acked + 1);
  for (std::size_t i = 0; i + 1 < got.size(); ++i) ASSERT_EQ(got[i], fmt::format("e{}", i));
  EXPECT_EQ(got.back(), "after");
}

// Raft's peer connections send without Nagle's delay: an append queued
// behind an unacknowledged one must not wait for the peer's delayed ACK
// (that was a 40 ms p99 under load; docs/BENCHMARKS.md).
TEST_F(cluster_test, raft_connections_have_tcp_nodelay) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";
  propose_all(*l, {"x"});
  // Every connected TCP socket of this process is a raft peer connection.
  int connected = 0, nodelay = 0;
  DIR* d = ::opendir("/proc/self/fd");
  ASSERT_NE(d, nullptr);
  while (dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == ::dirfd(d)) continue;
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_in peer{};
    socklen_t plen = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    if (peer.sin_family != AF_INET) continue;
    ++connected;
    int on = 0;
    len = sizeof on;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0 && on != 0) ++nodelay;
  }
  ::closedir(d);
  EXPECT_GE(connected, 4) << "three nodes talk over at least four connections";
  EXPECT_EQ(nodelay, connected);
}

// raft's own byteCrc32 (the static library's, reached as __real_) and the
// slicing-by-8 CRC that replaces it (raft_node.cpp) agree on every length and
// chained init: the checksums on disk and on the wire are unchanged, so a
// log written by either reads with the other.
extern "C" unsigned __real_byteCrc32(const void* buf, std::size_t size, unsigned init);
extern "C" unsigned __wrap_byteCrc32(const void* buf, std::size_t size, unsigned init);

TEST(raft_checksum, raft_checksums_match_raft_s_own) {
  std::mt19937_64 rng(20261125);
  std::vector<unsigned char> data(70'000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (std::size_t len : {0u, 1u, 7u, 8u, 63u, 4096u, 40'001u, 70'000u}) {
    for (unsigned init : {0u, 1u, 0xdeadbeefu}) {
      EXPECT_EQ(__wrap_byteCrc32(data.data(), len, init), __real_byteCrc32(data.data(), len, init))
          << len << " " << init;
    }
  }
  // Chained: the checksum of a whole equals that of its halves in turn.
  const unsigned half = __wrap_byteCrc32(data.data(), 30'000, 0);
  EXPECT_EQ(__wrap_byteCrc32(data.data() + 30'000, 40'000, half),
            __real_byteCrc32(data.data(), 70'000, 0));
}

// ---- replicated brokers -----------------------------------------------------

// Each node's group runs a replica: a broker over its own store, applying
// the group's log entries. The store outlives a node's restart (it is what
// the disk would hold).
class replica_cluster_test : public cluster_test {
 protected:
  std::unique_ptr<state_machine> make_machine(std::size_t node, unsigned /*g*/) override {
    if (stores_.size() <= node) stores_.resize(node + 1);
    if (!stores_[node]) stores_[node] = std::make_unique<storage::memory_store>();
    auto r = std::make_unique<replica>(*stores_[node], nullptr, broker_options{}, render);
    auto opened = r->open();
    EXPECT_TRUE(opened.ok()) << opened.err().message;
    return r;
  }

  // A reply as text: the same on every replica for the same entry.
  static std::string render(const result<log_reply>& r) {
    if (!r.ok()) return std::string(to_string(r.code()));
    return std::visit(
        [](const auto& v) -> std::string {
          using T = std::decay_t<decltype(v)>;
          std::string out = "ok";
          if constexpr (std::is_same_v<T, produce_reply>) {
            for (const auto& p : v.results) out += fmt::format(" {}/{}", p.partition, p.offset);
          } else if constexpr (std::is_same_v<T, std::vector<delivery>>) {
            for (const auto& d : v)
              out +=
                  fmt::format(" {}/{}#{}^{}", d.partition, d.offset, d.attempts, d.fencing_token);
          }
          return out;
        },
        *r);
  }

  // Proposes cmd on node i, stamped `at`; the leader's reply.
  std::string apply(std::size_t i, millis at, log_command cmd) {
    auto r = propose(i, encode_entry(log_entry{at, std::move(cmd)}));
    EXPECT_TRUE(r.ok()) << to_string(r.code) << " " << r.message;
    return r.reply;
  }

  // Every key and value of node i's store.
  std::string dump(std::size_t i) {
    std::string out;
    for (int c = 0; c < storage::k_column_count; ++c) {
      auto r = stores_[i]->scan(static_cast<storage::column>(c), "", std::string(64, '\xff'),
                                [&](std::string_view k, std::string_view v) {
                                  out += fmt::format("{} {}={}\n", c, k, v);
                                  return true;
                                });
      EXPECT_TRUE(r.ok());
    }
    return out;
  }

  // Until every running node applied the leader's whole log (and nothing
  // more is proposed); then their stores agree byte for byte. status() is
  // published after the loop's iteration, under a lock: reading a store
  // after it shows the entry applied is ordered after that apply.
  void expect_same_state(std::size_t leader_index) {
    EXPECT_TRUE(eventually([&] {
      const auto ls = status_of(leader_index);
      if (ls.last_applied != ls.last_index) return false;
      for (std::size_t i = 0; i < members_.size(); ++i) {
        if (running(i) && status_of(i).last_applied != ls.last_index) return false;
      }
      return true;
    })) << "the nodes did not all apply the leader's log";
    const std::string d = dump(leader_index);
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!running(i)) continue;
      EXPECT_EQ(dump(i), d) << "n" << i + 1 << " differs from the leader";
    }
  }

  std::vector<std::unique_ptr<storage::memory_store>> stores_;
};

TEST_F(replica_cluster_test, three_brokers_apply_one_log_and_survive_the_loss_of_the_leader) {
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";
  millis t = 1'700'000'000'000;
  EXPECT_EQ(apply(*l, t, create_topic_cmd{"orders", 2, {}}), "ok");
  for (int i = 0; i < 10; ++i) {
    produce_cmd p{"orders", {}, {}, {}};
    p.messages.resize(1);
    p.messages[0].key = fmt::format("c{}", i % 4);
    p.messages[0].value = fmt::format("order {}", i);
    p.messages[0].idempotency_key = fmt::format("charge:{}", i);
    EXPECT_EQ(apply(*l, t += 10, p).rfind("ok ", 0), 0u);
  }
  // The leases and fencing tokens of a consume are the log's, not a node's.
  const std::string leased =
      apply(*l, t += 10, consume_cmd{"orders", "billing", "w1", 1000, 4, {}});
  ASSERT_EQ(leased.rfind("ok ", 0), 0u) << leased;
  EXPECT_EQ(std::count(leased.begin(), leased.end(), '#'), 4) << leased;
  expect_same_state(*l);

  // A stale ack (another owner) is refused the same way everywhere.
  EXPECT_EQ(
      apply(*l, t += 10, ack_cmd{delivery_ref{"orders", "billing", "w2", 0, 0, {}, {}}, "", {}}),
      "FAILED_PRECONDITION");

  const std::size_t old = *l;
  stop(old);
  auto l2 = leader();
  ASSERT_TRUE(l2) << "the two others elected nobody";
  // The new leader goes on from the same state: a lease that ran out is
  // handed to another consumer at the next consume.
  const std::string again =
      apply(*l2, t += 5'000, consume_cmd{"orders", "billing", "w2", 1000, 10, {}});
  EXPECT_EQ(std::count(again.begin(), again.end(), '#'), 10) << again;
  expect_same_state(*l2);

  // The old leader restarts from its store and its raft log: it skips what
  // its store holds, applies what it missed, and agrees byte for byte.
  start(old);
  expect_same_state(*l2);
}

TEST_F(replica_cluster_test, a_replica_far_behind_is_brought_up_to_date_by_a_snapshot) {
  snapshots_every_16_entries();
  make_cluster(3, 1);
  start_all();
  auto l = leader();
  ASSERT_TRUE(l) << "no leader";
  millis t = 1'700'000'000'000;
  EXPECT_EQ(apply(*l, t, create_topic_cmd{"t", 1, {}}), "ok");
  const std::size_t f = (*l + 1) % 3;
  stop(f);
  for (int i = 0; i < 60; ++i) {
    produce_cmd p{"t", {}, {}, {}};
    p.messages.resize(1);
    p.messages[0].value = fmt::format("m{}", i);
    apply(*l, t += 10, p);
    if (i % 3 == 0) apply(*l, t += 10, consume_cmd{"t", "g", "w", 500, 2, {}});
  }
  start(f);
  EXPECT_TRUE(eventually([&] { return status_of(f).snapshots_restored >= 1; }))
      << "n" << f + 1 << " caught up without a snapshot";
  expect_same_state(*l);
}

// A shard move, as the placement agent makes it: a node outside the group
// (dormant, then opened without a bootstrap) is added, caught up by raft
// before it votes (0.15's promotion rounds), and another member removed;
// the removed node closes the group and wipes its directory.
TEST_F(cluster_test, a_move_adds_a_node_catches_it_up_before_it_votes_and_removes_another) {
  make_cluster(4, 1);
  specs_ = [](std::size_t i) {
    group_spec s;
    if (i < 3) {
      s.bootstrap = {onceq::cluster::member{1}, onceq::cluster::member{2},
                     onceq::cluster::member{3}};
    } else {
      s.open = false;
    }
    return std::vector<group_spec>{s};
  };
  start_all();
  auto l = leader(0, 10s);
  ASSERT_TRUE(l) << "no leader";
  ASSERT_LT(*l, 3u);
  EXPECT_FALSE(status_of(3).open);
  EXPECT_EQ(status_of(*l).members.size(), 3u);
  // A dormant group answers not_leader, knowing no leader.
  auto dormant = propose(3, "x");
  EXPECT_EQ(dormant.code, raft_errc::not_leader);
  EXPECT_EQ(dormant.leader, "");

  const auto first = names("a", 0, 300);
  propose_all(*l, first);
  ASSERT_TRUE(call([&](op_cb cb) { return node(3).open_group(0, {}, std::move(cb)); }).ok());
  EXPECT_TRUE(status_of(3).open);

  auto added = change(*l, member_change::kind::add, 4);
  ASSERT_TRUE(added.ok()) << added.message;
  auto as_added = find_member(status_of(*l), 4);
  ASSERT_TRUE(as_added);
  EXPECT_EQ(as_added->role, member_role::spare);
  // A standby follows the log without voting: the leader's match index
  // for it reaches the leader's log.
  auto standby = change(*l, member_change::kind::standby, 4);
  ASSERT_TRUE(standby.ok()) << standby.message;
  EXPECT_EQ(find_member(status_of(*l), 4)->role, member_role::standby);
  EXPECT_TRUE(eventually([&] {
    const auto s = status_of(*l);
    return find_member(s, 4)->match_index >= s.last_index;
  }));
  EXPECT_TRUE(eventually([&] { return machine(3).size() >= first.size(); }));
  propose_all(*l, names("s", 0, 20));
  const std::uint64_t before = status_of(*l).last_index;
  auto promoted = change(*l, member_change::kind::promote, 4);
  ASSERT_TRUE(promoted.ok()) << promoted.message;
  // Caught up before it was made a voter: its log held the leader's when
  // the promotion was asked.
  EXPECT_GE(status_of(3).last_index, before);
  EXPECT_EQ(find_member(status_of(*l), 4)->role, member_role::voter);

  // Remove a member that does not lead (the leader hands over first in the
  // agent; here a follower goes).
  const std::size_t gone = (*l + 1) % 3;
  auto removed = change(*l, member_change::kind::remove, gone + 1);
  ASSERT_TRUE(removed.ok()) << removed.message;
  EXPECT_FALSE(find_member(status_of(*l), gone + 1));
  const auto more = names("b", 0, 50);
  propose_all(*l, more);
  auto want = first;
  const auto during = names("s", 0, 20);
  want.insert(want.end(), during.begin(), during.end());
  want.insert(want.end(), more.begin(), more.end());
  for (std::size_t i = 0; i < 4; ++i) {
    if (i == gone) continue;
    EXPECT_TRUE(eventually([&] { return machine(i).entries() == want; })) << "node n" << i + 1;
  }
  // The removed node leaves: its group closed, its directory wiped.
  ASSERT_TRUE(call([&](op_cb cb) { return node(gone).close_group(0, true, std::move(cb)); }).ok());
  EXPECT_FALSE(status_of(gone).open);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(data_dir(gone)) / "raft" / "0"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(data_dir(gone)) / "raft" / "0.wiped"));
  // One change at a time, and a node raft cannot reach is not promoted:
  // the catch-up gives up.
  stop(gone);
  auto add_back = change(*l, member_change::kind::add, gone + 1);
  ASSERT_TRUE(add_back.ok()) << add_back.message;
  auto promote_dead = change(*l, member_change::kind::promote, gone + 1);
  EXPECT_FALSE(promote_dead.ok());
  EXPECT_NE(find_member(status_of(*l), gone + 1)->role, member_role::voter);
  propose_all(*l, names("c", 0, 10));
}

// A wipe is a rename aside, then a delete: a crash in the middle of the
// delete leaves `<group>.wiped` and no group directory, never a group
// directory with a hole in its log. (Deleting in place, a kill -9 left the
// first segment and the last ones without the snapshot, and raft refused
// to start on it: "unexpected closed segment".) Such a leftover is what a
// crash leaves here: the node starts, the group opens empty when asked,
// and the leftover is gone.
TEST_F(cluster_test, a_wipe_cut_short_by_a_crash_leaves_the_group_whole_or_gone) {
  namespace fs = std::filesystem;
  make_cluster(3, 1);
  start_all();
  auto l = leader(0, 10s);
  ASSERT_TRUE(l) << "no leader";
  propose_all(*l, names("w", 0, 40));
  const std::size_t victim = (*l + 1) % 3;
  EXPECT_TRUE(eventually([&] { return machine(victim).size() >= 40; }));
  stop(victim);
  const fs::path group = fs::path(data_dir(victim)) / "raft" / "0";
  const fs::path trash = fs::path(data_dir(victim)) / "raft" / "0.wiped";
  // The crash: renamed aside, then cut short after deleting some files.
  fs::rename(group, trash);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(trash)) files.push_back(e.path());
  ASSERT_FALSE(files.empty());
  std::sort(files.begin(), files.end());
  for (std::size_t i = 0; i + 1 < files.size(); i += 2) fs::remove(files[i]);

  // Restarted the way onceqd restarts a group whose directory is gone:
  // not opened at start; then opened without a bootstrap (a move's target).
  specs_ = [victim](std::size_t i) {
    group_spec sp;
    if (i == victim) {
      sp.open = false;
    } else {
      sp.bootstrap = {onceq::cluster::member{1}, onceq::cluster::member{2},
                      onceq::cluster::member{3}};
    }
    return std::vector<group_spec>{sp};
  };
  start(victim);
  EXPECT_FALSE(status_of(victim).open);
  ASSERT_TRUE(call([&](op_cb cb) { return node(victim).open_group(0, {}, std::move(cb)); }).ok());
  EXPECT_TRUE(status_of(victim).open);
  EXPECT_FALSE(fs::exists(trash));
  EXPECT_TRUE(fs::exists(group));
  // The other two still make progress (a majority of the three).
  propose_all(*l, names("x", 0, 5));

  // And a wipe done whole leaves neither path behind.
  ASSERT_TRUE(
      call([&](op_cb cb) { return node(victim).close_group(0, true, std::move(cb)); }).ok());
  EXPECT_FALSE(fs::exists(group));
  EXPECT_FALSE(fs::exists(trash));
}

}  // namespace
}  // namespace onceq::cluster
