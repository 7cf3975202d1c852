// A batch of bad requests: each gets the right status and error body, and
// none of them changes the server's data or takes it down.

#include <map>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

struct bad_request {
  std::string what;
  std::string method;
  std::string target;
  std::string body;
  unsigned status;
  std::string code;
  std::vector<std::string> allow = {};  // methods the Allow header must list (405)
};

std::string dump(const json& j) {
  return j.dump();
}

class bad_input : public onceq_test {};

TEST_F(bad_input, every_bad_request_is_answered_and_changes_nothing) {
  // ---- set-up: data that must come through unchanged --------------------
  create_topic("t", 2);
  create_topic(std::string(200, 'a'));  // longest valid name
  create_topic("Ab9._-x");              // every character class
  // The group that checks the data at the end exists before any ack: a
  // message acked by every group may be deleted.
  ASSERT_TRUE(consume("t", "verify", "v", 1).empty());
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> produced;
  for (int i = 0; i < 3; ++i) {
    // Free-form names inside envelope.headers are accepted.
    auto p = produce("t", numbered("s", i), numbered("k", i),
                     json{{"headers", {{"any-name", "x"}, {"Unknown_Field", "y"}}}});
    produced[{p.at("partition").get<std::int64_t>(), p.at("offset").get<std::int64_t>()}] =
        numbered("s", i);
  }
  ASSERT_EQ(produced.size(), 3u);
  auto delivered = consume("t", "g", "o", 2, 60'000);
  ASSERT_EQ(delivered.size(), 2u);
  // Free-form result on ack is accepted.
  ASSERT_EQ(ack("t", "g", "o", delivered[0], json{{"whatever", {{"nested", {1, 2}}}}}).status,
            204u);
  const json& leased = delivered[1];  // still leased to o
  json undelivered;                   // in the backlog, never delivered to g
  for (const auto& [pos, value] : produced) {
    bool seen = false;
    for (const auto& d : delivered)
      seen = seen || (d.at("offset") == pos.second && d.at("partition") == pos.first);
    if (!seen) undelivered = {{"partition", pos.first}, {"offset", pos.second}};
  }
  ASSERT_FALSE(undelivered.is_null());

  const auto topics_before = client().get("/v1/topics").body;
  const auto info_before = topic_info("t");
  ASSERT_FALSE(info_before.is_null());

  // ---- the bad requests ---------------------------------------------------
  const json ok_produce = {{"topic", "t"}, {"value", "x"}};
  const json ok_consume = consume_body("t", "g", "o", 1);
  const json ok_ack = delivery_body("t", "g", "o", leased);
  auto with = [](json base, const std::string& field, json value) {
    base[field] = std::move(value);
    return base.dump();
  };
  auto without = [](json base, const std::string& field) {
    base.erase(field);
    return base.dump();
  };
  auto envelope = [&](json env) { return with(ok_produce, "envelope", std::move(env)); };
  const std::string P = "POST", G = "GET", IA = "INVALID_ARGUMENT";

  std::vector<bad_request> cases = {
      // malformed JSON
      {"truncated", P, "/v1/topics", R"({"name":)", 400, IA},
      {"not json", P, "/v1/produce", "not json", 400, IA},
      {"array body", P, "/v1/produce", "[1,2]", 400, IA},
      {"trailing garbage", P, "/v1/produce", R"({"topic":"t","value":"x"} x)", 400, IA},
      {"trailing comma", P, "/v1/ack", R"({"topic":"t",})", 400, IA},
      {"unclosed consume", P, "/v1/consume", R"({"topic":"t","group":"g","owner":"o")", 400, IA},
      // wrong types
      {"partitions string", P, "/v1/topics", dump({{"name", "n1"}, {"partitions", "2"}}), 400, IA},
      {"partitions float", P, "/v1/topics", dump({{"name", "n1"}, {"partitions", 2.5}}), 400, IA},
      {"partitions 2.0", P, "/v1/topics", R"({"name":"n1","partitions":2.0})", 400, IA},
      {"partitions bool", P, "/v1/topics", dump({{"name", "n1"}, {"partitions", true}}), 400, IA},
      {"partitions null", P, "/v1/topics", dump({{"name", "n1"}, {"partitions", nullptr}}), 400,
       IA},
      {"name int", P, "/v1/topics", dump({{"name", 5}}), 400, IA},
      {"name null", P, "/v1/topics", dump({{"name", nullptr}}), 400, IA},
      {"topic lease_ms string", P, "/v1/topics", dump({{"name", "n1"}, {"lease_ms", "100"}}), 400,
       IA},
      {"value int", P, "/v1/produce", with(ok_produce, "value", 5), 400, IA},
      {"value null", P, "/v1/produce", with(ok_produce, "value", nullptr), 400, IA},
      {"value object", P, "/v1/produce", with(ok_produce, "value", {{"a", 1}}), 400, IA},
      {"key int", P, "/v1/produce", with(ok_produce, "key", 5), 400, IA},
      {"topic array", P, "/v1/produce", with(ok_produce, "topic", {"t"}), 400, IA},
      {"envelope string", P, "/v1/produce", envelope("x"), 400, IA},
      {"envelope null", P, "/v1/produce", envelope(nullptr), 400, IA},
      {"partition_override string", P, "/v1/produce", envelope({{"partition_override", "1"}}), 400,
       IA},
      {"partition_override float", P, "/v1/produce", envelope({{"partition_override", 1.5}}), 400,
       IA},
      {"idempotency_key int", P, "/v1/produce", envelope({{"idempotency_key", 7}}), 400, IA},
      {"headers non-string", P, "/v1/produce", envelope({{"headers", {{"a", 1}}}}), 400, IA},
      {"headers string", P, "/v1/produce", envelope({{"headers", "a"}}), 400, IA},
      {"retry_policy string int", P, "/v1/produce",
       envelope({{"retry_policy", {{"max_attempts", "3"}}}}), 400, IA},
      {"delay_ms bool", P, "/v1/produce", envelope({{"delay_ms", true}}), 400, IA},
      {"key_ttl_ms float", P, "/v1/produce", envelope({{"key_ttl_ms", 1.5}}), 400, IA},
      {"max_messages string", P, "/v1/consume", with(ok_consume, "max_messages", "1"), 400, IA},
      {"max_messages 1.0", P, "/v1/consume",
       R"({"topic":"t","group":"g","owner":"o","max_messages":1.0})", 400, IA},
      {"lease_ms bool", P, "/v1/consume", with(ok_consume, "lease_ms", true), 400, IA},
      {"wait_ms null", P, "/v1/consume", with(ok_consume, "wait_ms", nullptr), 400, IA},
      {"owner int", P, "/v1/consume", with(ok_consume, "owner", 7), 400, IA},
      {"group null", P, "/v1/consume", with(ok_consume, "group", nullptr), 400, IA},
      {"ack partition string", P, "/v1/ack", with(ok_ack, "partition", "0"), 400, IA},
      {"ack offset bool", P, "/v1/ack", with(ok_ack, "offset", true), 400, IA},
      {"ack offset null", P, "/v1/ack", with(ok_ack, "offset", nullptr), 400, IA},
      {"ack offset float", P, "/v1/ack", with(ok_ack, "offset", 1.5), 400, IA},
      {"ack attempts string", P, "/v1/ack", with(ok_ack, "attempts", "1"), 400, IA},
      {"nack delay_ms string", P, "/v1/nack", with(ok_ack, "delay_ms", "5"), 400, IA},
      {"nack reason int", P, "/v1/nack", with(ok_ack, "reason", 5), 400, IA},
      {"extend lease_ms string", P, "/v1/extend", with(ok_ack, "lease_ms", "100"), 400, IA},
      // unknown fields (top level and inside envelope)
      {"topics typo", P, "/v1/topics", dump({{"name", "n1"}, {"partitons", 2}}), 400, IA},
      {"produce typo", P, "/v1/produce", with(ok_produce, "vaule", "x"), 400, IA},
      {"envelope typo", P, "/v1/produce", envelope({{"idempotency_kye", "x"}}), 400, IA},
      {"retry_policy typo", P, "/v1/produce", envelope({{"retry_policy", {{"max_attempt", 3}}}}),
       400, IA},
      {"consume typo", P, "/v1/consume", with(ok_consume, "maxmessages", 5), 400, IA},
      {"ack typo", P, "/v1/ack", with(ok_ack, "ofset", 1), 400, IA},
      {"batch message typo", P, "/v1/produce",
       dump({{"topic", "t"}, {"messages", {{{"value", "x"}, {"vlaue", "y"}}}}}), 400, IA},
      {"batch ack typo", P, "/v1/ack",
       dump({{"topic", "t"},
             {"group", "g"},
             {"owner", "o"},
             {"acks", {{{"partition", 0}, {"offest", 0}}}}}),
       400, IA},
      // missing required fields
      {"topics empty", P, "/v1/topics", "{}", 400, IA},
      {"topics no name", P, "/v1/topics", dump({{"partitions", 1}}), 400, IA},
      {"produce no value", P, "/v1/produce", without(ok_produce, "value"), 400, IA},
      {"produce no topic", P, "/v1/produce", without(ok_produce, "topic"), 400, IA},
      {"consume no owner", P, "/v1/consume", without(ok_consume, "owner"), 400, IA},
      {"consume no group", P, "/v1/consume", without(ok_consume, "group"), 400, IA},
      {"consume no topic", P, "/v1/consume", without(ok_consume, "topic"), 400, IA},
      {"consume query no owner", G, "/v1/consume?topic=t&group=g&max_messages=1", "", 400, IA},
      {"ack no offset", P, "/v1/ack", without(ok_ack, "offset"), 400, IA},
      {"ack no owner", P, "/v1/ack", without(ok_ack, "owner"), 400, IA},
      {"keys no key", G, "/v1/keys?topic=t&group=g", "", 400, IA},
      {"produce empty body", P, "/v1/produce", "", 400, IA},
      // empty value
      {"empty value", P, "/v1/produce", with(ok_produce, "value", ""), 400, IA},
      {"batch with an empty value", P, "/v1/produce",
       dump({{"topic", "t"}, {"messages", {{{"value", "ok"}}, {{"value", ""}}}}}), 400, IA},
      // invalid topic names
      {"empty name", P, "/v1/topics", dump({{"name", ""}}), 400, IA},
      {"name with space", P, "/v1/topics", dump({{"name", "a b"}}), 400, IA},
      {"name with slash", P, "/v1/topics", dump({{"name", "a/b"}}), 400, IA},
      {"name with star", P, "/v1/topics", dump({{"name", "a*"}}), 400, IA},
      {"name non-ascii", P, "/v1/topics", dump({{"name", "caf\xc3\xa9"}}), 400, IA},
      {"name 201 chars", P, "/v1/topics", dump({{"name", std::string(201, 'a')}}), 400, IA},
      // out of range
      {"partitions 0", P, "/v1/topics", dump({{"name", "n1"}, {"partitions", 0}}), 400, IA},
      {"partitions -1", P, "/v1/topics", dump({{"name", "n1"}, {"partitions", -1}}), 400, IA},
      {"topic lease_ms -1", P, "/v1/topics", dump({{"name", "n1"}, {"lease_ms", -1}}), 400, IA},
      {"topic max_attempts -1", P, "/v1/topics", dump({{"name", "n1"}, {"max_attempts", -1}}), 400,
       IA},
      {"max_messages 0", P, "/v1/consume", with(ok_consume, "max_messages", 0), 400, IA},
      {"max_messages 1001", P, "/v1/consume", with(ok_consume, "max_messages", 1001), 400, IA},
      {"wait_ms 60001", P, "/v1/consume", with(ok_consume, "wait_ms", 60001), 400, IA},
      {"wait_ms -1", P, "/v1/consume", with(ok_consume, "wait_ms", -1), 400, IA},
      {"consume lease_ms -5", P, "/v1/consume", with(ok_consume, "lease_ms", -5), 400, IA},
      {"owner empty", P, "/v1/consume", with(ok_consume, "owner", ""), 400, IA},
      {"owner 201 bytes", P, "/v1/consume", with(ok_consume, "owner", std::string(201, 'o')), 400,
       IA},
      {"partition_override too big", P, "/v1/produce", envelope({{"partition_override", 2}}), 400,
       IA},
      {"partition_override -1", P, "/v1/produce", envelope({{"partition_override", -1}}), 400, IA},
      {"query max_messages abc", G, "/v1/consume?topic=t&group=g&owner=o&max_messages=abc", "", 400,
       IA},
      {"query max_messages 1.5", G, "/v1/consume?topic=t&group=g&owner=o&max_messages=1.5", "", 400,
       IA},
      {"query max_messages 0", G, "/v1/consume?topic=t&group=g&owner=o&max_messages=0", "", 400,
       IA},
      {"query wait_ms -1", G, "/v1/consume?topic=t&group=g&owner=o&max_messages=1&wait_ms=-1", "",
       400, IA},
      {"deadline passed", P, "/v1/produce", envelope({{"deadline", "2001-01-01T00:00:00Z"}}), 400,
       IA},
      {"deadline garbage", P, "/v1/produce", envelope({{"deadline", "tomorrow"}}), 400, IA},
      // batch sizes
      {"batch of 0", P, "/v1/produce", dump({{"topic", "t"}, {"messages", json::array()}}), 400,
       IA},
      {"messages not an array", P, "/v1/produce", dump({{"topic", "t"}, {"messages", "x"}}), 400,
       IA},
      // unknown topics
      {"produce unknown topic", P, "/v1/produce", with(ok_produce, "topic", "nope"), 400, IA},
      {"consume unknown topic", P, "/v1/consume", with(ok_consume, "topic", "nope"), 400, IA},
      {"get unknown topic", G, "/v1/topics/nope", "", 404, "NOT_FOUND"},
      {"delete unknown topic", "DELETE", "/v1/topics/nope", "", 404, "NOT_FOUND"},
      {"ack unknown topic", P, "/v1/ack", with(ok_ack, "topic", "nope"), 404, "NOT_FOUND"},
      // state conflicts
      {"topic with other settings", P, "/v1/topics", dump({{"name", "t"}, {"partitions", 3}}), 409,
       "ALREADY_EXISTS"},
      {"ack never delivered", P, "/v1/ack", dump(delivery_body("t", "g", "o", undelivered)), 409,
       "FAILED_PRECONDITION"},
      {"ack by intruder", P, "/v1/ack", with(ok_ack, "owner", "intruder"), 409,
       "FAILED_PRECONDITION"},
      {"nack by intruder", P, "/v1/nack", with(ok_ack, "owner", "intruder"), 409,
       "FAILED_PRECONDITION"},
      {"extend by intruder", P, "/v1/extend",
       dump(delivery_body("t", "g", "intruder", leased, {{"lease_ms", 1000}})), 409,
       "FAILED_PRECONDITION"},
      {"ack with an old attempt", P, "/v1/ack", with(ok_ack, "attempts", 7), 409,
       "FAILED_PRECONDITION"},
      // unknown paths
      {"unknown path", G, "/v1/nope", "", 404, "NOT_FOUND"},
      {"root", G, "/", "", 404, "NOT_FOUND"},
      {"v2", P, "/v2/produce", dump(ok_produce), 404, "NOT_FOUND"},
      // wrong methods
      {"DELETE produce", "DELETE", "/v1/produce", "", 405, "METHOD_NOT_ALLOWED", {"POST"}},
      {"GET produce", G, "/v1/produce", "", 405, "METHOD_NOT_ALLOWED", {"POST"}},
      {"GET ack", G, "/v1/ack", "", 405, "METHOD_NOT_ALLOWED", {"POST"}},
      {"PUT topics",
       "PUT",
       "/v1/topics",
       dump({{"name", "n1"}}),
       405,
       "METHOD_NOT_ALLOWED",
       {"GET", "POST"}},
      {"POST healthz", P, "/v1/healthz", "", 405, "METHOD_NOT_ALLOWED", {"GET"}},
      {"PUT consume",
       "PUT",
       "/v1/consume",
       dump(ok_consume),
       405,
       "METHOD_NOT_ALLOWED",
       {"GET", "POST"}},
      {"POST topic URL",
       P,
       "/v1/topics/t",
       dump({{"partitions", 3}}),
       405,
       "METHOD_NOT_ALLOWED",
       {"GET", "DELETE"}},
  };
  // 1001 messages in one batch.
  {
    json msgs = json::array();
    for (int i = 0; i < 1001; ++i) msgs.push_back({{"value", "m"}});
    cases.push_back(
        {"batch of 1001", P, "/v1/produce", dump({{"topic", "t"}, {"messages", msgs}}), 400, IA});
  }
  // Over 1 MiB.
  cases.push_back({"body over 1 MiB", P, "/v1/produce",
                   with(ok_produce, "value", std::string(1024 * 1024 + 4096, 'x')), 413,
                   "PAYLOAD_TOO_LARGE"});

  http_client c(port(), 5s);
  int i = 0;
  for (const auto& bad : cases) {
    SCOPED_TRACE(bad.what + ": " + bad.method + " " + bad.target + " " + bad.body.substr(0, 200));
    const std::string request_id = numbered("bad-", i++);
    http_response res;
    try {
      res = c.request(bad.method, bad.target, bad.body, {{"X-Request-Id", request_id}});
    } catch (const std::exception& e) {
      ADD_FAILURE() << "no answer: " << e.what();
      c.close();
      continue;
    }
    EXPECT_TRUE(is_error(res, bad.status, bad.code));
    EXPECT_EQ(res.header("X-Request-Id"), request_id);
    if (!bad.allow.empty()) {
      const auto allow = res.header("Allow");
      for (const auto& m : bad.allow) {
        EXPECT_NE(allow.find(m), std::string::npos) << "Allow: '" << allow << "' lacks " << m;
      }
    }
  }

  // ---- the server is up and its data unchanged ---------------------------
  ASSERT_TRUE(server_->alive()) << "the server died";
  EXPECT_EQ(client().get("/v1/healthz").status, 200u);
  EXPECT_EQ(client().get("/v1/topics").body, topics_before);
  EXPECT_EQ(topic_info("t"), info_before);
  EXPECT_TRUE(is_error(client().get("/v1/topics/n1"), 404, "NOT_FOUND"));
  auto all = drain("t", "verify", "v");
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> stored;
  for (const auto& m : all) {
    stored[{m.at("partition").get<std::int64_t>(), m.at("offset").get<std::int64_t>()}] =
        m.at("value").get<std::string>();
    EXPECT_EQ(m.at("attempts"), 1);
  }
  EXPECT_EQ(stored, produced);
  // The leased delivery is still o's and the backlog message still waits.
  EXPECT_EQ(c.post("/v1/ack", ok_ack).status, 204u);
  auto rest = consume("t", "g", "o2", 10);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].at("offset"), undelivered.at("offset"));
  EXPECT_EQ(rest[0].at("partition"), undelivered.at("partition"));
  EXPECT_EQ(rest[0].at("attempts"), 1);
}

}  // namespace
}  // namespace onceq::itest
