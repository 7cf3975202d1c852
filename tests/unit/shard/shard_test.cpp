// A shard with its loop thread: answers after durability, long-poll
// waiters woken by produce, key waiters woken by ack, one sync per loop
// iteration, commands on the loop run at once, shutdown.
#include "shard/shard.hpp"
#include "shard/loop_clients.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

#include "storage/memory_store.hpp"

namespace onceq {
namespace {

using namespace std::chrono_literals;

class ShardTest : public ::testing::Test {
 protected:
  ShardTest() : broker_(store_, clock_, nullptr), runner_(0, broker_, store_, clock_) {
    EXPECT_TRUE(broker_.recover().ok());
    runner_.start();
    auto created = call<topic_created>([](broker& b) { return b.create_topic({"t", 1, {}}); });
    EXPECT_TRUE(created.ok());
  }

  template <class T>
  result<T> call(std::function<result<T>(broker&)> fn) {
    std::promise<result<T>> p;
    auto f = p.get_future();
    runner_.execute<T>(std::move(fn), [&p](result<T> r) { p.set_value(std::move(r)); });
    return f.get();
  }

  result<produce_reply> produce(std::string value, std::string idem = {}) {
    return call<produce_reply>([value, idem](broker& b) {
      message_in m;
      m.value = value;
      m.idempotency_key = idem;
      return b.produce(produce_cmd{"t", {m}, {}, {}});
    });
  }

  // shard::consume without a wait, answered.
  result<std::vector<delivery>> consume_now(std::int64_t max) {
    std::promise<result<std::vector<delivery>>> p;
    runner_.consume(consume_cmd{"t", "g", "o", {}, max, {}}, 0,
                    [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }

  // shard::consume_after_acks of acks, then up to 10 messages.
  std::future<result<consume_after_acks_reply>> consume_after(std::vector<ack_item> items,
                                                              millis wait_ms) {
    auto p = std::make_shared<std::promise<result<consume_after_acks_reply>>>();
    auto f = p->get_future();
    runner_.consume_after_acks(
        ack_batch_cmd{"t", "g", "o", std::move(items)}, consume_cmd{"t", "g", "o", {}, 10, {}},
        wait_ms, [p](result<consume_after_acks_reply> r) { p->set_value(std::move(r)); });
    return f;
  }

  system_clock clock_;
  storage::memory_store store_;
  broker broker_;
  shard runner_;
};

// The ack of a delivery, as a batch-ack item.
ack_item ack_of(const delivery& d) {
  ack_item a;
  a.partition = d.partition;
  a.offset = d.offset;
  return a;
}

TEST_F(ShardTest, LongPollIsWokenByProduce) {
  std::promise<result<std::vector<delivery>>> p;
  auto f = p.get_future();
  auto start = std::chrono::steady_clock::now();
  runner_.consume(consume_cmd{"t", "g", "o", {}, 10, {}}, 10'000,
                  [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
  EXPECT_EQ(f.wait_for(100ms), std::future_status::timeout) << "nothing to deliver yet";
  ASSERT_TRUE(produce("hello").ok());
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].value, "hello");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(ShardTest, LongPollTimesOutEmpty) {
  std::promise<result<std::vector<delivery>>> p;
  auto f = p.get_future();
  runner_.consume(consume_cmd{"t", "g", "o", {}, 10, {}}, 50,
                  [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST_F(ShardTest, BadConsumeAnswersErrorWithoutWaiting) {
  std::promise<result<std::vector<delivery>>> p;
  auto f = p.get_future();
  runner_.consume(consume_cmd{"missing", "g", "o", {}, 10, {}}, 10'000,
                  [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get().code(), errc::invalid_argument);
}

TEST_F(ShardTest, KeyWaiterAdoptsTheCommittedResult) {
  ASSERT_TRUE(produce("charge", "order-9").ok());
  std::promise<result<std::vector<delivery>>> cp;
  runner_.consume(consume_cmd{"t", "g", "a", {}, 1, {}}, 0,
                  [&cp](result<std::vector<delivery>> r) { cp.set_value(std::move(r)); });
  auto got = cp.get_future().get();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);

  std::promise<result<key_info>> kp;
  auto kf = kp.get_future();
  runner_.wait_key(key_query{"t", "g", "order-9", {}}, 10'000,
                   [&kp](result<key_info> r) { kp.set_value(std::move(r)); });
  EXPECT_EQ(kf.wait_for(100ms), std::future_status::timeout) << "still leased";
  auto d = (*got)[0];
  auto acked = call<bool>([d](broker& b) -> result<bool> {
    ONCEQ_TRY(b.ack(
        ack_cmd{delivery_ref{"t", "g", "a", d.partition, d.offset, {}, {}}, R"({"id":1})", {}}));
    return true;
  });
  ASSERT_TRUE(acked.ok());
  ASSERT_EQ(kf.wait_for(5s), std::future_status::ready);
  auto k = kf.get();
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->st, key_info::state::committed);
  EXPECT_EQ(k->result_json, R"({"id":1})");
}

// Acks carried on the next consume: the previous batch is acked and the
// next one delivered by one command.
TEST_F(ShardTest, ConsumeAfterAcksAcksThenDelivers) {
  ASSERT_TRUE(produce("one", "k-1").ok());
  ASSERT_TRUE(produce("two").ok());
  auto first = consume_now(1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);

  ack_item done = ack_of((*first)[0]);
  done.result_json = R"({"ok":true})";
  ack_item never;  // an offset never delivered: refused on its own
  never.offset = 99;
  auto both = consume_after({done, never}, 0).get();
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->acks.size(), 2u);
  EXPECT_EQ(both->acks[0].code, errc::ok);
  EXPECT_EQ(both->acks[1].code, errc::failed_precondition);
  ASSERT_EQ(both->deliveries.size(), 1u);
  EXPECT_EQ(both->deliveries[0].value, "two");

  auto key = call<key_info>([](broker& b) { return b.get_key(key_query{"t", "g", "k-1", {}}); });
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->st, key_info::state::committed);
  EXPECT_EQ(key->result_json, R"({"ok":true})");
}

TEST_F(ShardTest, ConsumeAfterAcksLongPollsAndAnswersTheAcksWhenEmpty) {
  ASSERT_TRUE(produce("only").ok());
  auto first = consume_now(1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  auto af = consume_after({ack_of((*first)[0])}, 50);
  ASSERT_EQ(af.wait_for(5s), std::future_status::ready);
  auto both = af.get();
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->acks.size(), 1u);
  EXPECT_EQ(both->acks[0].code, errc::ok);
  EXPECT_TRUE(both->deliveries.empty());
}

TEST_F(ShardTest, ConsumeAfterAcksOnAnUnknownTopicConsumesNothing) {
  ack_batch_cmd acks{"missing", "g", "o", {}};
  acks.acks = {ack_item{}};
  std::promise<result<consume_after_acks_reply>> ap;
  runner_.consume_after_acks(
      acks, consume_cmd{"missing", "g", "o", {}, 10, {}}, 10'000,
      [&ap](result<consume_after_acks_reply> r) { ap.set_value(std::move(r)); });
  auto f = ap.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(f.get().ok());
}

TEST_F(ShardTest, StopReleasesWaitersAndRefusesNewWork) {
  std::promise<result<std::vector<delivery>>> p;
  auto f = p.get_future();
  runner_.consume(consume_cmd{"t", "g", "o", {}, 10, {}}, 60'000,
                  [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
  std::this_thread::sleep_for(50ms);
  runner_.stop();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(f.get().ok());
  EXPECT_EQ(produce("late").code(), errc::unavailable);
}

// A store whose durability the test releases by hand: answers must wait for
// it, whichever iteration of the loop registered them.
class gated_store final : public storage::memory_store {
 public:
  void when_durable(std::function<void(result<void>)> done) override {
    std::lock_guard lk(mu_);
    if (open_) {
      done({});
    } else {
      held_.push_back(std::move(done));
    }
  }
  void hold() {
    std::lock_guard lk(mu_);
    open_ = false;
  }
  // Runs every held callback, in order, and lets later ones through.
  void release() {
    std::vector<std::function<void(result<void>)>> run;
    {
      std::lock_guard lk(mu_);
      open_ = true;
      run.swap(held_);
    }
    for (auto& fn : run) fn({});
  }

 private:
  std::mutex mu_;
  bool open_ = true;
  std::vector<std::function<void(result<void>)>> held_;
};

TEST(ShardDurability, AnswersWaitForTheSyncOfTheirRound) {
  system_clock clock;
  gated_store store;
  broker b(store, clock, nullptr);
  ASSERT_TRUE(b.recover().ok());
  shard r(0, b, store, clock);
  r.start();
  std::promise<result<topic_created>> tp;
  r.execute<topic_created>(
      [](broker& br) {
        return br.create_topic({"t", 1, {}});
      },
      [&tp](result<topic_created> x) { tp.set_value(std::move(x)); });
  ASSERT_TRUE(tp.get_future().get().ok());

  store.hold();
  // A parked consumer, then a produce that wakes it: neither may answer
  // before the write both made is durable.
  std::promise<result<std::vector<delivery>>> cp;
  auto cf = cp.get_future();
  r.consume(consume_cmd{"t", "g", "o", {}, 10, {}}, 10'000,
            [&cp](result<std::vector<delivery>> x) { cp.set_value(std::move(x)); });
  std::promise<result<produce_reply>> pp;
  auto pf = pp.get_future();
  r.execute<produce_reply>(
      [](broker& br) {
        message_in m;
        m.value = "v";
        return br.produce(produce_cmd{"t", {m}, {}, {}});
      },
      [&pp](result<produce_reply> x) { pp.set_value(std::move(x)); });
  EXPECT_EQ(pf.wait_for(200ms), std::future_status::timeout) << "answered before durable";
  EXPECT_EQ(cf.wait_for(0ms), std::future_status::timeout) << "delivered before durable";

  store.release();
  ASSERT_EQ(pf.wait_for(5s), std::future_status::ready);
  ASSERT_TRUE(pf.get().ok());
  ASSERT_EQ(cf.wait_for(5s), std::future_status::ready);
  auto got = cf.get();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].value, "v");
  r.stop();
}

// The acks carried on a consume are durable before the answer says so,
// even when the consume finds nothing and answers empty after its wait.
TEST(ShardDurability, AckedEmptyConsumeWaitsForTheSync) {
  system_clock clock;
  gated_store store;
  broker b(store, clock, nullptr);
  ASSERT_TRUE(b.recover().ok());
  shard r(0, b, store, clock);
  r.start();
  std::promise<result<produce_reply>> pp;
  r.execute<produce_reply>(
      [](broker& br) -> result<produce_reply> {
        ONCEQ_TRY(br.create_topic({"t", 1, {}}));
        message_in m;
        m.value = "v";
        return br.produce(produce_cmd{"t", {m}, {}, {}});
      },
      [&pp](result<produce_reply> x) { pp.set_value(std::move(x)); });
  ASSERT_TRUE(pp.get_future().get().ok());
  std::promise<result<std::vector<delivery>>> cp;
  r.consume(consume_cmd{"t", "g", "o", {}, 10, {}}, 0,
            [&cp](result<std::vector<delivery>> x) { cp.set_value(std::move(x)); });
  auto got = cp.get_future().get();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);

  store.hold();
  ack_batch_cmd acks{"t", "g", "o", {ack_of((*got)[0])}};
  std::promise<result<consume_after_acks_reply>> ap;
  auto af = ap.get_future();
  r.consume_after_acks(acks, consume_cmd{"t", "g", "o", {}, 10, {}}, 20,
                       [&ap](result<consume_after_acks_reply> x) { ap.set_value(std::move(x)); });
  EXPECT_EQ(af.wait_for(300ms), std::future_status::timeout) << "answered before durable";
  store.release();
  ASSERT_EQ(af.wait_for(5s), std::future_status::ready);
  auto both = af.get();
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->acks.size(), 1u);
  EXPECT_EQ(both->acks[0].code, errc::ok);
  EXPECT_TRUE(both->deliveries.empty());
  r.stop();
}

// A store that counts when_durable calls (one per loop iteration that
// wrote) and can fail them, as a failed WAL sync does.
class counting_store final : public storage::memory_store {
 public:
  void when_durable(std::function<void(result<void>)> done) override {
    calls_.fetch_add(1);
    if (fail_.load()) {
      done(make_error(errc::unavailable, "wal sync failed: injected"));
    } else {
      done({});
    }
  }
  // A sync made on the loop: counted apart from when_durable.
  void sync_here(std::function<void(result<void>)> done) override {
    here_.fetch_add(1);
    done({});
  }
  int calls() const { return calls_.load(); }
  int here() const { return here_.load(); }
  void fail(bool on) { fail_.store(on); }
  bool sync_idle() const override { return idle_.load(); }
  void set_idle(bool on) { idle_.store(on); }
  void watch_write_stalls() override { watches_stalls_.store(true); }
  bool watches_stalls() const { return watches_stalls_.load(); }

 private:
  std::atomic<int> calls_{0};
  std::atomic<int> here_{0};
  std::atomic<bool> fail_{false};
  std::atomic<bool> idle_{false};
  std::atomic<bool> watches_stalls_{false};
};

class ShardLoopTest : public ::testing::Test {
 protected:
  explicit ShardLoopTest(shard_options opts = {})
      : broker_(store_, clock_, nullptr), shard_(0, broker_, store_, clock_, opts) {
    EXPECT_TRUE(broker_.recover().ok());
    shard_.start();
    EXPECT_TRUE(on_loop([this] { return broker_.create_topic({"t", 1, {}}).ok(); }));
  }
  ~ShardLoopTest() override { shard_.stop(); }

  // Runs fn on the shard's loop and answers what it returned.
  template <class Fn>
  std::invoke_result_t<Fn> on_loop(Fn fn) {
    std::promise<std::invoke_result_t<Fn>> p;
    boost::asio::post(shard_.context(), [&] { p.set_value(fn()); });
    return p.get_future().get();
  }

  std::function<result<produce_reply>(broker&)> produce_fn(std::string value) {
    return [value](broker& b) {
      message_in m;
      m.value = value;
      return b.produce(produce_cmd{"t", {m}, {}, {}});
    };
  }

  system_clock clock_;
  counting_store store_;
  broker broker_;
  shard shard_;
};

TEST_F(ShardLoopTest, ACommandOnItsOwnLoopRunsAtOnce) {
  // From the loop: the command has run when execute returns (no hand-off);
  // from another thread it crosses to the loop.
  const bool ran_inline = on_loop([this] {
    bool ran = false;
    shard_.execute<produce_reply>(
        [&ran, fn = produce_fn("a")](broker& b) {
          ran = true;
          return fn(b);
        },
        [](result<produce_reply>) {});
    return ran && shard_.on_loop();
  });
  EXPECT_TRUE(ran_inline);
  EXPECT_FALSE(shard_.on_loop());
}

TEST_F(ShardLoopTest, ItsStoreCountsWriteStallsOnceTheLoopRuns) {
  // What the loop waited for is counted (rocksdb_store_test); recovery,
  // before start, is not the loop.
  EXPECT_TRUE(store_.watches_stalls());
}

TEST_F(ShardLoopTest, OneSyncCoversEveryCommandOfAnIteration) {
  const int before = store_.calls();
  std::atomic<int> answered{0};
  std::promise<void> all;
  on_loop([&] {
    for (int i = 0; i < 10; ++i) {
      shard_.execute<produce_reply>(produce_fn("m" + std::to_string(i)),
                                    [&answered, &all](result<produce_reply> r) {
                                      EXPECT_TRUE(r.ok());
                                      if (answered.fetch_add(1) == 9) all.set_value();
                                    });
    }
    return 0;
  });
  // The answers are released at the end of that iteration, by one sync.
  // (Waited for: a job posted from here may still run in that iteration,
  // which drains everything ready before it ends.)
  ASSERT_EQ(all.get_future().wait_for(5s), std::future_status::ready);
  const int after = on_loop([&] { return store_.calls(); });
  EXPECT_EQ(answered.load(), 10);
  EXPECT_EQ(after - before, 1);
}

// A connection that is not waiting for an answer is idle; once it has
// been idle through a whole generation (the loop turns one every
// k_quiet_after) it is quiet and no longer keeps the loop from syncing
// itself.
TEST(LoopClientsTest, AConnectionIsQuietOnceIdleThroughAWholeGeneration) {
  boost::asio::io_context ctx;
  loop_clients& c = loop_clients::of(ctx);
  auto t = std::chrono::steady_clock::now();
  c.turn(t);
  const auto a = c.connected();
  const auto b = c.connected();
  c.request_sent(a);
  EXPECT_EQ(c.recently_idle(), 1u);
  EXPECT_FALSE(c.all_waiting()) << "b has just connected";
  c.turn(t + loop_clients::k_quiet_after / 2);  // too soon: no new generation
  c.turn(t + loop_clients::k_quiet_after);
  EXPECT_EQ(c.recently_idle(), 1u) << "idle since the last generation";
  EXPECT_FALSE(c.all_waiting());
  c.turn(t + 2 * loop_clients::k_quiet_after);
  EXPECT_EQ(c.recently_idle(), 0u);
  EXPECT_TRUE(c.all_waiting()) << "b is quiet";

  // a's answer makes it idle, recently; its next request settles that.
  const auto a2 = c.answered();
  EXPECT_FALSE(c.all_waiting()) << "nobody waits";
  EXPECT_EQ(c.recently_idle(), 1u);
  c.request_sent(a2);
  EXPECT_EQ(c.recently_idle(), 0u);
  EXPECT_TRUE(c.all_waiting());

  // b wakes: a request settles nothing (it was quiet), and its answer
  // makes it recently idle again.
  c.request_sent(b);
  EXPECT_EQ(c.waiting(), 2u);
  EXPECT_EQ(c.recently_idle(), 0u);
  const auto b2 = c.answered();
  EXPECT_FALSE(c.all_waiting());
  c.disconnected(b2);
  EXPECT_TRUE(c.all_waiting()) << "only a is left, waiting";
  EXPECT_EQ(c.recently_idle(), 0u);
  c.disconnected(c.answered());
  EXPECT_EQ(c.connections(), 0u);
  EXPECT_EQ(c.waiting(), 0u);
  EXPECT_EQ(c.recently_idle(), 0u);
}

// The loop syncs a round itself (store::sync_here) only while every
// connection it serves waits for an answer (shard/loop_clients.hpp, as
// the HTTP sessions count themselves) and the store's syncer is idle;
// otherwise the round goes to the syncer (when_durable).
// The round must reach the iteration's end: a handler made slow by a busy
// machine would otherwise hand it to the idle syncer early
// (flush_if_disk_idle), as CI saw once.
class ShardLoopEndTest : public ShardLoopTest {
 protected:
  ShardLoopEndTest() : ShardLoopTest(no_early_sync()) {}
  static shard_options no_early_sync() {
    shard_options o;
    o.early_sync_age = std::chrono::hours(1);
    return o;
  }
};

TEST_F(ShardLoopEndTest, TheLoopSyncsItselfOnlyWhileEveryConnectionWaitsOnAnIdleSyncer) {
  loop_clients& clients = loop_clients::of(shard_.context());
  // The test turns the generations: an hour ahead of the loop's own turns.
  auto when = std::chrono::steady_clock::now() + std::chrono::hours(1);
  const auto turn = [&] {
    when += loop_clients::k_quiet_after;
    on_loop([&] {
      clients.turn(when);
      return 0;
    });
  };
  turn();
  struct shape {
    int quiet, connections, waiting;  // waiting: of the connections that are not quiet
    bool idle, on_loop;
  };
  const shape shapes[] = {{0, 1, 1, true, true},
                          {0, 4, 4, true, true},
                          {0, 2, 1, true, false},
                          {0, 0, 0, true, false},
                          {0, 1, 0, true, false},
                          {0, 1, 1, false, false},
                          {0, 3, 3, false, false},
                          // Connections idle through a whole generation do not count.
                          {1, 1, 1, true, true},
                          {3, 1, 1, true, true},
                          {1, 2, 1, true, false},
                          {1, 1, 0, true, false},
                          {2, 0, 0, true, false},
                          {1, 1, 1, false, false}};
  for (const shape& s : shapes) {
    std::vector<std::uint64_t> since;  // each connection's idle generation
    for (int i = 0; i < s.quiet; ++i) since.push_back(clients.connected());
    if (s.quiet > 0) {
      turn();
      turn();
    }
    for (int i = 0; i < s.connections; ++i) since.push_back(clients.connected());
    for (int i = 0; i < s.waiting; ++i) clients.request_sent(since[s.quiet + i]);
    store_.set_idle(s.idle);
    const int here = on_loop([&] { return store_.here(); });
    const int calls = on_loop([&] { return store_.calls(); });
    std::promise<result<produce_reply>> answer;
    shard_.execute<produce_reply>(
        produce_fn("m"), [&answer](result<produce_reply> r) { answer.set_value(std::move(r)); });
    auto f = answer.get_future();
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
    EXPECT_TRUE(f.get().ok());
    const std::string what = "quiet " + std::to_string(s.quiet) + ", connections " +
                             std::to_string(s.connections) + ", waiting " +
                             std::to_string(s.waiting) + ", idle " + std::to_string(s.idle);
    EXPECT_EQ(on_loop([&] { return store_.here(); }) - here, s.on_loop ? 1 : 0) << what;
    EXPECT_EQ(on_loop([&] { return store_.calls(); }) - calls, s.on_loop ? 0 : 1) << what;
    for (int i = 0; i < s.waiting; ++i) since[s.quiet + i] = clients.answered();
    for (const auto g : since) clients.disconnected(g);
    EXPECT_EQ(clients.connections(), 0u) << what;
    EXPECT_EQ(clients.recently_idle(), 0u) << what;
  }
  store_.set_idle(false);
}

// Three commands run by three handlers of one iteration, each handler 1 ms
// long: while the disk waits for work each handler's writes go to it at once
// (three syncs, the first overlapping the rest of the iteration); while it
// is busy they wait for the iteration's end (one sync). Handlers shorter
// than a WAL sync keep one round (the next test).
TEST_F(ShardLoopTest, AnIdleDiskGetsEachLongHandlersWritesAtOnce) {
  for (const bool idle : {true, false}) {
    store_.set_idle(idle);
    const int before = on_loop([&] { return store_.calls(); });
    std::atomic<int> answered{0};
    std::promise<void> all;
    on_loop([&] {
      for (int i = 0; i < 3; ++i) {
        boost::asio::post(shard_.context(), [&, i] {
          shard_.execute<produce_reply>(produce_fn("m" + std::to_string(i)),
                                        [&answered, &all](result<produce_reply> r) {
                                          EXPECT_TRUE(r.ok());
                                          if (answered.fetch_add(1) == 2) all.set_value();
                                        });
          std::this_thread::sleep_for(1ms);  // the rest of a long handler
        });
      }
      return 0;
    });
    ASSERT_EQ(all.get_future().wait_for(5s), std::future_status::ready);
    const int after = on_loop([&] { return store_.calls(); });
    EXPECT_EQ(after - before, idle ? 3 : 1) << "idle " << idle;
  }
}

TEST_F(ShardLoopTest, ManyCheapAnswersShareTheIterationsSyncEvenWithAnIdleDisk) {
  // 20 quick produces, a 300 us pause, 20 more: the round is old enough at
  // the pause, but its answers were cheap, so it waits for the iteration's
  // end (handed over at the pause, it would take two syncs).
  store_.set_idle(true);
  const int before = on_loop([&] { return store_.calls(); });
  static constexpr int n = 40;
  std::atomic<int> answered{0};
  std::promise<void> all;
  std::chrono::steady_clock::duration busy{};  // loop only: the produces' time
  // Loop only: when the first produce began and when the first after the
  // pause did, the round's age when the loop looks at it after the pause.
  std::chrono::steady_clock::time_point first_began, resumed;
  on_loop([&] {
    for (int i = 0; i < n; ++i) {
      if (i == n / 2) {
        boost::asio::post(shard_.context(), [] { std::this_thread::sleep_for(300us); });
      }
      boost::asio::post(shard_.context(), [&, i] {
        const auto began = std::chrono::steady_clock::now();
        if (i == 0) first_began = began;
        if (i == n / 2) resumed = began;
        shard_.execute<produce_reply>(produce_fn("s" + std::to_string(i)),
                                      [&answered, &all](result<produce_reply> r) {
                                        EXPECT_TRUE(r.ok());
                                        if (answered.fetch_add(1) == n - 1) all.set_value();
                                      });
        busy += std::chrono::steady_clock::now() - began;
      });
    }
    return 0;
  });
  ASSERT_EQ(all.get_future().wait_for(5s), std::future_status::ready);
  const int after = on_loop([&] { return store_.calls(); });
  // On a machine where a produce takes 50 us or more the answers are not
  // cheap, and this proves nothing.
  if (busy >= n * 50us) GTEST_SKIP() << "the produces took " << busy / 1us << " us";
  // The rule reads the round's wall age: a pause that overslept (a loaded
  // machine: the loop waited for a core) makes the first half as old as
  // 50 us an answer, and handing it over is then right.
  if (resumed - first_began >= n / 2 * 50us) {
    GTEST_SKIP() << "the first half and the pause took " << (resumed - first_began) / 1us << " us";
  }
  EXPECT_EQ(after - before, 1);
}

TEST_F(ShardLoopTest, AParkedKeyWaiterGetsTheFailedSyncNotCommitted) {
  // Deliver a keyed message, park a waiter on its key, then ack while the
  // WAL sync fails: the waiter must not hear "committed".
  auto produced = on_loop([this] {
    message_in m;
    m.value = "v";
    m.idempotency_key = "k1";
    return broker_.produce(produce_cmd{"t", {m}, {}, {}}).ok();
  });
  ASSERT_TRUE(produced);
  auto got = on_loop([this] { return broker_.consume(consume_cmd{"t", "g", "o", {}, 1, {}}); });
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  std::promise<result<key_info>> kp;
  auto kf = kp.get_future();
  shard_.wait_key(key_query{"t", "g", "k1", {}}, 10'000,
                  [&kp](result<key_info> r) { kp.set_value(std::move(r)); });
  EXPECT_EQ(kf.wait_for(100ms), std::future_status::timeout);
  store_.fail(true);
  std::promise<result<void>> ap;
  shard_.execute<void>(
      [d = (*got)[0]](broker& b) {
        auto r = b.ack(ack_cmd{delivery_ref{"t", "g", "o", d.partition, d.offset, {}, {}}, {}, {}});
        if (!r.ok()) return result<void>(std::move(r).err());
        return result<void>();
      },
      [&ap](result<void> r) { ap.set_value(std::move(r)); });
  EXPECT_EQ(ap.get_future().get().code(), errc::unavailable);
  ASSERT_EQ(kf.wait_for(5s), std::future_status::ready);
  auto k = kf.get();
  ASSERT_FALSE(k.ok()) << "a parked key waiter was told committed though the ack's sync failed";
  EXPECT_EQ(k.code(), errc::unavailable);
  store_.fail(false);
}

TEST_F(ShardLoopTest, ANotFreshQueryIsAnsweredWhileSyncsFailAndAFreshOneIsNot) {
  // /metrics reads not fresh: a storage fault that fails every sync (a WAL
  // write that could not be written) must not take it down with the
  // writes; a fresh read must not show what the failed sync did not make
  // durable.
  auto produced = on_loop([this] {
    message_in m;
    m.value = "v";
    return broker_.produce(produce_cmd{"t", {m}, {}, {}}).ok();
  });
  ASSERT_TRUE(produced);
  store_.fail(true);
  // A write first, so that the iteration the queries run in has a sync to fail.
  std::promise<result<void>> wp;
  shard_.execute<void>(
      [](broker& b) -> result<void> {
        message_in m;
        m.value = "w";
        auto r = b.produce(produce_cmd{"t", {m}, {}, {}});
        if (!r.ok()) return std::move(r).err();
        return {};
      },
      [&wp](result<void> r) { wp.set_value(std::move(r)); });
  EXPECT_EQ(wp.get_future().get().code(), errc::unavailable);
  auto ask = [this](bool fresh) {
    std::promise<result<std::vector<topic_info>>> p;
    shard_.query<std::vector<topic_info>>(
        fresh, [](broker& b) { return b.metrics(); },
        [&p](result<std::vector<topic_info>> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  };
  auto stale = ask(false);
  ASSERT_TRUE(stale.ok()) << stale.err().message;
  EXPECT_FALSE(stale->empty());
  EXPECT_EQ(ask(true).code(), errc::unavailable);
  store_.fail(false);
}

}  // namespace
}  // namespace onceq
