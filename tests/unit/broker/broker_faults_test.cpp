// Every command is one txn: a refused write or a failed read leaves the
// broker's memory exactly as it was, and the command works once the fault
// clears. The read sweep fails the n-th read of a command for every n until
// the command succeeds, so each read a command makes is covered.

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "broker/broker.hpp"
#include "broker_test_support.hpp"
#include "storage/memory_store.hpp"

namespace onceq::testing {
namespace {

// A fresh broker per scenario; the message cache is off so that consumes,
// acks and retries read the store as they would on a server with history.
struct world {
  manual_clock clock;
  storage::memory_store store;
  std::unique_ptr<broker> b;

  world() {
    broker_options opts;
    opts.message_cache_bytes = 0;
    b = std::make_unique<broker>(store, clock, nullptr, opts);
    EXPECT_TRUE(b->recover().ok());
  }
  void create(const std::string& name, topic_settings s = {}, std::int64_t partitions = 1) {
    ASSERT_TRUE(b->create_topic(create_topic_cmd{name, partitions, s}).ok());
  }
  void produce(const std::string& topic, const std::string& value, const std::string& idem = {},
               const std::string& msg_id = {}) {
    message_in m;
    m.value = value;
    m.idempotency_key = idem;
    m.msg_id = msg_id;
    auto r = b->produce(produce_cmd{topic, {m}, {}, {}});
    ASSERT_TRUE(r.ok()) << r.err().message;
  }
  std::vector<delivery> consume(const std::string& topic, const std::string& group,
                                const std::string& owner, std::int64_t max = 10,
                                std::optional<std::int64_t> lease_ms = std::nullopt) {
    auto r = b->consume(consume_cmd{topic, group, owner, lease_ms, max, {}});
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
    return r.ok() ? *r : std::vector<delivery>{};
  }
};

using setup_fn = std::function<void(world&)>;
using command_fn = std::function<errc(world&)>;  // the command's answer

template <class T>
errc code_of(const result<T>& r) {
  return r.code();
}

// The command fails with a refused write and changes nothing; after the
// fault clears and the store resumes it succeeds.
void expect_atomic_on_write_failure(const setup_fn& setup, const command_fn& command) {
  world w;
  setup(w);
  const auto before = w.b->describe_state();
  w.store.fail_writes(true);
  EXPECT_EQ(command(w), errc::unavailable);
  EXPECT_EQ(w.b->describe_state(), before) << "memory changed by a refused write";
  w.store.fail_writes(false);
  EXPECT_EQ(command(w), errc::unavailable) << "refused until the store resumes";
  ASSERT_TRUE(w.store.resume().ok());
  EXPECT_EQ(command(w), errc::ok);
  EXPECT_NE(w.b->describe_state(), before);
}

// For n = 0, 1, ...: the n-th read of the command fails. Each failure leaves
// memory as it was; eventually every read succeeds and so does the command.
void expect_atomic_on_read_failure(const setup_fn& setup, const command_fn& command,
                                   std::size_t min_reads = 1) {
  std::size_t failures = 0;
  for (std::size_t n = 0; n < 100; ++n) {
    world w;
    setup(w);
    const auto before = w.b->describe_state();
    const auto reads = w.store.reads();
    w.store.fail_reads_after(n);
    auto code = command(w);
    w.store.fail_reads_after(storage::memory_store::npos);
    if (code == errc::ok) {
      EXPECT_GE(failures, min_reads) << "the command read less than expected";
      EXPECT_GE(w.store.reads() - reads, n);
      return;
    }
    ++failures;
    EXPECT_EQ(code, errc::unavailable) << "read " << n;
    EXPECT_EQ(w.b->describe_state(), before) << "memory changed by a failed read " << n;
  }
  ADD_FAILURE() << "the command never succeeded";
}

// Both: a refused write and each failed read leave memory as it was.
void expect_atomic(const setup_fn& setup, const command_fn& command, std::size_t min_reads = 1) {
  expect_atomic_on_write_failure(setup, command);
  expect_atomic_on_read_failure(setup, command, min_reads);
}

void one_topic(world& w) {
  w.create("t");
}

void produced_one(world& w) {
  w.create("t");
  w.produce("t", "x", "k1", "m1");
}

void leased_one(world& w) {
  produced_one(w);
  ASSERT_EQ(w.consume("t", "g", "a").size(), 1u);
}

// A lease that lapsed (not yet redelivered): its owner's ack must look the
// key up in the store, since it no longer holds the key's lease.
void lapsed_one(world& w) {
  produced_one(w);
  ASSERT_EQ(w.consume("t", "g", "a", 1, 100).size(), 1u);
  w.clock.advance(200);
  w.b->tick();
}

void last_attempt_leased(world& w) {
  topic_settings s;
  s.max_attempts = 1;
  w.create("t", s);
  w.produce("t", "x", "k1");
  ASSERT_EQ(w.consume("t", "g", "a", 1, 100).size(), 1u);
}

// The same after a restart: no cached record, so the dead letter reads the
// message from the store.
void last_attempt_leased_cold(world& w) {
  last_attempt_leased(w);
  ASSERT_TRUE(w.b->recover().ok());
}

void dead_lettered_one(world& w) {
  last_attempt_leased(w);
  w.clock.advance(200);
  w.b->tick();
  auto info = w.b->get_topic("dlq.t");
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->produced, 1u);
}

const delivery_ref k_ref{"t", "g", "a", 0, 0, std::nullopt, std::nullopt};

errc do_produce(world& w) {
  message_in m;
  m.value = "y";
  m.msg_id = "m2";
  m.idempotency_key = "k2";
  return code_of(w.b->produce(produce_cmd{"t", {m, m}, {}, {}}));
}
errc do_consume(world& w) {
  return code_of(w.b->consume(consume_cmd{"t", "g", "a", std::nullopt, 10, {}}));
}
errc do_consume_new_group(world& w) {
  return code_of(w.b->consume(consume_cmd{"t", "other", "a", std::nullopt, 10, {}}));
}
errc do_ack(world& w) {
  return code_of(w.b->ack(ack_cmd{k_ref, R"({"ok":1})", {}}));
}
errc do_ack_batch(world& w) {
  return code_of(
      w.b->ack_batch(ack_batch_cmd{"t", "g", "a", {{0, 0, 1, "", {}, {}}, {0, 0, 1, "", {}, {}}}}));
}
errc do_nack(world& w) {
  return code_of(w.b->nack(nack_cmd{k_ref, "boom", std::nullopt}));
}
errc do_extend(world& w) {
  return code_of(w.b->extend(extend_cmd{k_ref, 5000}));
}
errc do_redrive(world& w) {
  return code_of(w.b->redrive(redrive_cmd{"t", std::nullopt}));
}
errc do_create(world& w) {
  return code_of(w.b->create_topic(create_topic_cmd{"u", 2, {}}));
}
errc do_delete(world& w) {
  return code_of(w.b->delete_topic("t"));
}
// The tick is not a command with an answer: it worked if the lease expiry it
// had to process is gone from the timers.
errc do_expire(world& w) {
  w.clock.set(w.clock.now_ms() + 31'000);
  const auto before = w.b->describe_state();
  w.b->tick();
  return w.b->describe_state() == before ? errc::unavailable : errc::ok;
}

// Workflow steps: an ack with produce into a topic of this broker ("u")
// and one of another shard (its outbox), each message with a dedup id.
step_message step_to(const std::string& topic, const std::string& msg_id) {
  step_message s;
  s.topic = topic;
  s.message.value = "next";
  s.message.msg_id = msg_id;
  return s;
}
void leased_one_and_u(world& w) {
  leased_one(w);
  w.create("u");
}
errc do_ack_steps(world& w) {
  return code_of(w.b->ack(ack_cmd{
      k_ref, R"({"ok":1})", {step_to("u", "s1"), step_to("elsewhere", "s2"), step_to("u", "s3")}}));
}
void stepped_to_elsewhere(world& w) {
  leased_one_and_u(w);
  ASSERT_EQ(do_ack_steps(w), errc::ok);
}
errc do_outbox_done(world& w) {
  outbox_appended a;
  a.seq = 1;
  a.stored = true;
  a.offset = 7;
  return code_of(w.b->outbox_done(outbox_done_cmd{{a}}));
}
errc do_outbox_append(world& w) {
  outbox_append_cmd cmd;
  cmd.source = 3;
  cmd.entries.push_back(outbox_entry{4, step_to("t", "o4"), 0});
  cmd.entries.push_back(outbox_entry{9, step_to("t", "o9"), 0});
  return code_of(w.b->outbox_append(cmd));
}

TEST(BrokerFaults, AckWithProduceIsAtomic) {
  expect_atomic(leased_one_and_u, do_ack_steps);
}
TEST(BrokerFaults, OutboxAppendIsAtomic) {
  expect_atomic(one_topic, do_outbox_append);
}
TEST(BrokerFaults, OutboxDoneIsAtomic) {
  expect_atomic(stepped_to_elsewhere, do_outbox_done);
}

TEST(BrokerFaults, CreateTopicIsAtomic) {
  expect_atomic_on_write_failure(one_topic, do_create);
}
TEST(BrokerFaults, DeleteTopicIsAtomic) {
  expect_atomic_on_write_failure(leased_one, do_delete);
}
TEST(BrokerFaults, ProduceIsAtomic) {
  expect_atomic(produced_one, do_produce);
}
TEST(BrokerFaults, ConsumeIsAtomic) {
  expect_atomic(produced_one, do_consume, 2);  // message, key
}
TEST(BrokerFaults, ConsumeOfANewGroupIsAtomic) {
  expect_atomic(leased_one, do_consume_new_group);
}
TEST(BrokerFaults, RedeliveryIsAtomic) {
  expect_atomic(lapsed_one, do_consume);
}
TEST(BrokerFaults, AckIsAtomic) {
  expect_atomic_on_write_failure(leased_one, do_ack);
  expect_atomic_on_write_failure(leased_one, do_ack_batch);
}
TEST(BrokerFaults, AckOfALapsedLeaseReadsTheKeyAtomically) {
  expect_atomic(lapsed_one, do_ack);
}
TEST(BrokerFaults, NackIsAtomic) {
  expect_atomic(leased_one, do_nack);  // the key's record
}
TEST(BrokerFaults, NackOfTheLastAttemptDeadLettersAtomically) {
  expect_atomic_on_write_failure(last_attempt_leased, do_nack);
  // The key record, then the message copied to the DLQ: a failed read of
  // the message no longer drops the DLQ copy.
  expect_atomic_on_read_failure(last_attempt_leased_cold, do_nack, 2);
}
TEST(BrokerFaults, ExtendIsAtomic) {
  expect_atomic_on_write_failure(leased_one, do_extend);
  expect_atomic_on_write_failure(lapsed_one, do_extend);
}
TEST(BrokerFaults, LeaseExpiryIsAtomicAndRetried) {
  expect_atomic_on_write_failure(leased_one, do_expire);
  expect_atomic_on_read_failure(last_attempt_leased_cold, do_expire, 2);
}
TEST(BrokerFaults, RedriveIsAtomic) {
  expect_atomic(dead_lettered_one, do_redrive);
}

// ---- the DLQ topic a dead letter creates ----------------------------------

// The dead letters that a restart finds in dlq.<topic>, and whether it
// finds that topic at all (nullopt: no such topic).
std::optional<std::vector<std::string>> dlq_after_restart(world& w, const std::string& topic) {
  broker fresh(w.store, w.clock, nullptr);
  EXPECT_TRUE(fresh.recover().ok());
  if (!fresh.get_topic("dlq." + topic).ok()) return std::nullopt;
  auto r = fresh.consume(consume_cmd{"dlq." + topic, "reader", "r", std::nullopt, 100, {}});
  EXPECT_TRUE(r.ok());
  std::vector<std::string> values;
  if (r.ok())
    for (const auto& d : *r) values.push_back(d.value);
  return values;
}

// For n = 0, 1, ...: the store refuses the command's n-th write (counting
// from 0). The command dead-letters into dlq.t, which does not exist yet:
// while it fails, dlq.t must not exist afterwards, neither in memory nor
// in the store (a restart does not find it); once it succeeds, dlq.t holds
// the dead letters, and a restart finds them.
void expect_dlq_only_with_its_dead_letters(const setup_fn& setup, const command_fn& command,
                                           const std::vector<std::string>& dead) {
  for (std::size_t n = 0; n < 10; ++n) {
    world w;
    setup(w);
    ASSERT_FALSE(w.b->get_topic("dlq.t").ok());
    const auto before = w.b->describe_state();
    w.store.fail_writes_after(n);
    const auto code = command(w);
    w.store.fail_writes(false);
    ASSERT_TRUE(w.store.resume().ok());
    if (code != errc::ok) {
      EXPECT_EQ(code, errc::unavailable) << "write " << n;
      EXPECT_FALSE(w.b->get_topic("dlq.t").ok()) << "in memory after failed write " << n;
      EXPECT_EQ(w.b->describe_state(), before) << "memory changed by failed write " << n;
      EXPECT_EQ(dlq_after_restart(w, "t"), std::nullopt) << "stored despite failed write " << n;
      continue;
    }
    EXPECT_TRUE(w.b->get_topic("dlq.t").ok());
    EXPECT_EQ(dlq_after_restart(w, "t"), dead);
    return;
  }
  ADD_FAILURE() << "the command never succeeded";
}

// A tick that must dead-letter: answers ok once the group counts it.
errc do_expire_dead_letters(world& w, std::uint64_t want) {
  w.clock.set(w.clock.now_ms() + 200);
  w.b->tick();
  auto t = w.b->get_topic("t");
  if (!t.ok() || !t->groups.contains("g")) return errc::internal;
  return t->groups.at("g").dead_lettered == want ? errc::ok : errc::unavailable;
}

void two_last_attempts_leased(world& w) {
  topic_settings s;
  s.max_attempts = 1;
  w.create("t", s);
  w.produce("t", "x", "k1");
  w.produce("t", "y", "k2");
  ASSERT_EQ(w.consume("t", "g", "a", 2, 100).size(), 2u);
}

TEST(BrokerFaults, TheDlqTopicIsCreatedOnlyWithItsDeadLetter) {
  // By a nack of the last attempt, and by the lease expiry of one.
  expect_dlq_only_with_its_dead_letters(last_attempt_leased, do_nack, {"x"});
  expect_dlq_only_with_its_dead_letters(
      last_attempt_leased, [](world& w) { return do_expire_dead_letters(w, 1); }, {"x"});
  // Two dead letters of one tick: the second finds the DLQ the first
  // creates in the same write.
  expect_dlq_only_with_its_dead_letters(
      two_last_attempts_leased, [](world& w) { return do_expire_dead_letters(w, 2); }, {"x", "y"});
}

TEST(BrokerFaults, OneTickCreatesTheDlqTopicsOfSeveralTopicsWithDistinctIds) {
  world w;
  topic_settings s;
  s.max_attempts = 1;
  for (const std::string name : {"t", "u"}) {
    w.create(name, s);
    w.produce(name, "from " + name, "k1");
    ASSERT_EQ(w.consume(name, "g", "a", 1, 100).size(), 1u);
  }
  w.clock.advance(200);
  w.b->tick();
  EXPECT_TRUE(w.b->get_topic("dlq.t").ok());
  EXPECT_TRUE(w.b->get_topic("dlq.u").ok());
  // A topic created next gets an id of its own too: were two of the three
  // given one id, their messages would land on the same keys.
  w.create("v");
  w.produce("v", "from v");
  EXPECT_EQ(dlq_after_restart(w, "t"), (std::vector<std::string>{"from t"}));
  EXPECT_EQ(dlq_after_restart(w, "u"), (std::vector<std::string>{"from u"}));
  broker fresh(w.store, w.clock, nullptr);
  ASSERT_TRUE(fresh.recover().ok());
  auto v = fresh.consume(consume_cmd{"v", "g", "a", std::nullopt, 10, {}});
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ((*v)[0].value, "from v");
}

// ---- idempotency features: the same guarantees on their new paths -------

topic_settings history_settings() {
  topic_settings s;
  s.key_history = true;
  return s;
}
void leased_with_history(world& w) {
  w.create("t", history_settings());
  w.produce("t", "x", "k1", "m1");
  ASSERT_EQ(w.consume("t", "g", "a").size(), 1u);
}
void two_with_one_key_supersede(world& w) {
  auto s = history_settings();
  s.key_conflict = topic_settings::conflict::supersede;
  w.create("t", s);
  w.produce("t", "old", "k1");
  w.produce("t", "new", "k1");
}
void committed_one(world& w) {
  w.create("t", history_settings());
  w.produce("t", "x", "k1", "m1");
  ASSERT_EQ(w.consume("t", "g", "a").size(), 1u);
  ASSERT_TRUE(w.b->ack(ack_cmd{k_ref, R"({"ok":1})", {}}).ok());
}
errc do_produce_skip_committed(world& w) {
  message_in m;
  m.value = "again";
  m.idempotency_key = "k1";
  auto r = w.b->produce(produce_cmd{"t", {m}, {}, {"g"}});
  if (r.ok() && r->already_committed.empty()) return errc::internal;
  return code_of(r);
}
errc do_produce_duplicate(world& w) {
  message_in m;
  m.value = "x";
  m.idempotency_key = "k1";
  m.msg_id = "m1";
  return code_of(w.b->produce(produce_cmd{"t", {m}, {}, {}}));
}
errc do_ack_fenced(world& w) {
  auto ref = k_ref;
  ref.fencing_token = 1;
  return code_of(w.b->ack(ack_cmd{ref, R"({"ok":1})", {}}));
}

TEST(BrokerFaults, FencedAckWithHistoryIsAtomic) {
  expect_atomic(leased_with_history, do_ack_fenced);  // the history record
}
TEST(BrokerFaults, ConsumeWithHistoryIsAtomic) {
  expect_atomic_on_write_failure(produced_one, do_consume);
  expect_atomic(leased_with_history, do_consume_new_group, 2);
}
TEST(BrokerFaults, NackWithHistoryIsAtomic) {
  expect_atomic(leased_with_history, do_nack, 2);  // key, history
}
TEST(BrokerFaults, SupersedeIsAtomic) {
  expect_atomic_on_write_failure(two_with_one_key_supersede, do_consume);
  // message, latest record, ..., history records
  expect_atomic_on_read_failure(two_with_one_key_supersede, do_consume, 3);
}
TEST(BrokerFaults, ProduceAnsweredFromCommittedKeysIsAtomic) {
  expect_atomic(committed_one, do_produce_skip_committed, 2);
}
TEST(BrokerFaults, ProduceDuplicateWithHistoryIsAtomic) {
  expect_atomic(committed_one, do_produce_duplicate, 2);  // dedup, history
}
TEST(BrokerFaults, LeaseExpiryWithHistoryIsAtomic) {
  expect_atomic(leased_with_history, do_expire, 1);
}

// ---- POST /v1/replay ------------------------------------------------------

// Offset 0 acked with key k1 committed, offset 1 acked without a key (the
// one a replay hands back), in a topic that keeps history and acked
// messages.
void acked_in_window(world& w) {
  auto s = history_settings();
  s.replay_window_ms = 3'600'000;
  w.create("t", s);
  w.produce("t", "x", "k1");
  w.produce("t", "y");
  auto got = w.consume("t", "g", "a");
  ASSERT_EQ(got.size(), 2u);
  for (const auto& d : got)
    ASSERT_TRUE(
        w.b->ack(ack_cmd{delivery_ref{"t", "g", "a", d.partition, d.offset, {}, {}}, "", {}}).ok());
}
replay_cmd replay_of(bool dry_run) {
  replay_cmd c;
  c.topic = "t";
  c.group = "g";
  c.partition = 0;
  c.from_offset = 0;
  c.to_offset = 10;
  c.dry_run = dry_run;
  return c;
}
errc do_replay(world& w) {
  auto r = w.b->replay(replay_of(false));
  if (r.ok() && r->replayed != 1) return errc::internal;
  return code_of(r);
}

TEST(BrokerFaults, ReplayIsAtomic) {
  expect_atomic_on_write_failure(acked_in_window, do_replay);
  // the messages, then each one's delivery record and key record
  expect_atomic_on_read_failure(acked_in_window, do_replay, 4);
}

TEST(BrokerFaults, ADryRunWorksWhileTheStoreRefusesWrites) {
  world w;
  acked_in_window(w);
  w.store.fail_writes(true);
  EXPECT_EQ(do_replay(w), errc::unavailable);
  auto r = w.b->replay(replay_of(true));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->summary[static_cast<std::size_t>(replay_outcome::would_deliver)], 1u);
}

TEST(BrokerFaults, ReadsWorkWhileTheStoreRefusesWrites) {
  world w;
  leased_one(w);
  ASSERT_TRUE(w.b->ack(ack_cmd{k_ref, R"({"r":1})", {}}).ok());
  w.store.fail_writes(true);
  ASSERT_EQ(do_produce(w), errc::unavailable);
  EXPECT_EQ(w.b->list_topics().size(), 1u);
  EXPECT_TRUE(w.b->get_topic("t").ok());
  auto k = w.b->get_key(key_query{"t", "g", "k1", ""});
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->st, key_info::state::committed);
  EXPECT_EQ(k->result_json, R"({"r":1})");
  EXPECT_FALSE(w.b->metrics().empty());
}

TEST(BrokerFaults, RefusedWritesAnswerWithARetryHint) {
  world w;
  one_topic(w);
  w.store.fail_writes(true);
  message_in m;
  m.value = "x";
  auto r = w.b->produce(produce_cmd{"t", {m}, {}, {}});
  ASSERT_EQ(r.code(), errc::unavailable);
  EXPECT_GT(r.err().retry_after_ms, 0);
}

TEST(BrokerFaults, AFailedKeyReadIsNotTakenForNoKey) {
  // Before: a key-read error in the fail path wrote a "failed" record over
  // whatever was stored. Now the nack fails and nothing is written.
  world w;
  leased_one(w);
  const auto writes = w.store.writes();
  w.store.fail_reads_after(0);
  EXPECT_EQ(do_nack(w), errc::unavailable);
  w.store.fail_reads_after(storage::memory_store::npos);
  EXPECT_EQ(w.store.writes(), writes);
}

TEST(BrokerFaults, RecoverAfterAReopenRebuildsFromTheStore) {
  world w;
  leased_one(w);
  w.produce("t", "y", "k2");
  // What a restart would see.
  broker fresh(w.store, w.clock, nullptr);
  ASSERT_TRUE(fresh.recover().ok());
  ASSERT_TRUE(w.b->recover().ok());
  // Counters are since start and not rebuilt; everything else matches.
  auto strip = [](const std::string& s) {
    std::string out;
    std::size_t at = 0;
    while (at < s.size()) {
      auto end = s.find('\n', at);
      auto line = s.substr(at, end - at);
      if (line.find(" stats ") == std::string::npos && line.rfind("next_topic_id", 0) != 0)
        out += line + "\n";
      at = end == std::string::npos ? s.size() : end + 1;
    }
    return out;
  };
  EXPECT_EQ(strip(w.b->describe_state()), strip(fresh.describe_state()));
  EXPECT_EQ(w.consume("t", "g", "b").size(), 1u) << "k2 is delivered; k1 stays leased";
}

}  // namespace
}  // namespace onceq::testing
