// Fencing tokens, produces answered from committed keys, keys derived from
// the message, the supersede conflict policy and key history, on the
// injected clock and the in-memory store.

#include <gtest/gtest.h>

#include <string>

#include "broker_test_support.hpp"
#include "http/codec.hpp"

namespace onceq::testing {
namespace {

class IdempotencyTest : public BrokerTest {
 protected:
  IdempotencyTest() {
    inspector_ = &http::json_inspector();
    restart();
  }
  result<produce_reply> produce_cmd_of(const std::string& topic, std::vector<message_in> ms,
                                       std::vector<std::string> skip = {}) {
    produce_cmd cmd{topic, std::move(ms), {}, std::move(skip)};
    return b().produce(cmd);
  }
  static message_in json_msg(std::string value, std::string envelope = {}) {
    message_in m;
    m.value = std::move(value);
    m.envelope_json = std::move(envelope);
    return m;
  }
  std::vector<key_event::kind> history(const std::string& topic, const std::string& group,
                                       const std::string& k) {
    auto h = b().get_key_history(key_query{topic, group, k, ""});
    EXPECT_TRUE(h.ok()) << (h.ok() ? "" : h.err().message);
    std::vector<key_event::kind> out;
    if (h.ok())
      for (const auto& e : h->events) out.push_back(e.what);
    return out;
  }
};

// ---- fencing tokens -----------------------------------------------------

TEST_F(IdempotencyTest, TokensIncreasePerGroupAndOnEveryRedelivery) {
  create("t");
  produce("t", "a", "k1");
  produce("t", "b", "k2");
  auto d = consume("t", "g", "o", 1, 100);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].fencing_token, 1u);
  advance(200);  // the lease lapses: the redelivery gets a new token
  auto again = consume("t", "g", "o", 2);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].fencing_token, 2u);
  EXPECT_EQ(again[1].fencing_token, 3u);
  // Another group counts on its own.
  EXPECT_EQ(consume("t", "h", "o", 1).at(0).fencing_token, 1u);
}

TEST_F(IdempotencyTest, AStaleTokenIsRefusedAndChangesNothing) {
  create("t");
  produce("t", "a", "k1");
  auto d = consume("t", "g", "o", 1).at(0);
  const auto before = b().describe_state();
  auto bad = ack_cmd{ref(d, "g", "o"), "{}", {}};
  bad.ref.fencing_token = d.fencing_token + 1;
  EXPECT_EQ(b().ack(bad).code(), errc::failed_precondition);
  nack_cmd n{ref(d, "g", "o"), "x", std::nullopt};
  n.ref.fencing_token = 99;
  EXPECT_EQ(b().nack(n).code(), errc::failed_precondition);
  extend_cmd e{ref(d, "g", "o"), 1000};
  e.ref.fencing_token = 99;
  EXPECT_EQ(b().extend(e).code(), errc::failed_precondition);
  EXPECT_EQ(stats("t", "g").stale_acks_rejected, 3u);
  EXPECT_EQ(key("t", "g", "k1").st, key_info::state::leased);
  EXPECT_EQ(key("t", "g", "k1").fencing_token, d.fencing_token);
  // The right token commits, and the committed key keeps it.
  auto good = ack_cmd{ref(d, "g", "o"), "{}", {}};
  good.ref.fencing_token = d.fencing_token;
  ASSERT_TRUE(b().ack(good).ok());
  EXPECT_EQ(key("t", "g", "k1").st, key_info::state::committed);
  EXPECT_EQ(key("t", "g", "k1").fencing_token, d.fencing_token);
  EXPECT_NE(b().describe_state(), before);
}

TEST_F(IdempotencyTest, BatchAckFencesEachItem) {
  create("t");
  produce("t", "a", "k1");
  produce("t", "b", "k2");
  auto d = consume("t", "g", "o", 2);
  ASSERT_EQ(d.size(), 2u);
  ack_batch_cmd cmd{"t", "g", "o", {}};
  cmd.acks.push_back(ack_item{0, d[0].offset, {}, {}, d[0].fencing_token, {}});
  cmd.acks.push_back(ack_item{0, d[1].offset, {}, {}, d[1].fencing_token + 7, {}});
  auto r = b().ack_batch(cmd);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].code, errc::ok);
  EXPECT_EQ((*r)[1].code, errc::failed_precondition);
  EXPECT_EQ(key("t", "g", "k2").st, key_info::state::leased);
}

TEST_F(IdempotencyTest, TokensAreNeverReusedAfterARestartOrAPurgedKey) {
  topic_settings s;
  s.key_ttl_ms = 1000;
  create("t", 1, s);
  produce("t", "a", "k1");
  auto d = consume("t", "g", "o", 1).at(0);
  ASSERT_TRUE(ack(d, "g", "o").ok());
  restart();
  advance(5000);  // the key expired and may be purged
  produce("t", "again", "k1");
  auto next = consume("t", "g", "o", 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_GT(next[0].fencing_token, d.fencing_token);
  restart();
  produce("t", "c", "k3");
  EXPECT_GT(consume("t", "g", "o", 1).at(0).fencing_token, next[0].fencing_token);
}

// ---- skip_if_committed --------------------------------------------------

TEST_F(IdempotencyTest, AProduceIsAnsweredFromKeysCommittedInEveryListedGroup) {
  create("t");
  produce("t", "a", "k1");
  ASSERT_TRUE(ack(consume("t", "billing", "o", 1).at(0), "billing", "o", R"({"id":7})").ok());
  auto r = produce_cmd_of("t", {msg("again", "k1")}, {"billing"});
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->already_committed.count(0), 1u);
  EXPECT_EQ(r->already_committed.at(0).at("billing").result_json, R"({"id":7})");
  EXPECT_EQ(r->already_committed.at(0).at("billing").owner, "o");
  auto t = b().get_topic("t");
  EXPECT_EQ(t->produced, 1u);
  EXPECT_EQ(t->produce_already_committed, 1u);
  // Not committed in "audit" (it has not even consumed): stored.
  auto both = produce_cmd_of("t", {msg("again", "k1"), msg("new", "k9")}, {"billing", "audit"});
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(both->already_committed.empty());
  EXPECT_EQ(b().get_topic("t")->produced, 3u);
}

TEST_F(IdempotencyTest, SkipIfCommittedIsValidated) {
  create("t");
  EXPECT_EQ(produce_cmd_of("t", {msg("a")}, {"g"}).code(), errc::invalid_argument);  // no key
  EXPECT_EQ(produce_cmd_of("t", {msg("a", "k")}, {"g", "g"}).code(), errc::invalid_argument);
  EXPECT_EQ(produce_cmd_of("t", {msg("a", "k")}, {""}).code(), errc::invalid_argument);
  EXPECT_EQ(b().get_topic("t")->produced, 0u);
}

// ---- derived keys ---------------------------------------------------------

TEST_F(IdempotencyTest, KeysAreDerivedFromTheEnvelopeAndTheValue) {
  topic_settings s;
  s.idempotency_key_fields = {"envelope.tenant_id", "value.order.id"};
  s.idempotency_key_include_topic = true;
  create("t", 1, s);
  auto m = json_msg(R"({"order":{"id":42}})", R"({"tenant_id":"acme"})");
  ASSERT_TRUE(produce_cmd_of("t", {m}).ok());
  ASSERT_EQ(consume("t", "g", "o", 1).size(), 1u);
  EXPECT_EQ(key("t", "g", "t:acme:42").st, key_info::state::leased);
  // An explicit key wins.
  auto explicit_key = json_msg(R"({"order":{"id":43}})", R"({"idempotency_key":"mine"})");
  explicit_key.idempotency_key = "mine";
  ASSERT_TRUE(produce_cmd_of("t", {explicit_key}).ok());
  ASSERT_EQ(consume("t", "g", "o", 1).size(), 1u);
  EXPECT_EQ(key("t", "g", "mine").st, key_info::state::leased);
}

TEST_F(IdempotencyTest, AMissingSourceIsA400UnlessOptional) {
  topic_settings s;
  s.idempotency_key_fields = {"value.order.id"};
  create("t", 1, s);
  auto r = produce_cmd_of("t", {json_msg(R"({"order":{}})")});
  ASSERT_EQ(r.code(), errc::invalid_argument);
  EXPECT_EQ(r.err().message, "message: idempotency key source 'value.order.id' is missing");
  EXPECT_EQ(produce_cmd_of("t", {json_msg("not json")}).code(), errc::invalid_argument);
  EXPECT_EQ(b().get_topic("t")->produced, 0u);
  s.idempotency_key_optional = true;
  create("u", 1, s);
  EXPECT_TRUE(produce_cmd_of("u", {json_msg("not json")}).ok());
}

// Errors name the message they are about: "message" alone (above),
// "messages[i]" in a batch (formatted only when there is an error to name).
TEST_F(IdempotencyTest, ErrorsNameTheMessageOfABatch) {
  topic_settings s;
  s.idempotency_key_fields = {"value.order.id"};
  create("t", 1, s);
  auto two = produce_cmd_of("t", {json_msg(R"({"order":{"id":1}})"), json_msg(R"({"order":{}})")});
  ASSERT_EQ(two.code(), errc::invalid_argument);
  EXPECT_EQ(two.err().message, "messages[1]: idempotency key source 'value.order.id' is missing");
  auto bad = json_msg(R"({"order":{"id":2}})");
  bad.partition_override = 3;
  auto three = produce_cmd_of("t", {json_msg(R"({"order":{"id":1}})"), bad});
  ASSERT_EQ(three.code(), errc::invalid_argument);
  EXPECT_EQ(three.err().message, "messages[1].envelope.partition_override must be between 0 and 0");
  bad.partition_override.reset();
  bad.value.clear();
  auto single = produce_cmd_of("t", {bad});
  EXPECT_EQ(single.err().message, "value must be a non-empty string");
  create("u");
  produce_cmd cmd{"u", {msg("a"), msg("b", "kb")}, {}, {}};
  cmd.skip_if_committed = {"g"};
  auto skip = b().produce(cmd);
  ASSERT_EQ(skip.code(), errc::invalid_argument);
  EXPECT_EQ(skip.err().message, "messages[0]: skip_if_committed needs an idempotency key");
  EXPECT_EQ(b().get_topic("t")->produced + b().get_topic("u")->produced, 0u);
}

TEST_F(IdempotencyTest, LongDerivedKeysAreHashed) {
  topic_settings s;
  s.idempotency_key_fields = {"value.v"};
  create("t", 1, s);
  const std::string big(300, 'x');
  ASSERT_TRUE(produce_cmd_of("t", {json_msg(R"({"v":")" + big + R"("})")}).ok());
  ASSERT_EQ(consume("t", "g", "o", 1).size(), 1u);
  EXPECT_EQ(key("t", "g", "sha256:" + http::json_inspector().sha256_hex(big)).st,
            key_info::state::leased);
}

TEST_F(IdempotencyTest, DedupByContentStoresEqualMessagesOnce) {
  topic_settings s;
  s.dedup_by_content = true;
  create("t", 1, s);
  auto a = produce_cmd_of("t", {json_msg("same")});
  auto b2 = produce_cmd_of("t", {json_msg("same")});
  auto c = produce_cmd_of("t", {json_msg("other")});
  ASSERT_TRUE(a.ok() && b2.ok() && c.ok());
  EXPECT_TRUE(b2->results[0].duplicate);
  EXPECT_FALSE(c->results[0].duplicate);
  EXPECT_EQ(b().get_topic("t")->produced, 2u);
}

TEST_F(IdempotencyTest, BadKeySettingsAreRefusedAndCreateNothing) {
  for (auto fields : std::vector<std::vector<std::string>>{
           {"value"}, {"value..a"}, {"body.a"}, {"value.a."}, {"envelope.idempotency_key"}}) {
    topic_settings s;
    s.idempotency_key_fields = fields;
    EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, s}).code(), errc::invalid_argument)
        << fields[0];
  }
  EXPECT_TRUE(b().list_topics().empty());
  topic_settings s;
  s.key_history = true;
  create("t", 1, s);
  topic_settings other = s;
  other.key_conflict = topic_settings::conflict::supersede;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, other}).code(), errc::already_exists);
  EXPECT_FALSE(b().create_topic(create_topic_cmd{"t", 1, s})->created);
}

// ---- key_conflict ---------------------------------------------------------

TEST_F(IdempotencyTest, SupersedeAcknowledgesTheOlderWaitingMessage) {
  topic_settings s;
  s.key_conflict = topic_settings::conflict::supersede;
  create("t", 1, s);
  produce("t", "old", "k1");
  produce("t", "new", "k1");
  auto d = consume("t", "g", "o", 10);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].value, "new");
  EXPECT_EQ(stats("t", "g").superseded, 1u);
  // hold (the default) delivers both, one after the other.
  create("h");
  produce("h", "old", "k1");
  produce("h", "new", "k1");
  auto first = consume("h", "g", "o", 10);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].value, "old");
}

TEST_F(IdempotencyTest, ALeasedMessageIsNotSuperseded) {
  topic_settings s;
  s.key_conflict = topic_settings::conflict::supersede;
  create("t", 1, s);
  produce("t", "old", "k1");
  auto d = consume("t", "g", "o", 1).at(0);
  produce("t", "new", "k1");
  EXPECT_TRUE(consume("t", "g", "p", 1).empty());  // parked behind the lease
  ASSERT_TRUE(ack(d, "g", "o").ok());
  EXPECT_EQ(stats("t", "g").superseded, 0u);
}

// ---- history --------------------------------------------------------------

TEST_F(IdempotencyTest, HistoryTellsAKeysLife) {
  topic_settings s;
  s.key_history = true;
  s.key_conflict = topic_settings::conflict::supersede;
  create("t", 1, s);
  produce("t", message_in{std::nullopt, "a", "", "k1", "", "m1", {}, {}, {}, {}, {}});
  produce("t", message_in{std::nullopt, "a", "", "k1", "", "m1", {}, {}, {}, {}, {}});  // window
  consume("t", "g", "o", 1, 100);
  advance(200);
  auto d = consume("t", "g", "o", 1).at(0);
  ASSERT_TRUE(nack(d, "g", "o", 0, "boom").ok());
  d = consume("t", "g", "o", 1).at(0);
  ASSERT_TRUE(ack(d, "g", "o", R"({"r":1})").ok());
  produce("t", "b", "k1");
  EXPECT_TRUE(consume("t", "g", "o", 1).empty());  // committed: auto-acked
  using k = key_event::kind;
  EXPECT_EQ(history("t", "g", "k1"),
            (std::vector<k>{k::produce_duplicate, k::leased, k::lease_expired, k::leased, k::nacked,
                            k::leased, k::committed, k::duplicate_auto_acked}));
  auto h = b().get_key_history(key_query{"t", "g", "k1", ""});
  EXPECT_EQ(h->events[6].result_bytes, 7u);
  EXPECT_EQ(h->events[5].fencing_token, 3u);
  restart();
  EXPECT_EQ(history("t", "g", "k1").size(), 8u) << "kept across a restart";
}

TEST_F(IdempotencyTest, HistoryIsBoundedAndOnlyForTopicsThatAskForIt) {
  topic_settings s;
  s.key_history = true;
  create("t", 1, s);
  produce("t", "a", "k1");
  for (int i = 0; i < 40; ++i) {
    auto d = consume("t", "g", "o", 1);
    ASSERT_EQ(d.size(), 1u);
    ASSERT_TRUE(nack(d[0], "g", "o", 0).ok());
  }
  auto h = b().get_key_history(key_query{"t", "g", "k1", ""});
  ASSERT_EQ(h->events.size(), 64u);
  EXPECT_EQ(h->events.back().what, key_event::kind::nacked);
  create("plain");
  EXPECT_EQ(b().get_key_history(key_query{"plain", "g", "k1", ""}).code(),
            errc::failed_precondition);
}

// ---- consume deadline -----------------------------------------------------

TEST_F(IdempotencyTest, NothingIsDeliveredAfterTheConsumersDeadline) {
  create("t");
  produce("t", "a");
  consume_cmd late{"t", "g", "o", {}, 1, clock_.now_ms()};
  auto r = b().consume(late);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  consume_cmd in_time{"t", "g", "o", {}, 1, clock_.now_ms() + 1};
  EXPECT_EQ(b().consume(in_time)->size(), 1u);
}

}  // namespace
}  // namespace onceq::testing
