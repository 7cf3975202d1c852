#include "http/codec.hpp"

#include <string>

#include <gtest/gtest.h>

namespace onceq::http {
namespace {

using json = nlohmann::json;

// The params of a JSON body (its text is kept by the document).
params body(const json& j) {
  return params::json(j.dump());
}
params body_text(std::string text) {
  return params::json(text);
}
params query(std::string_view q) {
  return std::move(read_params("", q).value());
}

// The parse failed with 400 and the message mentions what.
template <class T>
::testing::AssertionResult rejected(const result<T>& r, std::string_view what) {
  if (r.ok()) return ::testing::AssertionFailure() << "accepted";
  if (r.code() != errc::invalid_argument) {
    return ::testing::AssertionFailure() << "code " << to_string(r.code());
  }
  if (r.err().message.find(what) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message '" << r.err().message << "' lacks '" << what << "'";
  }
  return ::testing::AssertionSuccess();
}

// ---- topics -----------------------------------------------------------------

TEST(CodecTest, CreateTopicDefaults) {
  topic_settings defaults;
  defaults.lease_ms = 12'345;
  auto c = parse_create_topic(body({{"name", "orders"}}), defaults);
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->name, "orders");
  EXPECT_EQ(c->partitions, 1);
  EXPECT_EQ(c->settings.lease_ms, 12'345);
  EXPECT_EQ(c->settings.key_ttl_ms, topic_settings{}.key_ttl_ms);
}

TEST(CodecTest, CreateTopicAllSettings) {
  auto c = parse_create_topic(body({{"name", "a.b_c-1"},
                                    {"partitions", 4},
                                    {"lease_ms", 1000},
                                    {"max_attempts", 3},
                                    {"backoff_ms", 10},
                                    {"max_backoff_ms", 100},
                                    {"key_ttl_ms", 0},
                                    {"dedup_window_ms", 5},
                                    {"retention_ms", 0}}),
                              {});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->partitions, 4);
  EXPECT_EQ(c->settings.lease_ms, 1000);
  EXPECT_EQ(c->settings.max_attempts, 3);
  EXPECT_EQ(c->settings.backoff_ms, 10);
  EXPECT_EQ(c->settings.max_backoff_ms, 100);
  EXPECT_EQ(c->settings.key_ttl_ms, 0);
  EXPECT_EQ(c->settings.dedup_window_ms, 5);
  EXPECT_EQ(c->settings.retention_ms, 0);
}

TEST(CodecTest, CreateTopicLimits) {
  topic_settings defaults;
  defaults.max_backlog_messages = 10;
  defaults.max_backlog_bytes = 20;
  defaults.max_inflight = 30;
  auto d = parse_create_topic(body({{"name", "t"}}), defaults);
  ASSERT_TRUE(d.ok()) << d.err().message;
  EXPECT_EQ(d->settings.max_backlog_messages, 10);
  EXPECT_EQ(d->settings.max_backlog_bytes, 20);
  EXPECT_EQ(d->settings.max_inflight, 30);
  auto c = parse_create_topic(body({{"name", "t"},
                                    {"max_backlog_messages", 0},
                                    {"max_backlog_bytes", 1 << 20},
                                    {"max_inflight", 5}}),
                              defaults);
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->settings.max_backlog_messages, 0);  // 0 overrides a default: unlimited
  EXPECT_EQ(c->settings.max_backlog_bytes, 1 << 20);
  EXPECT_EQ(c->settings.max_inflight, 5);
  for (const char* f : {"max_backlog_messages", "max_backlog_bytes", "max_inflight"}) {
    EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {f, -1}}), {}),
                         std::string(f) + " must be >= 0"));
    EXPECT_TRUE(
        rejected(parse_create_topic(body({{"name", "t"}, {f, "5"}}), {}), "must be an integer"));
  }
}

TEST(CodecTest, CreateTopicRejects) {
  EXPECT_TRUE(rejected(parse_create_topic(body({{"partitions", 1}}), {}), "name is required"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "bad name"}}), {}), "name must match"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "a/b"}}), {}), "name must match"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", ""}}), {}), "name must match"));
  EXPECT_TRUE(
      rejected(parse_create_topic(body({{"name", std::string(201, 'a')}}), {}), "name must match"));
  EXPECT_TRUE(parse_create_topic(body({{"name", std::string(200, 'a')}}), {}).ok());
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"partitions", 0}}), {}),
                       "partitions must be >= 1"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"partitions", "2"}}), {}),
                       "partitions must be an integer"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"partitions", 2.0}}), {}),
                       "partitions must be an integer"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"partitions", true}}), {}),
                       "partitions must be an integer"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"partitions", nullptr}}), {}),
                       "partitions must not be null"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"lease_ms", 0}}), {}),
                       "lease_ms must be >= 1"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"backoff_ms", -1}}), {}),
                       "backoff_ms must be >= 0"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"partitons", 2}}), {}),
                       "unknown field 'partitons'"));
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", 5}}), {}), "name must be a string"));
  EXPECT_TRUE(rejected(
      parse_create_topic(body({{"name", "t"}, {"retention_ms", 18446744073709551615ull}}), {}),
      "retention_ms must be >= 0"));
}

// ---- produce ----------------------------------------------------------------

TEST(CodecTest, ProduceSingle) {
  auto p = parse_produce(body({{"topic", "t"}, {"key", "k"}, {"value", "v"}}), "");
  ASSERT_TRUE(p.ok()) << p.err().message;
  EXPECT_FALSE(p->batch);
  ASSERT_EQ(p->cmd.messages.size(), 1u);
  EXPECT_EQ(p->cmd.topic, "t");
  EXPECT_EQ(p->cmd.messages[0].key, "k");
  EXPECT_EQ(p->cmd.messages[0].value, "v");
  EXPECT_EQ(p->cmd.messages[0].envelope_json, "");
  EXPECT_EQ(p->cmd.idempotency_header, "");
}

TEST(CodecTest, ProduceWithoutKeyHasNoKey) {
  auto p = parse_produce(body({{"topic", "t"}, {"value", "v"}}), "hdr-1");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->cmd.messages[0].key.has_value());
  EXPECT_EQ(p->cmd.idempotency_header, "hdr-1");
}

TEST(CodecTest, ProduceEnvelopeFields) {
  json env = {
      {"idempotency_key", "job-1"},
      {"tenant_id", "acme"},
      {"run_id", "r"},
      {"step_id", "s"},
      {"parent_step_id", "p"},
      {"target_topic", "x"},
      {"partition_override", 2},
      {"deadline", "2030-01-01T00:00:00Z"},
      {"retry_policy", {{"max_attempts", 5}, {"backoff_ms", 100}, {"max_backoff_ms", 1000}}},
      {"msg_id", "m-1"},
      {"key_ttl_ms", 60000},
      {"delay_ms", 500},
      {"headers", {{"trace", "abc"}, {"X-Any", "thing"}}}};
  auto p = parse_produce(body({{"topic", "t"}, {"value", "v"}, {"envelope", env}}), "");
  ASSERT_TRUE(p.ok()) << p.err().message;
  const message_in& m = p->cmd.messages[0];
  EXPECT_EQ(m.idempotency_key, "job-1");
  EXPECT_EQ(m.tenant_id, "acme");
  EXPECT_EQ(m.msg_id, "m-1");
  EXPECT_EQ(m.partition_override, 2);
  EXPECT_EQ(m.key_ttl_ms, 60000);
  EXPECT_EQ(m.delay_ms, 500);
  EXPECT_EQ(m.deadline_ms, 1893456000000);
  EXPECT_EQ(m.retry.max_attempts, 5);
  EXPECT_EQ(m.retry.backoff_ms, 100);
  EXPECT_EQ(m.retry.max_backoff_ms, 1000);
  // The envelope goes back to consumers as the producer sent it.
  EXPECT_EQ(json::parse(m.envelope_json), env);
}

TEST(CodecTest, EnvelopeIsEchoedInProducerOrderWithoutWhitespace) {
  auto p = parse_produce(body_text(R"({"topic":"t","value":"v","envelope": {
      "msg_id" : "m-1", "idempotency_key":"k \" \u00e9",
      "headers": { "z": "1", "a": "2" }, "retry_policy":{"max_attempts": 1e0 }}})"),
                         "");
  // max_attempts 1e0 is a float: rejected. The same without it is accepted.
  EXPECT_TRUE(rejected(p, "envelope.retry_policy.max_attempts must be an integer"));
  p = parse_produce(body_text(R"({"topic":"t","value":"v","envelope": {
      "msg_id" : "m-1", "idempotency_key":"k \" \u00e9",
      "headers": { "z": "1", "a": "2" }}})"),
                    "");
  ASSERT_TRUE(p.ok()) << p.err().message;
  const message_in& m = p->cmd.messages[0];
  EXPECT_EQ(m.envelope_json,
            R"({"msg_id":"m-1","idempotency_key":"k \" \u00e9","headers":{"z":"1","a":"2"}})");
  EXPECT_EQ(m.idempotency_key, "k \" \xC3\xA9");
}

TEST(CodecTest, IntegersBeyondInt64) {
  auto partitions = [](std::string literal) {
    return parse_create_topic(body_text(R"({"name":"t","partitions":)" + literal + "}"), {});
  };
  EXPECT_EQ(partitions("9223372036854775807").code(), errc::ok);
  EXPECT_TRUE(rejected(partitions("9223372036854775808"), "partitions must be >= 1"));
  EXPECT_TRUE(rejected(partitions("18446744073709551615"), "partitions must be >= 1"));
  // Past uint64 (or below int64) JSON readers see a float, as before.
  EXPECT_TRUE(rejected(partitions("18446744073709551616"), "partitions must be an integer"));
  EXPECT_TRUE(rejected(partitions("-9223372036854775809"), "partitions must be an integer"));
  EXPECT_TRUE(rejected(partitions("-9223372036854775808"), "partitions must be >= 1"));
  EXPECT_TRUE(rejected(partitions("-0"), "partitions must be >= 1"));
  EXPECT_TRUE(rejected(partitions("1.0"), "partitions must be an integer"));
  EXPECT_TRUE(rejected(partitions("1e2"), "partitions must be an integer"));
  EXPECT_TRUE(rejected(partitions("false"), "partitions must be an integer"));
  EXPECT_TRUE(rejected(partitions("[1]"), "partitions must be an integer"));
}

TEST(CodecTest, ProduceEnvelopeRejects) {
  auto with_env = [](json env) {
    return parse_produce(body({{"topic", "t"}, {"value", "v"}, {"envelope", std::move(env)}}), "");
  };
  EXPECT_TRUE(
      rejected(with_env({{"idempotency_kye", "x"}}), "unknown field 'envelope.idempotency_kye'"));
  EXPECT_TRUE(
      rejected(with_env({{"idempotency_key", 5}}), "envelope.idempotency_key must be a string"));
  EXPECT_TRUE(rejected(with_env({{"tenant_id", nullptr}}), "envelope.tenant_id must not be null"));
  EXPECT_TRUE(rejected(with_env({{"partition_override", -1}}), "envelope.partition_override"));
  EXPECT_TRUE(rejected(with_env({{"partition_override", "1"}}), "must be an integer"));
  EXPECT_TRUE(
      rejected(with_env({{"deadline", "tomorrow"}}), "envelope.deadline is not an RFC 3339"));
  EXPECT_TRUE(rejected(with_env({{"deadline", 12345}}), "envelope.deadline must be a string"));
  EXPECT_TRUE(rejected(with_env({{"retry_policy", {{"max_attempts", 1}, {"jitter", 1}}}}),
                       "unknown field 'envelope.retry_policy.jitter'"));
  EXPECT_TRUE(rejected(with_env({{"retry_policy", {{"backoff_ms", -5}}}}),
                       "envelope.retry_policy.backoff_ms must be >= 0"));
  EXPECT_TRUE(rejected(with_env({{"retry_policy", 3}}), "envelope.retry_policy must be an object"));
  EXPECT_TRUE(rejected(with_env({{"headers", {{"a", 1}}}}), "envelope.headers.a must be a string"));
  EXPECT_TRUE(rejected(with_env({{"headers", "a"}}), "envelope.headers must be an object"));
  EXPECT_TRUE(rejected(with_env({{"key_ttl_ms", 1.5}}), "envelope.key_ttl_ms must be an integer"));
  EXPECT_TRUE(rejected(with_env({{"delay_ms", -1}}), "envelope.delay_ms must be >= 0"));
  EXPECT_TRUE(rejected(with_env(json::array()), "envelope must be an object"));
  EXPECT_TRUE(
      rejected(parse_produce(body({{"topic", "t"}, {"value", "v"}, {"envelope", nullptr}}), ""),
               "envelope must not be null"));
}

TEST(CodecTest, ProduceHeadersAreFreeForm) {
  auto p = parse_produce(
      body({{"topic", "t"}, {"value", "v"}, {"envelope", {{"headers", {{"anything-goes", "1"}}}}}}),
      "");
  EXPECT_TRUE(p.ok());
}

TEST(CodecTest, ProduceRejects) {
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"value", ""}}), ""),
                       "value must be a non-empty string"));
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}}), ""), "value is required"));
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"value", json{{"a", 1}}}}), ""),
                       "value must be a string"));
  EXPECT_TRUE(
      rejected(parse_produce(body({{"topic", "t"}, {"value", 5}}), ""), "value must be a string"));
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"value", "v"}, {"key", 1}}), ""),
                       "key must be a string"));
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"value", "v"}, {"key", nullptr}}), ""),
                       "key must not be null"));
  EXPECT_TRUE(rejected(parse_produce(body({{"value", "v"}}), ""), "topic is required"));
  EXPECT_TRUE(
      rejected(parse_produce(body({{"topic", "t t"}, {"value", "v"}}), ""), "topic must match"));
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"value", "v"}, {"extra", 1}}), ""),
                       "unknown field 'extra'"));
  EXPECT_TRUE(
      rejected(parse_produce(body({{"topic", "t"}, {"value", "v"}}), std::string(2000, 'k')),
               "Idempotency-Key"));
}

TEST(CodecTest, ProduceBatch) {
  json msgs = json::array(
      {{{"value", "a"}}, {{"key", "k"}, {"value", "b"}, {"envelope", {{"msg_id", "m"}}}}});
  auto p = parse_produce(body({{"topic", "t"}, {"messages", msgs}}), "");
  ASSERT_TRUE(p.ok()) << p.err().message;
  EXPECT_TRUE(p->batch);
  ASSERT_EQ(p->cmd.messages.size(), 2u);
  EXPECT_EQ(p->cmd.messages[0].value, "a");
  EXPECT_FALSE(p->cmd.messages[0].key);
  EXPECT_EQ(p->cmd.messages[1].key, "k");
  EXPECT_EQ(p->cmd.messages[1].msg_id, "m");
}

TEST(CodecTest, ProduceBatchRejects) {
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"messages", json::array()}}), ""),
                       "messages must hold 1..1000 items"));
  json many = json::array();
  for (int i = 0; i < 1001; ++i) many.push_back({{"value", "v"}});
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"messages", many}}), ""),
                       "messages must hold 1..1000 items"));
  many.erase(many.size() - 1);
  EXPECT_TRUE(parse_produce(body({{"topic", "t"}, {"messages", many}}), "").ok());
  EXPECT_TRUE(rejected(
      parse_produce(
          body({{"topic", "t"}, {"messages", json::array({{{"value", "a"}}, {{"value", ""}}})}}),
          ""),
      "messages[1].value must be a non-empty string"));
  EXPECT_TRUE(rejected(
      parse_produce(
          body({{"topic", "t"}, {"messages", json::array({{{"value", "a"}, {"topic", "x"}}})}}),
          ""),
      "unknown field 'messages[0].topic'"));
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"messages", json::array({"a"})}}), ""),
                       "messages[0] must be an object"));
  EXPECT_TRUE(rejected(
      parse_produce(
          body({{"topic", "t"}, {"value", "v"}, {"messages", json::array({{{"value", "a"}}})}}),
          ""),
      "unknown field 'value'"));
  EXPECT_TRUE(rejected(parse_produce(body({{"topic", "t"}, {"messages", "x"}}), ""),
                       "messages must be an array"));
}

// ---- consume ----------------------------------------------------------------

TEST(CodecTest, ConsumeBatchFromBody) {
  auto c = parse_consume(body({{"topic", "t"},
                               {"group", "g"},
                               {"owner", "o"},
                               {"lease_ms", 5000},
                               {"max_messages", 10},
                               {"wait_ms", 2000}}));
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_FALSE(c->stream);
  EXPECT_EQ(c->cmd.max_messages, 10);
  EXPECT_EQ(c->cmd.lease_ms, 5000);
  EXPECT_EQ(c->wait_ms, 2000);
}

TEST(CodecTest, ConsumeWithoutMaxMessagesIsAStream) {
  auto c = parse_consume(body({{"topic", "t"}, {"group", "g"}, {"owner", "o"}}));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->stream);
  EXPECT_FALSE(c->cmd.lease_ms.has_value());
  EXPECT_EQ(c->wait_ms, 0);
}

TEST(CodecTest, ConsumeFromQuery) {
  auto c = parse_consume(
      query("topic=t&group=my%20group&owner=w1&max_messages=3&wait_ms=0&lease_ms=100"));
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->cmd.group, "my group");
  EXPECT_EQ(c->cmd.owner, "w1");
  EXPECT_EQ(c->cmd.max_messages, 3);
  EXPECT_EQ(c->cmd.lease_ms, 100);
}

TEST(CodecTest, QueryNumbersAreStrictDecimal) {
  const std::string base = "topic=t&group=g&owner=o&max_messages=";
  EXPECT_TRUE(
      rejected(parse_consume(query(base + "1.5")), "max_messages must be a decimal integer"));
  EXPECT_TRUE(
      rejected(parse_consume(query(base + "abc")), "max_messages must be a decimal integer"));
  EXPECT_TRUE(
      rejected(parse_consume(query(base + "%2B5")), "max_messages must be a decimal integer"));
  EXPECT_TRUE(rejected(parse_consume(query(base)), "max_messages must be a decimal integer"));
  EXPECT_TRUE(rejected(parse_consume(query(base + "99999999999999999999")), "decimal integer"));
  EXPECT_TRUE(
      rejected(parse_consume(query(base + "0")), "max_messages must be between 1 and 1000"));
  EXPECT_TRUE(parse_consume(query(base + "1000")).ok());
}

TEST(CodecTest, ConsumeRejects) {
  json ok = {{"topic", "t"}, {"group", "g"}, {"owner", "o"}};
  auto with = [&](const char* k, json v) {
    json j = ok;
    j[k] = std::move(v);
    return parse_consume(body(j));
  };
  EXPECT_TRUE(rejected(with("max_messages", 0), "max_messages must be between 1 and 1000"));
  EXPECT_TRUE(rejected(with("max_messages", 1001), "max_messages must be between 1 and 1000"));
  EXPECT_TRUE(rejected(with("wait_ms", 60001), "wait_ms must be between 0 and 60000"));
  EXPECT_TRUE(rejected(with("wait_ms", -1), "wait_ms must be between 0 and 60000"));
  EXPECT_TRUE(rejected(with("lease_ms", 0), "lease_ms must be >= 1"));
  EXPECT_TRUE(rejected(with("lease_ms", "100"), "lease_ms must be an integer"));
  EXPECT_TRUE(rejected(with("group", ""), "group must be 1..200 bytes"));
  EXPECT_TRUE(rejected(with("owner", std::string(201, 'o')), "owner must be 1..200 bytes"));
  EXPECT_TRUE(rejected(with("owner", 7), "owner must be a string"));
  EXPECT_TRUE(rejected(with("max_message", 7), "unknown field 'max_message'"));
  EXPECT_TRUE(rejected(parse_consume(body({{"topic", "t"}, {"group", "g"}})), "owner is required"));
}

TEST(CodecTest, ConsumeCarriesAcks) {
  auto c = parse_consume(body({{"topic", "t"},
                               {"group", "g"},
                               {"owner", "o"},
                               {"max_messages", 10},
                               {"acks",
                                {{{"partition", 1}, {"offset", 7}},
                                 {{"partition", 0},
                                  {"offset", 9},
                                  {"attempts", 2},
                                  {"fencing_token", 5},
                                  {"result", {{"ok", true}}}}}}}));
  ASSERT_TRUE(c.ok()) << c.err().message;
  ASSERT_TRUE(c->acks.has_value());
  ASSERT_EQ(c->acks->size(), 2u);
  EXPECT_EQ((*c->acks)[0].partition, 1u);
  EXPECT_EQ((*c->acks)[0].offset, 7u);
  EXPECT_EQ((*c->acks)[1].attempts, 2);
  EXPECT_EQ((*c->acks)[1].fencing_token, 5u);
  EXPECT_EQ((*c->acks)[1].result_json, R"({"ok":true})");
  // Without acks: none.
  auto plain = parse_consume(body({{"topic", "t"}, {"group", "g"}, {"owner", "o"}}));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->acks.has_value());
}

TEST(CodecTest, ConsumeAcksNeedABatchInABodyAndValidItems) {
  json ok = {{"topic", "t"}, {"group", "g"}, {"owner", "o"}, {"max_messages", 5}};
  auto with_acks = [&](json acks) {
    json j = ok;
    j["acks"] = std::move(acks);
    return parse_consume(body(j));
  };
  EXPECT_TRUE(rejected(parse_consume(body({{"topic", "t"},
                                           {"group", "g"},
                                           {"owner", "o"},
                                           {"acks", {{{"partition", 0}, {"offset", 1}}}}})),
                       "acks needs max_messages"));
  EXPECT_TRUE(
      rejected(parse_consume(query("topic=t&group=g&owner=o&max_messages=1&acks=x")), "JSON body"));
  EXPECT_TRUE(rejected(with_acks(json::array()), "acks"));
  EXPECT_TRUE(rejected(with_acks({{{"offset", 1}}}), "acks[0].partition is required"));
  EXPECT_TRUE(rejected(with_acks({{{"partition", 0}, {"offset", 1}, {"x", 1}}}),
                       "unknown field 'acks[0].x'"));
  EXPECT_TRUE(rejected(with_acks({{{"partition", 0}, {"offset", -1}}}), "acks[0].offset"));
}

TEST(CodecTest, ConsumedAcksLineMatchesTheBatchAckResults) {
  std::vector<ack_outcome> o{{0, 18, errc::ok, "", {}}, {3, 5, errc::failed_precondition, "x", {}}};
  EXPECT_EQ(consumed_acks_line(o),
            R"({"acks":[{"offset":18,"partition":0,"status":"acked"},)"
            R"({"error":"FAILED_PRECONDITION","offset":5,"partition":3,"status":"error"}]})"
            "\n");
  EXPECT_EQ(ack_outcomes_json(o),
            R"({"results":[{"offset":18,"partition":0,"status":"acked"},)"
            R"({"error":"FAILED_PRECONDITION","offset":5,"partition":3,"status":"error"}]})");
}

// ---- ack / nack / extend ----------------------------------------------------------

json ack_body() {
  return {{"topic", "t"}, {"group", "g"}, {"owner", "o"}, {"partition", 0}, {"offset", 7}};
}

TEST(CodecTest, AckSingle) {
  json b = ack_body();
  b["attempts"] = 2;
  b["result"] = {{"charge_id", "ch_1"}, {"n", json::array({1, 2})}};
  auto a = parse_ack(body(b));
  ASSERT_TRUE(a.ok()) << a.err().message;
  const auto* c = std::get_if<ack_cmd>(&*a);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->ref.topic, "t");
  EXPECT_EQ(c->ref.offset, 7u);
  EXPECT_EQ(c->ref.attempts, 2);
  EXPECT_EQ(json::parse(c->result_json), b["result"]);
}

TEST(CodecTest, AckResultMayBeAnyJsonButNull) {
  for (json r :
       {json("text"), json(5), json(true), json::array(), json{{"deep", {{"x", nullptr}}}}}) {
    json b = ack_body();
    b["result"] = r;
    auto a = parse_ack(body(b));
    ASSERT_TRUE(a.ok()) << r.dump();
    EXPECT_EQ(json::parse(std::get<ack_cmd>(*a).result_json), r);
  }
  json b = ack_body();
  b["result"] = nullptr;
  EXPECT_TRUE(rejected(parse_ack(body(b)), "result must not be null"));
}

TEST(CodecTest, AckRejects) {
  auto with = [](const char* k, json v) {
    json b = ack_body();
    if (v.is_discarded()) {
      b.erase(k);
    } else {
      b[k] = std::move(v);
    }
    return parse_ack(body(b));
  };
  EXPECT_TRUE(rejected(with("partition", -1), "partition must be between 0 and 4294967295"));
  EXPECT_TRUE(rejected(with("partition", 4294967296ll), "partition must be between 0"));
  EXPECT_TRUE(rejected(with("offset", -1), "offset must be >= 0"));
  EXPECT_TRUE(rejected(with("offset", "7"), "offset must be an integer"));
  EXPECT_TRUE(rejected(with("offset", 7.0), "offset must be an integer"));
  EXPECT_TRUE(rejected(with("offset", nullptr), "offset must not be null"));
  EXPECT_TRUE(rejected(with("offset", json(json::value_t::discarded)), "offset is required"));
  EXPECT_TRUE(rejected(with("attempt", 1), "unknown field 'attempt'"));
  EXPECT_TRUE(rejected(with("reason", "x"), "unknown field 'reason'"));
}

TEST(CodecTest, AckBatch) {
  json b = {
      {"topic", "t"},
      {"group", "g"},
      {"owner", "o"},
      {"acks", json::array({{{"partition", 0}, {"offset", 1}},
                            {{"partition", 1}, {"offset", 2}, {"attempts", 3}, {"result", 9}}})}};
  auto a = parse_ack(body(b));
  ASSERT_TRUE(a.ok()) << a.err().message;
  const auto* c = std::get_if<ack_batch_cmd>(&*a);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->acks.size(), 2u);
  EXPECT_EQ(c->acks[1].partition, 1u);
  EXPECT_EQ(c->acks[1].offset, 2u);
  EXPECT_EQ(c->acks[1].attempts, 3);
  EXPECT_EQ(c->acks[1].result_json, "9");
  EXPECT_EQ(c->acks[0].result_json, "");

  b["partition"] = 0;
  EXPECT_TRUE(rejected(parse_ack(body(b)), "unknown field 'partition'"));
  b.erase("partition");
  b["acks"] = json::array({{{"partition", 0}}});
  EXPECT_TRUE(rejected(parse_ack(body(b)), "acks[0].offset is required"));
  b["acks"] = json::array();
  EXPECT_TRUE(rejected(parse_ack(body(b)), "acks must hold 1..1000 items"));
}

TEST(CodecTest, Nack) {
  json b = ack_body();
  auto n = parse_nack(body(b));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->reason, "nack");
  EXPECT_FALSE(n->delay_ms);
  b["reason"] = "boom";
  b["delay_ms"] = 250;
  n = parse_nack(body(b));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->reason, "boom");
  EXPECT_EQ(n->delay_ms, 250);
  b["delay_ms"] = -1;
  EXPECT_TRUE(rejected(parse_nack(body(b)), "delay_ms must be >= 0"));
  b["delay_ms"] = 1;
  b["result"] = 1;
  EXPECT_TRUE(rejected(parse_nack(body(b)), "unknown field 'result'"));
}

TEST(CodecTest, Extend) {
  json b = ack_body();
  EXPECT_TRUE(rejected(parse_extend(body(b)), "lease_ms is required"));
  b["lease_ms"] = 0;
  EXPECT_TRUE(rejected(parse_extend(body(b)), "lease_ms must be >= 1"));
  b["lease_ms"] = 60000;
  auto e = parse_extend(body(b));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->lease_ms, 60000);
  EXPECT_EQ(e->ref.owner, "o");
}

// ---- keys / redrive ---------------------------------------------------------------

TEST(CodecTest, KeyQuery) {
  auto k = parse_key_query(query("topic=t&group=g&key=job%2F1&tenant_id=acme&wait_ms=100"));
  ASSERT_TRUE(k.ok()) << k.err().message;
  EXPECT_EQ(k->q.key, "job/1");
  EXPECT_EQ(k->q.tenant_id, "acme");
  EXPECT_EQ(k->wait_ms, 100);
  EXPECT_TRUE(rejected(parse_key_query(query("topic=t&group=g")), "key is required"));
  EXPECT_TRUE(
      rejected(parse_key_query(query("topic=t&group=g&key=")), "key must be a non-empty string"));
  EXPECT_TRUE(rejected(parse_key_query(query("topic=t&group=g&key=k&wait_ms=70000")), "wait_ms"));
}

TEST(CodecTest, Redrive) {
  auto r = parse_redrive(body({{"topic", "t"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->max_messages);
  r = parse_redrive(body({{"topic", "t"}, {"max_messages", 5}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->max_messages, 5);
  EXPECT_TRUE(rejected(parse_redrive(body({{"topic", "t"}, {"max_messages", 0}})),
                       "max_messages must be >= 1"));
}

TEST(CodecTest, Replay) {
  auto t = parse_create_topic(body({{"name", "t"}, {"replay_window_ms", 5000}}), {});
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->settings.replay_window_ms, 5000);
  EXPECT_TRUE(rejected(parse_create_topic(body({{"name", "t"}, {"replay_window_ms", -1}}), {}),
                       "replay_window_ms must be >= 0"));
  auto r = parse_replay(body({{"topic", "t"}, {"group", "g"}, {"from_ms", 10}, {"to_ms", 20}}));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->dry_run) << "a dry run unless asked";
  EXPECT_EQ(r->max_messages, 1000);
  EXPECT_EQ(r->from_ms, 10);
  EXPECT_EQ(r->to_ms, 20);
  EXPECT_FALSE(r->cursor);
  r = parse_replay(body({{"topic", "t"},
                         {"group", "g"},
                         {"partition", 1},
                         {"from_offset", 0},
                         {"to_offset", 9},
                         {"dry_run", false},
                         {"max_messages", 5},
                         {"cursor", "1:7"}}));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_FALSE(r->dry_run);
  EXPECT_EQ(r->partition, 1);
  EXPECT_EQ(r->to_offset, 9);
  EXPECT_EQ(r->cursor, (replay_position{1, 7}));
  EXPECT_TRUE(rejected(parse_replay(body({{"topic", "t"}})), "group is required"));
  EXPECT_TRUE(rejected(parse_replay(body({{"topic", "t"}, {"group", "g"}, {"max_messages", 1001}})),
                       "max_messages"));
  for (const char* bad : {"", "1", "1:", ":2", "a:2", "1:2x", "-1:2"})
    EXPECT_TRUE(
        rejected(parse_replay(body({{"topic", "t"}, {"group", "g"}, {"cursor", bad}})), "cursor"))
        << bad;
  EXPECT_TRUE(
      rejected(parse_replay(body({{"topic", "t"}, {"group", "g"}, {"since", 1}})), "since"));
}

TEST(CodecTest, ReplayReply) {
  replay_reply r;
  r.dry_run = true;
  r.messages.push_back(replay_item{0, 3, replay_outcome::already_committed, "k", "", 5, 1, "",
                                   committed_key{R"({"n":1})", 7, "w"}});
  r.messages.push_back(replay_item{0, 4, replay_outcome::gone, "", "", 0, 0, "", std::nullopt});
  r.summary[0] = 1;
  r.summary[6] = 1;
  r.next = replay_position{0, 5};
  const json want = {{"dry_run", true},
                     {"summary",
                      {{"already_committed", 1},
                       {"would_deliver", 0},
                       {"in_flight", 0},
                       {"pending", 0},
                       {"dead_lettered", 0},
                       {"superseded", 0},
                       {"gone", 1}}},
                     {"replayed", 0},
                     {"messages",
                      {{{"partition", 0},
                        {"offset", 3},
                        {"outcome", "already_committed"},
                        {"produced_at_ms", 5},
                        {"attempts", 1},
                        {"idempotency_key", "k"},
                        {"owner", "w"},
                        {"committed_at_ms", 7},
                        {"result", {{"n", 1}}}},
                       {{"partition", 0}, {"offset", 4}, {"outcome", "gone"}}}},
                     {"next", "0:5"}};
  EXPECT_EQ(to_json(r), want);
}

// ---- replies ---------------------------------------------------------------------

TEST(CodecTest, ProduceReplies) {
  produce_reply r{{{2, 10, false}, {0, 11, true}}, {}};
  const json single = {{"status", "produced"},
                       {"topic", "t"},
                       {"partition", 2},
                       {"offset", 10},
                       {"duplicate", true}};
  EXPECT_EQ(json::parse(produce_reply_json(produce_reply{{{2, 10, true}}, {}}, "t", false)),
            single);
  // Byte for byte what dumping the DOM gave.
  EXPECT_EQ(produce_reply_json(produce_reply{{{2, 10, true}}, {}}, "t", false), dump(single));
  json batch = json::parse(produce_reply_json(r, "t", true));
  EXPECT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch["status"], "produced");
  EXPECT_EQ(batch["topic"], "t");
  EXPECT_EQ(batch["results"][0], (json{{"partition", 2}, {"offset", 10}, {"duplicate", false}}));
  EXPECT_EQ(batch["results"][1], (json{{"partition", 0}, {"offset", 11}, {"duplicate", true}}));
  EXPECT_EQ(produce_reply_json(r, "t", true), dump(batch));
  produce_reply big{{{4294967295u, 18446744073709551615ull, false}}, {}};
  EXPECT_EQ(json::parse(produce_reply_json(big, "a.b-c_d", false))["offset"],
            18446744073709551615ull);
}

TEST(CodecTest, TopicInfoReply) {
  topic_info t;
  t.name = "t";
  t.partitions = 3;
  group_stats g;
  g.backlog = 1;
  g.inflight = 2;
  g.acked = 3;
  g.auto_acked = 4;
  g.redelivered = 5;
  g.dead_lettered = 6;
  t.groups["g"] = g;
  json j = to_json(t);
  EXPECT_EQ(j["name"], "t");
  EXPECT_EQ(j["partitions"], 3);
  EXPECT_EQ(j["settings"].size(), 18u);
  EXPECT_EQ(j["settings"]["ordering"], "none");
  EXPECT_EQ(j["settings"]["key_conflict"], "hold");
  EXPECT_EQ(j["settings"]["replay_window_ms"], 0);
  EXPECT_EQ(j["settings"]["max_backlog_messages"], 0);
  EXPECT_EQ(j["settings"]["max_backlog_bytes"], 0);
  EXPECT_EQ(j["settings"]["max_inflight"], 0);
  EXPECT_EQ(j["settings"]["lease_ms"], 30000);
  EXPECT_EQ(j["groups"]["g"], (json{{"backlog", 1},
                                    {"inflight", 2},
                                    {"acked", 3},
                                    {"auto_acked", 4},
                                    {"redelivered", 5},
                                    {"dead_lettered", 6},
                                    {"superseded", 0}}));
}

TEST(CodecTest, KeyInfoReplies) {
  key_info none;
  EXPECT_EQ(to_json(none), (json{{"state", "none"}}));

  key_info leased;
  leased.st = key_info::state::leased;
  leased.owner = "w";
  leased.partition = 1;
  leased.offset = 2;
  leased.attempts = 1;
  leased.lease_expires_at_ms = 99;
  EXPECT_EQ(to_json(leased), (json{{"state", "leased"},
                                   {"owner", "w"},
                                   {"partition", 1},
                                   {"offset", 2},
                                   {"attempts", 1},
                                   {"lease_expires_at_ms", 99}}));

  key_info committed = leased;
  committed.st = key_info::state::committed;
  committed.committed_at_ms = 100;
  committed.expires_at_ms = 200;
  committed.result_json = R"({"ok":true})";
  json c = to_json(committed);
  EXPECT_EQ(c["state"], "committed");
  EXPECT_EQ(c["committed_at_ms"], 100);
  EXPECT_EQ(c["expires_at_ms"], 200);
  EXPECT_EQ(c["result"], (json{{"ok", true}}));
  EXPECT_FALSE(c.contains("lease_expires_at_ms"));

  committed.result_json.clear();
  EXPECT_FALSE(to_json(committed).contains("result"));

  key_info failed = leased;
  failed.st = key_info::state::failed;
  EXPECT_EQ(to_json(failed)["state"], "failed");
  EXPECT_FALSE(to_json(failed).contains("lease_expires_at_ms"));
}

TEST(CodecTest, AckOutcomes) {
  std::vector<ack_outcome> o = {{0, 1, errc::ok, "", {}},
                                {3, 2, errc::failed_precondition, "x", {}}};
  const json expected = {
      {"results",
       {{{"partition", 0}, {"offset", 1}, {"status", "acked"}},
        {{"partition", 3}, {"offset", 2}, {"status", "error"}, {"error", "FAILED_PRECONDITION"}}}}};
  EXPECT_EQ(json::parse(ack_outcomes_json(o)), expected);
  EXPECT_EQ(ack_outcomes_json(o), dump(expected));
  EXPECT_EQ(json::parse(ack_outcomes_json({})), (json{{"results", json::array()}}));
}

}  // namespace
}  // namespace onceq::http

namespace onceq::http {
namespace {

using json = nlohmann::json;

TEST(CodecIdempotency, CreateTopicReadsTheIdempotencySettings) {
  auto c = parse_create_topic(body({{"name", "t"},
                                    {"idempotency_key_fields", {"envelope.tenant_id", "value.a.b"}},
                                    {"idempotency_key_include_topic", true},
                                    {"idempotency_key_optional", true},
                                    {"dedup_by_content", true},
                                    {"key_conflict", "supersede"},
                                    {"key_history", true}}),
                              {});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->settings.idempotency_key_fields.size(), 2u);
  EXPECT_TRUE(c->settings.idempotency_key_include_topic);
  EXPECT_TRUE(c->settings.idempotency_key_optional);
  EXPECT_TRUE(c->settings.dedup_by_content);
  EXPECT_EQ(c->settings.key_conflict, topic_settings::conflict::supersede);
  EXPECT_TRUE(c->settings.key_history);
  auto j = to_json(c->settings);
  EXPECT_EQ(j["key_conflict"], "supersede");
  EXPECT_EQ(j["idempotency_key_fields"][1], "value.a.b");
}

TEST(CodecIdempotency, WrongTypesAndUnknownPoliciesAre400) {
  for (const json& bad :
       {json{{"name", "t"}, {"key_conflict", "newest"}}, json{{"name", "t"}, {"key_conflict", 1}},
        json{{"name", "t"}, {"key_history", "yes"}}, json{{"name", "t"}, {"dedup_by_content", 1}},
        json{{"name", "t"}, {"idempotency_key_fields", "value.a"}},
        json{{"name", "t"}, {"idempotency_key_fields", {1}}}}) {
    auto c = parse_create_topic(body(bad), {});
    EXPECT_EQ(c.code(), errc::invalid_argument) << bad.dump();
  }
}

TEST(CodecIdempotency, FencingTokensSkipIfCommittedDeadlinesAndTheErrorAlias) {
  auto a = parse_ack(body({{"topic", "t"},
                           {"group", "g"},
                           {"owner", "o"},
                           {"partition", 0},
                           {"offset", 1},
                           {"fencing_token", 9}}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(std::get<ack_cmd>(*a).ref.fencing_token, 9u);
  EXPECT_EQ(parse_ack(body({{"topic", "t"},
                            {"group", "g"},
                            {"owner", "o"},
                            {"partition", 0},
                            {"offset", 1},
                            {"fencing_token", -1}}))
                .code(),
            errc::invalid_argument);
  auto n = parse_nack(body({{"topic", "t"},
                            {"group", "g"},
                            {"owner", "o"},
                            {"partition", 0},
                            {"offset", 1},
                            {"error", "boom"}}));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->reason, "boom");
  auto p =
      parse_produce(body({{"topic", "t"}, {"value", "x"}, {"skip_if_committed", {"a", "b"}}}), "");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->cmd.skip_if_committed.size(), 2u);
  auto q = parse_consume(query("topic=t&group=g&owner=o&deadline_rfc3339=2030-01-01T00:00:00Z"));
  ASSERT_TRUE(q.ok()) << q.err().message;
  EXPECT_EQ(q->cmd.deadline_ms, 1893456000000);
  EXPECT_EQ(parse_consume(query("topic=t&group=g&owner=o&deadline_ms=-5")).code(),
            errc::invalid_argument);
}

TEST(CodecIdempotency, AlreadyCommittedReplies) {
  produce_reply r{{{0, 0, false}}, {}};
  r.already_committed[0]["billing"] = committed_key{R"({"id":7})", 1000, "w1"};
  EXPECT_EQ(json::parse(produce_reply_json(r, "t", false)),
            json::parse(R"({"committed":{"billing":{"committed_at_ms":1000,"owner":"w1",)"
                        R"("result":{"id":7}}},"status":"already_committed","topic":"t"})"));
  auto batch = json::parse(produce_reply_json(r, "t", true));
  EXPECT_EQ(batch["results"][0]["status"], "already_committed");
}

TEST(CodecIdempotency, TheInspectorReadsDotPathsAndHashes) {
  const auto& in = json_inspector();
  EXPECT_EQ(in.field(R"({"a":{"b":"x"}})", "a.b").value(), "x");
  EXPECT_EQ(in.field(R"({"a":{"b":12}})", "a.b").value(), "12");
  EXPECT_EQ(in.field(R"({"a":{}})", "a.b").code(), errc::not_found);
  EXPECT_EQ(in.field("nope", "a").code(), errc::invalid_argument);
  EXPECT_EQ(in.field(R"({"a":[1]})", "a").code(), errc::invalid_argument);
  EXPECT_EQ(in.sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace onceq::http
