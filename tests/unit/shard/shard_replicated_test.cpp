// A shard of a cluster (shard.hpp with a shard_log): commands that write are
// proposed and answered from their apply, a node that does not lead answers
// unavailable with the leader, long-polls and key waits are woken by applied
// entries, and only the leader proposes ticks when the broker's timers are
// due (on the injected clock). The log here is a fake: one thread applying
// entries in order, as raft_node's loop does, without Raft.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "broker/apply.hpp"
#include "shard/shard.hpp"
#include "storage/memory_store.hpp"

namespace onceq {
namespace {

using namespace std::chrono_literals;

// A replicated log of one node: applies on its own thread, in order.
class fake_log final : public shard_log {
 public:
  fake_log() : broker_(store_, clock_, nullptr) {
    EXPECT_TRUE(broker_.recover().ok());
    worker_ = std::thread([this] { run(); });
  }
  ~fake_log() override { stop(); }
  // Applies what is queued and ends the thread (raft_node::stop): no
  // callback reaches the shard after this.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  void propose(log_entry e, reply_fn done) override {
    if (!leader_.load()) {
      error err = make_error(errc::unavailable, "not the leader");
      err.leader = 2;
      return done(err);
    }
    post([this, e = std::move(e), done = std::move(done)] {
      auto r = apply_entry(broker_, clock_, e);
      {
        std::lock_guard lock(mu_);
        tags_.push_back(tag_of(e.cmd));
      }
      const auto d = broker_.next_deadline();
      deadline_.store(d ? *d : -1);
      std::string topic;
      if (auto* p = std::get_if<produce_cmd>(&e.cmd)) topic = p->topic;
      if (hook_) hook_(tag_of(e.cmd), topic);
      done(std::move(r));
    });
  }
  void read(bool fresh, std::function<void(broker&)> fn, std::function<void(error)> fail) override {
    if (fresh && !leader_.load()) return fail(make_error(errc::unavailable, "not the leader"));
    post([this, fn = std::move(fn)] { fn(broker_); });
  }
  bool leads() const override { return leader_.load(); }
  millis next_deadline() const override { return deadline_.load(); }
  void on_applied(std::function<void(log_tag, std::string_view)> fn) override {
    hook_ = std::move(fn);
  }

  storage::store_health log_health() const override {
    std::lock_guard lock(mu_);
    return health_;
  }

  void set_leader(bool on) { leader_.store(on); }
  void set_health(storage::store_health h) {
    std::lock_guard lock(mu_);
    health_ = std::move(h);
  }
  std::vector<log_tag> tags() {
    std::lock_guard lock(mu_);
    return tags_;
  }
  std::size_t count(log_tag t) {
    auto all = tags();
    return static_cast<std::size_t>(std::count(all.begin(), all.end(), t));
  }
  broker& core() { return broker_; }
  storage::memory_store& store() { return store_; }

 private:
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  storage::memory_store store_;
  log_clock clock_;
  broker broker_;
  std::function<void(log_tag, std::string_view)> hook_;
  std::atomic<bool> leader_{true};
  std::atomic<millis> deadline_{-1};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<log_tag> tags_;
  storage::store_health health_;
  bool stop_ = false;
  std::thread worker_;
};

template <class T>
std::future<T> promised(std::function<void(std::function<void(T)>)> start) {
  auto p = std::make_shared<std::promise<T>>();
  auto f = p->get_future();
  start([p](T v) { p->set_value(std::move(v)); });
  return f;
}

class ShardReplicatedTest : public ::testing::Test {
 protected:
  ShardReplicatedTest() : shard_(0, log_.core(), log_.store(), clock_, {}, &log_) {
    shard_.start();
    create_topic_cmd c{"t", 1, {}};
    c.settings.lease_ms = 1'000;
    auto r = submit(std::move(c));
    EXPECT_TRUE(r.ok()) << r.err().message;
    // A new topic's retention pass is due at once: the leader's first tick.
    EXPECT_TRUE(eventually([&] { return log_.count(log_tag::tick) == 1; })) << dump();
  }
  // As onceqd: the log stops before the shard goes (its callbacks post to
  // the shard's loop).
  ~ShardReplicatedTest() override {
    log_.stop();
    shard_.stop();
  }

  template <class Cmd>
  result<typename command_traits<Cmd>::reply> submit(Cmd cmd) {
    using R = result<typename command_traits<Cmd>::reply>;
    return promised<R>(
               [&](std::function<void(R)> done) { shard_.submit(std::move(cmd), std::move(done)); })
        .get();
  }
  result<produce_reply> produce(std::string value, std::string key = {}) {
    message_in m;
    m.value = std::move(value);
    m.idempotency_key = std::move(key);
    return submit(produce_cmd{"t", {m}, {}, {}});
  }
  std::future<result<std::vector<delivery>>> consume(millis wait_ms) {
    using R = result<std::vector<delivery>>;
    return promised<R>([&](std::function<void(R)> done) {
      shard_.consume(consume_cmd{"t", "g", "o", {}, 10, {}}, wait_ms, std::move(done));
    });
  }
  // Waits (bounded) until pred holds; the loop runs on its own thread.
  template <class Pred>
  bool eventually(Pred pred) {
    for (int i = 0; i < 500; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return pred();
  }

  std::string dump() {
    std::string out;
    for (auto t : log_.tags()) out += std::to_string(static_cast<int>(t)) + " ";
    return out;
  }
  manual_clock clock_;
  fake_log log_;
  shard shard_;
};

TEST_F(ShardReplicatedTest, AWriteIsProposedAndAnsweredWithItsApply) {
  auto r = produce("a");
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_EQ(r->results[0].offset, 0u);
  EXPECT_EQ(log_.count(log_tag::produce), 1u);
  // A read runs where the broker lives, without an entry.
  auto info =
      promised<result<topic_info>>([&](auto done) {
        shard_.execute<topic_info>([](broker& b) { return b.get_topic("t"); }, std::move(done));
      }).get();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(log_.tags().size(), 3u) << dump();  // create, tick, produce
}

TEST_F(ShardReplicatedTest, ANodeThatDoesNotLeadAnswersUnavailableWithTheLeader) {
  log_.set_leader(false);
  auto r = produce("a");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::unavailable);
  EXPECT_EQ(r.err().leader, 2u);
  EXPECT_EQ(log_.count(log_tag::produce), 0u);
  auto c = consume(1'000).get();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.err().leader, 2u);
}

TEST_F(ShardReplicatedTest, ALongPollIsWokenByAnAppliedProduce) {
  auto waiting = consume(30'000);
  ASSERT_TRUE(eventually([&] { return log_.count(log_tag::consume) == 1; })) << dump();
  EXPECT_EQ(waiting.wait_for(50ms), std::future_status::timeout);
  ASSERT_TRUE(produce("a").ok());
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  auto got = waiting.get();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].value, "a");
  EXPECT_EQ(log_.count(log_tag::consume), 2u)
      << dump();  // the empty poll, then the one that got it
}

TEST_F(ShardReplicatedTest, ALongPollEndsEmptyAtItsDeadline) {
  auto got = consume(100).get();
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
}

TEST_F(ShardReplicatedTest, TheLeaderTicksWhenALeaseRunsOutAndAFollowerNeverDoes) {
  ASSERT_TRUE(produce("a").ok());
  auto first = consume(0).get();
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  // A follower's loop goes on without proposing a tick, however late.
  log_.set_leader(false);
  clock_.advance(5'000);
  const auto before = shard_.iterations();
  ASSERT_TRUE(eventually([&] { return shard_.iterations() >= before + 5; }));
  EXPECT_EQ(log_.count(log_tag::tick), 1u) << dump();
  // The leader fires the timers: the lease expires, the message is ready.
  log_.set_leader(true);
  ASSERT_TRUE(eventually([&] { return log_.count(log_tag::tick) >= 2; }));
  auto again = consume(5'000).get();
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].attempts, 2);
}

TEST_F(ShardReplicatedTest, AKeyWaitIsWokenByTheAckThatCommitsTheKey) {
  ASSERT_TRUE(produce("a", "k1").ok());
  auto got = consume(0).get();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  auto waiting = promised<result<key_info>>([&](auto done) {
    shard_.wait_key(key_query{"t", "g", "k1", {}}, 30'000, std::move(done));
  });
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout);
  ack_cmd a;
  a.ref = delivery_ref{"t", "g", "o", (*got)[0].partition, (*got)[0].offset, {}, {}};
  ASSERT_TRUE(submit(std::move(a)).ok());
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  auto k = waiting.get();
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->st, key_info::state::committed);
}

TEST_F(ShardReplicatedTest, ExtendAndRedriveAnswerTheirOwnReplies) {
  ASSERT_TRUE(produce("a").ok());
  auto got = consume(0).get();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  extend_cmd e;
  e.ref = delivery_ref{"t", "g", "o", (*got)[0].partition, (*got)[0].offset, {}, {}};
  e.lease_ms = 5'000;
  auto extended = submit(std::move(e));
  ASSERT_TRUE(extended.ok()) << extended.err().message;
  EXPECT_EQ(extended->lease_expires_at_ms, clock_.now_ms() + 5'000);
  auto moved = submit(redrive_cmd{"t", {}});
  ASSERT_TRUE(moved.ok()) << moved.err().message;
  EXPECT_EQ(moved->moved, 0);  // nothing in the DLQ
}

TEST_F(ShardReplicatedTest, ARaftLogThatCannotBeWrittenMakesTheShardUnhealthy) {
  EXPECT_TRUE(shard_.storage_health().writable);
  log_.set_health({false, "raft log: No space left on device"});
  const auto h = shard_.storage_health();
  EXPECT_FALSE(h.writable);
  EXPECT_EQ(h.reason, "raft log: No space left on device");
  log_.set_health({});
  EXPECT_TRUE(shard_.storage_health().writable);
}

}  // namespace
}  // namespace onceq
