// Workflow steps on the core: an ack that produces the next messages in
// its own command (topics of this broker), or into its outbox (topics of
// another shard), and the outbox commands on both ends.

#include <gtest/gtest.h>

#include "broker/broker.hpp"
#include "broker_test_support.hpp"

namespace onceq::testing {
namespace {

step_message step(std::string topic, std::string value, std::string msg_id = {}) {
  step_message s;
  s.topic = std::move(topic);
  s.message.value = std::move(value);
  s.message.msg_id = std::move(msg_id);
  return s;
}

class StepsTest : public BrokerTest {
 protected:
  StepsTest() {
    topic_settings s;
    s.key_history = true;
    create("orders", 1, s);
    create("charges");
  }

  // One order, leased to "w".
  delivery leased(std::string idem = "order-1") {
    produce("orders", "o1", std::move(idem));
    auto got = consume("orders", "g", "w");
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? delivery{} : got[0];
  }

  result<ack_outcome> ack_steps(const delivery& d, std::vector<step_message> next,
                                std::string owner = "w") {
    return b().ack(ack_cmd{ref(d, "g", owner), R"({"charged":true})", std::move(next)});
  }

  std::uint64_t produced(const std::string& topic) {
    auto t = b().get_topic(topic);
    return t.ok() ? t->produced : 0;
  }
};

TEST_F(StepsTest, AnAckStoresItsNextMessagesInTheSameCommand) {
  auto d = leased();
  auto r = ack_steps(d, {step("charges", "c1"), step("charges", "c2")});
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_TRUE(r->produced.has_value());
  ASSERT_EQ(r->produced->size(), 2u);
  EXPECT_EQ((*r->produced)[0].topic, "charges");
  EXPECT_EQ((*r->produced)[0].offset, 0u);
  EXPECT_EQ((*r->produced)[1].offset, 1u);
  EXPECT_FALSE((*r->produced)[0].pending);
  EXPECT_EQ(produced("charges"), 2u);
  // The key is committed with its result, and its history names the messages.
  EXPECT_EQ(key("orders", "g", "order-1").st, key_info::state::committed);
  auto h = b().get_key_history(key_query{"orders", "g", "order-1", {}});
  ASSERT_TRUE(h.ok());
  int made = 0;
  for (const auto& e : h->events)
    if (e.what == key_event::kind::produced) {
      EXPECT_EQ(e.reason, "charges");
      ++made;
    }
  EXPECT_EQ(made, 2);
  // The next step is deliverable.
  auto next = consume("charges", "g", "w2");
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].value, "c1");
}

TEST_F(StepsTest, ARefusedAckStoresNothing) {
  auto d = leased();
  const auto before = produced("charges");
  // Another owner: fenced.
  auto r = ack_steps(d, {step("charges", "c1")}, "intruder");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::failed_precondition);
  // A bad message (empty value) refuses the ack, which stays open.
  auto bad = ack_steps(d, {step("charges", "c1"), step("charges", "")});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::invalid_argument);
  EXPECT_NE(bad.err().message.find("produce[1]"), std::string::npos) << bad.err().message;
  EXPECT_EQ(produced("charges"), before);
  EXPECT_EQ(key("orders", "g", "order-1").st, key_info::state::leased);
  // Too many messages.
  std::vector<step_message> many(1001, step("charges", "x"));
  auto big = ack_steps(d, many);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.code(), errc::invalid_argument);
  // The delivery is still the owner's: the same ack works now.
  auto ok = ack_steps(d, {step("charges", "c1")});
  ASSERT_TRUE(ok.ok()) << ok.err().message;
  EXPECT_EQ(produced("charges"), before + 1);
}

TEST_F(StepsTest, AFullTargetRefusesTheAck) {
  topic_settings s;
  s.max_backlog_messages = 1;
  create("small", 1, s);
  produce("small", "fills it");
  auto d = leased();
  auto r = ack_steps(d, {step("small", "x")});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::resource_exhausted);
  EXPECT_EQ(produced("small"), 1u);
  EXPECT_EQ(key("orders", "g", "order-1").st, key_info::state::leased);
}

TEST_F(StepsTest, ARetriedAckAnswersTheSameListAndStoresNothingTwice) {
  auto d = leased();
  auto first = ack_steps(d, {step("charges", "c1"), step("elsewhere", "e1")});
  ASSERT_TRUE(first.ok()) << first.err().message;
  auto again = ack_steps(d, {step("charges", "c1"), step("elsewhere", "e1")});
  ASSERT_TRUE(again.ok()) << again.err().message;
  ASSERT_TRUE(again->produced.has_value());
  EXPECT_EQ(*again->produced, *first->produced);
  EXPECT_EQ(produced("charges"), 1u);
  EXPECT_EQ(b().outbox_metrics().depth, 1u);
}

TEST_F(StepsTest, ARetriedAckWithoutAKeyAnswersAckedWithoutAList) {
  produce("orders", "plain");
  auto got = consume("orders", "g", "w");
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(ack_steps(got[0], {step("charges", "c1")}).ok());
  auto again = ack_steps(got[0], {step("charges", "c1")});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->produced.has_value());
  EXPECT_EQ(produced("charges"), 1u);
}

TEST_F(StepsTest, ABatchRefusesOneEntryWholeAndAppliesTheOthers) {
  produce("orders", "a", "ka");
  produce("orders", "b", "kb");
  auto got = consume("orders", "g", "w");
  ASSERT_EQ(got.size(), 2u);
  ack_batch_cmd cmd{"orders", "g", "w", {}};
  cmd.acks.push_back(ack_item{0, got[0].offset, {}, "", {}, {step("charges", "")}});
  cmd.acks.push_back(ack_item{0, got[1].offset, {}, "", {}, {step("charges", "ok")}});
  auto r = b().ack_batch(cmd);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ((*r)[0].code, errc::invalid_argument);
  EXPECT_FALSE((*r)[0].produced.has_value());
  EXPECT_EQ((*r)[1].code, errc::ok);
  EXPECT_EQ(produced("charges"), 1u);
  EXPECT_EQ(key("orders", "g", "ka").st, key_info::state::leased);
  EXPECT_EQ(key("orders", "g", "kb").st, key_info::state::committed);
}

TEST_F(StepsTest, AnotherShardsTopicGoesToTheOutboxWhichSurvivesARestart) {
  auto d = leased();
  auto r = ack_steps(d, {step("elsewhere", "e1"), step("charges", "c1")});
  ASSERT_TRUE(r.ok()) << r.err().message;
  const auto& p = *r->produced;
  EXPECT_TRUE(p[0].pending);
  EXPECT_EQ(p[0].outbox_seq, 1u);
  EXPECT_FALSE(p[1].pending);
  EXPECT_EQ(b().outbox_metrics().depth, 1u);
  auto outbox_of = [](const std::string& state) { return state.substr(state.rfind("outbox")); };
  const auto before = b().describe_state();
  restart();
  EXPECT_EQ(outbox_of(b().describe_state()), outbox_of(before));
  EXPECT_EQ(outbox_of(before), "outbox next=2 1@" + std::to_string(clock_.now_ms()) + "\n");
  auto pending = b().outbox_pending(10);
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].seq, 1u);
  EXPECT_EQ((*pending)[0].msg.topic, "elsewhere");
  EXPECT_EQ((*pending)[0].msg.message.value, "e1");
  // A second ack takes the next sequence, also after the restart.
  produce("orders", "o2", "order-2");
  auto d2 = consume("orders", "g", "w");
  ASSERT_EQ(d2.size(), 1u);
  auto r2 = ack_steps(d2[0], {step("elsewhere", "e2")});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2->produced)[0].outbox_seq, 2u);
}

TEST_F(StepsTest, OutboxDoneRecordsWhereTheMessageWent) {
  auto d = leased();
  ASSERT_TRUE(ack_steps(d, {step("elsewhere", "e1")}).ok());
  outbox_appended a;
  a.seq = 1;
  a.stored = true;
  a.partition = 2;
  a.offset = 41;
  ASSERT_TRUE(b().outbox_done(outbox_done_cmd{{a}}).ok());
  EXPECT_EQ(b().outbox_metrics().depth, 0u);
  auto pending = b().outbox_pending(10);
  ASSERT_TRUE(pending.ok());
  EXPECT_TRUE(pending->empty());
  // A retried ack now answers the place.
  auto again = ack_steps(d, {step("elsewhere", "e1")});
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->produced->size(), 1u);
  EXPECT_FALSE((*again->produced)[0].pending);
  EXPECT_EQ((*again->produced)[0].partition, 2u);
  EXPECT_EQ((*again->produced)[0].offset, 41u);
  auto h = b().get_key_history(key_query{"orders", "g", "order-1", {}});
  ASSERT_TRUE(h.ok());
  ASSERT_FALSE(h->events.empty());
  EXPECT_EQ(h->events.back().what, key_event::kind::produced);
  EXPECT_EQ(h->events.back().offset, 41u);
  // Done twice: nothing more happens.
  const auto state = b().describe_state();
  ASSERT_TRUE(b().outbox_done(outbox_done_cmd{{a}}).ok());
  EXPECT_EQ(b().describe_state(), state);
}

TEST_F(StepsTest, TheTargetDropsWhatItTookBeforeAndStopsAtAFullTopic) {
  auto entry = [](std::uint64_t seq, std::string topic, std::string value) {
    return outbox_entry{seq, step(std::move(topic), std::move(value)), 0};
  };
  outbox_append_cmd cmd{
      7, {entry(1, "charges", "a"), entry(2, "nope", "b"), entry(3, "charges", "c")}};
  auto r = b().outbox_append(cmd);
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_TRUE((*r)[0].stored);
  EXPECT_EQ((*r)[1].code, errc::not_found);  // refused for good: its seq passes
  EXPECT_TRUE((*r)[2].stored);
  EXPECT_EQ((*r)[2].offset, 1u);
  EXPECT_EQ(produced("charges"), 2u);
  // The same again (a relay's resend after a crash): nothing stored.
  auto again = b().outbox_append(cmd);
  ASSERT_TRUE(again.ok());
  for (const auto& a : *again) {
    EXPECT_EQ(a.code, errc::ok);
    EXPECT_FALSE(a.stored);
  }
  EXPECT_EQ(produced("charges"), 2u);
  // Another source has its own mark.
  cmd.source = 8;
  cmd.entries = {entry(1, "charges", "x")};
  ASSERT_TRUE(b().outbox_append(cmd).ok());
  EXPECT_EQ(produced("charges"), 3u);
  // A full topic stops the command there; the entry and the rest wait.
  topic_settings s;
  s.max_backlog_messages = 1;
  create("small", 1, s);
  cmd.source = 7;
  cmd.entries = {entry(4, "small", "fits"), entry(5, "small", "full"), entry(6, "charges", "d")};
  auto full = b().outbox_append(cmd);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->size(), 2u);
  EXPECT_TRUE((*full)[0].stored);
  EXPECT_EQ((*full)[1].code, errc::resource_exhausted);
  EXPECT_EQ(produced("charges"), 3u);
  // The mark survives a restart: 4 is not taken twice, 5 is taken once there is room.
  restart();
  auto later = b().outbox_append(
      outbox_append_cmd{7, {entry(4, "small", "fits"), entry(6, "charges", "d")}});
  ASSERT_TRUE(later.ok());
  EXPECT_FALSE((*later)[0].stored);
  EXPECT_TRUE((*later)[1].stored);
  // Out of order entries are a bug of the sender.
  auto bad =
      b().outbox_append(outbox_append_cmd{7, {entry(9, "charges", "x"), entry(8, "charges", "y")}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::invalid_argument);
}

TEST_F(StepsTest, CheckProduceChangesNothing) {
  const auto before = b().describe_state();
  produce_cmd ok{"charges", {msg("x")}, {}, {}};
  EXPECT_TRUE(b().check_produce(ok).ok());
  produce_cmd unknown{"nope", {msg("x")}, {}, {}};
  EXPECT_EQ(b().check_produce(unknown).code(), errc::not_found);
  produce_cmd bad{"charges", {msg("")}, {}, {}};
  EXPECT_EQ(b().check_produce(bad).code(), errc::invalid_argument);
  EXPECT_EQ(b().describe_state(), before);
  EXPECT_EQ(produced("charges"), 0u);
}

}  // namespace
}  // namespace onceq::testing
