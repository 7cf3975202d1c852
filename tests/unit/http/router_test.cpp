#include "http/router.hpp"

#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "router_test_support.hpp"

namespace onceq::http {
namespace {

using namespace test;
using bhttp::verb;

class RouterTest : public ::testing::Test {
 protected:
  void create(const std::string& name, json extra = json::object()) {
    extra["name"] = name;
    auto res = h_.post("/v1/topics", extra);
    ASSERT_EQ(res.result_int(), 201) << res.body();
  }
  json produce(const std::string& topic, const std::string& value, json extra = json::object()) {
    extra["topic"] = topic;
    extra["value"] = value;
    auto res = h_.post("/v1/produce", extra);
    EXPECT_EQ(res.result_int(), 200) << res.body();
    return body_of(res);
  }
  std::vector<json> consume(const std::string& topic, const std::string& owner, int max = 10,
                            const std::string& group = "g") {
    auto res =
        h_.post("/v1/consume",
                {{"topic", topic}, {"group", group}, {"owner", owner}, {"max_messages", max}});
    EXPECT_EQ(res.result_int(), 200) << res.body();
    EXPECT_EQ(res[bhttp::field::content_type], "application/x-ndjson");
    return lines_of(res.body());
  }
  json ack_body(const json& d, const std::string& owner) {
    return {{"topic", d["topic"]},
            {"group", "g"},
            {"owner", owner},
            {"partition", d["partition"]},
            {"offset", d["offset"]}};
  }

  router_harness h_;
};

// GET /ui is one self-contained page: its style and script are inlined,
// nothing is loaded from elsewhere, and its CSP says so.
TEST_F(RouterTest, UiIsOneSelfContainedPage) {
  auto res = h_.get("/ui");
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(res[bhttp::field::content_type], "text/html; charset=utf-8");
  EXPECT_NE(res["Content-Security-Policy"].find("connect-src 'self'"), std::string_view::npos);
  std::string page = res.body();
  EXPECT_EQ(page.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(page.find("<style>"), std::string::npos);
  EXPECT_NE(page.find("setInterval(refresh"), std::string::npos) << "app.js is not inlined";
  EXPECT_EQ(page.find("src=\""), std::string::npos) << "the page loads a file";
  EXPECT_EQ(page.find("href=\"style.css\""), std::string::npos);
  // The SVG namespace is a name, not a place the page loads from.
  const std::string svg_ns = "http://www.w3.org/2000/svg";
  page.erase(page.find(svg_ns), svg_ns.size());
  EXPECT_EQ(page.find("http://"), std::string::npos) << "the page names another origin";
  EXPECT_EQ(page.find("https://"), std::string::npos) << "the page names another origin";
  EXPECT_EQ(h_.get("/ui/").result_int(), 404);
}

TEST_F(RouterTest, Healthz) {
  auto res = h_.get("/v1/healthz");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(body_of(res), (json{{"status", "ok"}}));
  EXPECT_EQ(res[bhttp::field::content_type], "application/json");
  EXPECT_FALSE(res["X-Request-Id"].empty());
}

TEST_F(RouterTest, RequestIdIsEchoedOrGenerated) {
  auto echoed = h_.send(verb::get, "/v1/healthz", "", {{"X-Request-Id", "req-42"}});
  EXPECT_EQ(echoed["X-Request-Id"], "req-42");
  auto a = h_.get("/v1/healthz");
  auto b = h_.get("/v1/healthz");
  EXPECT_FALSE(a["X-Request-Id"].empty());
  EXPECT_NE(a["X-Request-Id"], b["X-Request-Id"]);
  // Errors carry it too.
  auto err = h_.send(verb::get, "/nope", "", {{"X-Request-Id", "req-43"}});
  EXPECT_EQ(err["X-Request-Id"], "req-43");
}

TEST_F(RouterTest, Version) {
  auto res = h_.get("/v1/version");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(body_of(res),
            (json{{"version", "9.9.9"}, {"commit", "abc123"}, {"wal_enabled", true}}));
}

TEST_F(RouterTest, UnknownPathIs404) {
  EXPECT_TRUE(is_error(h_.get("/v2/healthz"), 404, "NOT_FOUND"));
  EXPECT_TRUE(is_error(h_.get("/v1/topics/a/b"), 404, "NOT_FOUND"));
  EXPECT_TRUE(is_error(h_.get("/"), 404, "NOT_FOUND"));
  EXPECT_TRUE(is_error(h_.get("/v1/healthz/"), 404, "NOT_FOUND"));
}

TEST_F(RouterTest, WrongMethodIs405WithAllow) {
  auto res = h_.send(verb::delete_, "/v1/produce");
  EXPECT_TRUE(is_error(res, 405, "METHOD_NOT_ALLOWED"));
  EXPECT_EQ(res[bhttp::field::allow], "POST");
  res = h_.send(verb::put, "/v1/topics");
  EXPECT_TRUE(is_error(res, 405, "METHOD_NOT_ALLOWED"));
  EXPECT_EQ(res[bhttp::field::allow], "POST, GET");
  res = h_.send(verb::post, "/v1/topics/x");
  EXPECT_EQ(res[bhttp::field::allow], "GET, DELETE");
  res = h_.send(verb::delete_, "/v1/consume");
  EXPECT_EQ(res[bhttp::field::allow], "GET, POST");
}

TEST_F(RouterTest, TopicLifecycle) {
  auto res = h_.post("/v1/topics", {{"name", "orders"}, {"partitions", 3}});
  EXPECT_EQ(res.result_int(), 201);
  EXPECT_EQ(body_of(res), (json{{"status", "created"}, {"name", "orders"}, {"partitions", 3}}));
  // Same settings again: 201 (idempotent).
  res = h_.post("/v1/topics", {{"name", "orders"}, {"partitions", 3}});
  EXPECT_EQ(res.result_int(), 201);
  // Different settings: 409.
  EXPECT_TRUE(is_error(h_.post("/v1/topics", {{"name", "orders"}, {"partitions", 4}}), 409,
                       "ALREADY_EXISTS"));
  create("alpha");

  res = h_.get("/v1/topics");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(body_of(res), (json{{"topics", {"alpha", "orders"}}}));

  res = h_.get("/v1/topics/orders");
  ASSERT_EQ(res.result_int(), 200);
  json info = body_of(res);
  EXPECT_EQ(info["name"], "orders");
  EXPECT_EQ(info["partitions"], 3);
  // The idempotency settings, at their defaults, are checked on their own.
  EXPECT_EQ(info["settings"]["key_conflict"], "hold");
  EXPECT_EQ(info["settings"]["ordering"], "none");
  for (const char* k :
       {"idempotency_key_fields", "idempotency_key_include_topic", "idempotency_key_optional",
        "dedup_by_content", "key_conflict", "key_history", "ordering"})
    info["settings"].erase(k);
  EXPECT_EQ(info["settings"], (json{{"lease_ms", 30000},
                                    {"max_attempts", 0},
                                    {"backoff_ms", 0},
                                    {"max_backoff_ms", 0},
                                    {"max_backlog_messages", 0},
                                    {"max_backlog_bytes", 0},
                                    {"max_inflight", 0},
                                    {"key_ttl_ms", 604800000},
                                    {"dedup_window_ms", 120000},
                                    {"retention_ms", 604800000},
                                    {"replay_window_ms", 0}}));
  EXPECT_EQ(info["groups"], json::object());

  res = h_.send(verb::delete_, "/v1/topics/orders");
  EXPECT_EQ(res.result_int(), 204);
  EXPECT_TRUE(res.body().empty());
  EXPECT_TRUE(is_error(h_.get("/v1/topics/orders"), 404, "NOT_FOUND"));
  EXPECT_TRUE(is_error(h_.send(verb::delete_, "/v1/topics/orders"), 404, "NOT_FOUND"));
}

TEST_F(RouterTest, DefaultLeaseComesFromOptions) {
  http_options o = test_options();
  o.topic_defaults.lease_ms = 4321;
  router_harness h(o);
  ASSERT_EQ(h.post("/v1/topics", {{"name", "t"}}).result_int(), 201);
  EXPECT_EQ(body_of(h.get("/v1/topics/t"))["settings"]["lease_ms"], 4321);
}

TEST_F(RouterTest, BadTopicRequests) {
  EXPECT_TRUE(is_error(h_.post("/v1/topics", {{"name", "bad name"}}), 400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(
      is_error(h_.post("/v1/topics", {{"name", "t"}, {"partitions", 0}}), 400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(
      is_error(h_.post("/v1/topics", {{"name", "t"}, {"partitons", 2}}), 400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(h_.send(verb::post, "/v1/topics", "{not json"), 400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(h_.send(verb::post, "/v1/topics", "[]"), 400, "INVALID_ARGUMENT"));
  // Query parameters work when the body is empty.
  EXPECT_EQ(h_.send(verb::post, "/v1/topics?name=fromquery&partitions=2").result_int(), 201);
  EXPECT_EQ(body_of(h_.get("/v1/topics/fromquery"))["partitions"], 2);
}

TEST_F(RouterTest, ProduceConsumeAck) {
  create("t");
  json p = produce("t", "hello", {{"key", "k1"}, {"envelope", {{"idempotency_key", "job-1"}}}});
  EXPECT_EQ(p, (json{{"status", "produced"},
                     {"topic", "t"},
                     {"partition", 0},
                     {"offset", p["offset"]},
                     {"duplicate", false}}));

  auto ds = consume("t", "w1");
  ASSERT_EQ(ds.size(), 1u);
  const json& d = ds[0];
  EXPECT_EQ(d["topic"], "t");
  EXPECT_EQ(d["partition"], 0);
  EXPECT_EQ(d["offset"], p["offset"]);
  EXPECT_EQ(d["attempts"], 1);
  EXPECT_EQ(d["key"], "k1");
  EXPECT_EQ(d["value"], "hello");
  EXPECT_EQ(d["last_error"], "");
  EXPECT_EQ(d["envelope"], (json{{"idempotency_key", "job-1"}}));
  EXPECT_EQ(d["lease_expires_at_ms"], h_.clock().now_ms() + 30000);
  EXPECT_EQ(d["fencing_token"], 1);
  EXPECT_EQ(d.size(), 10u);

  // Nothing else to deliver.
  EXPECT_TRUE(consume("t", "w1").empty());

  auto res = h_.post("/v1/ack", ack_body(d, "w1"));
  EXPECT_EQ(res.result_int(), 204) << res.body();
  EXPECT_TRUE(res.body().empty());
  EXPECT_EQ(res.count(bhttp::field::content_length), 0u);
  EXPECT_EQ(res.count(bhttp::field::content_type), 0u);
  // The same ack again: 204.
  EXPECT_EQ(h_.post("/v1/ack", ack_body(d, "w1")).result_int(), 204);
  // Another owner: 409.
  EXPECT_TRUE(is_error(h_.post("/v1/ack", ack_body(d, "w2")), 409, "FAILED_PRECONDITION"));
  // Unknown topic on ack: 404.
  json other = ack_body(d, "w1");
  other["topic"] = "nope";
  EXPECT_TRUE(is_error(h_.post("/v1/ack", other), 404, "NOT_FOUND"));

  json info = body_of(h_.get("/v1/topics/t"));
  EXPECT_EQ(info["groups"]["g"]["acked"], 1);
  EXPECT_EQ(info["groups"]["g"]["backlog"], 0);
  EXPECT_EQ(info["groups"]["g"]["inflight"], 0);
}

// Acks carried on the next consume: the first line reports them, the
// messages follow, and the acks are done (the key committed).
TEST_F(RouterTest, ConsumeCarriesThePreviousBatchsAcks) {
  create("t");
  produce("t", "one", {{"envelope", {{"idempotency_key", "job-1"}}}});
  produce("t", "two");
  auto first = consume("t", "w1", 1);
  ASSERT_EQ(first.size(), 1u);
  const json& d = first[0];
  json req = {{"topic", "t"},
              {"group", "g"},
              {"owner", "w1"},
              {"max_messages", 10},
              {"acks",
               {{{"partition", d["partition"]}, {"offset", d["offset"]}, {"result", {{"n", 1}}}},
                {{"partition", 0}, {"offset", 999}}}}};
  auto res = h_.post("/v1/consume", req);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res[bhttp::field::content_type], "application/x-ndjson");
  auto lines = lines_of(res.body());
  ASSERT_EQ(lines.size(), 2u) << res.body();
  ASSERT_TRUE(lines[0].contains("acks"));
  ASSERT_EQ(lines[0]["acks"].size(), 2u);
  EXPECT_EQ(lines[0]["acks"][0]["status"], "acked");
  EXPECT_EQ(lines[0]["acks"][0]["offset"], d["offset"]);
  EXPECT_EQ(lines[0]["acks"][1]["status"], "error");
  EXPECT_EQ(lines[0]["acks"][1]["error"], "FAILED_PRECONDITION");
  EXPECT_EQ(lines[1]["value"], "two");

  json key = body_of(h_.get("/v1/keys?topic=t&group=g&key=job-1"));
  EXPECT_EQ(key["state"], "committed");
  EXPECT_EQ(key["result"], (json{{"n", 1}}));

  // Nothing left: the acks line is the whole answer.
  json last = {{"topic", "t"},
               {"group", "g"},
               {"owner", "w1"},
               {"max_messages", 10},
               {"acks", {{{"partition", lines[1]["partition"]}, {"offset", lines[1]["offset"]}}}}};
  auto res2 = h_.post("/v1/consume", last);
  ASSERT_EQ(res2.result_int(), 200) << res2.body();
  auto only = lines_of(res2.body());
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0]["acks"][0]["status"], "acked");
  json info = body_of(h_.get("/v1/topics/t"));
  EXPECT_EQ(info["groups"]["g"]["acked"], 2);
  EXPECT_EQ(info["groups"]["g"]["inflight"], 0);

  // Acks on an unknown topic: answered as POST /v1/ack would, nothing consumed.
  json bad = last;
  bad["topic"] = "nope";
  EXPECT_TRUE(is_error(h_.post("/v1/consume", bad), 404, "NOT_FOUND"));
  // On a stream: refused.
  json stream = last;
  stream.erase("max_messages");
  EXPECT_TRUE(is_error(h_.post("/v1/consume", stream), 400, "INVALID_ARGUMENT"));
}

TEST_F(RouterTest, UnknownTopicOnProduceOrConsumeIs400) {
  EXPECT_TRUE(is_error(h_.post("/v1/produce", {{"topic", "nope"}, {"value", "v"}}), 400,
                       "INVALID_ARGUMENT"));
  EXPECT_TRUE(
      is_error(h_.post("/v1/consume",
                       {{"topic", "nope"}, {"group", "g"}, {"owner", "o"}, {"max_messages", 1}}),
               400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(h_.get("/v1/consume?topic=nope&group=g&owner=o"), 400, "INVALID_ARGUMENT"));
}

TEST_F(RouterTest, ProduceRejectsBadInput) {
  create("t");
  EXPECT_TRUE(
      is_error(h_.post("/v1/produce", {{"topic", "t"}, {"value", ""}}), 400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(h_.post("/v1/produce", {{"topic", "t"}, {"value", "v"}, {"vaule", "v"}}),
                       400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(
      h_.post(
          "/v1/produce",
          {{"topic", "t"}, {"value", "v"}, {"envelope", {{"deadline", "2000-01-01T00:00:00Z"}}}}),
      400, "INVALID_ARGUMENT"));  // deadline passed
  EXPECT_TRUE(
      is_error(h_.post("/v1/produce",
                       {{"topic", "t"}, {"value", "v"}, {"envelope", {{"deadline", "soon"}}}}),
               400, "INVALID_ARGUMENT"));
  // Nothing was stored.
  EXPECT_TRUE(consume("t", "w").empty());
}

TEST_F(RouterTest, ProduceBatchAndDedupHeader) {
  create("t", {{"partitions", 2}});
  auto res =
      h_.post("/v1/produce",
              {{"topic", "t"},
               {"messages",
                {{{"value", "a"}, {"envelope", {{"partition_override", 1}}}}, {{"value", "b"}}}}});
  ASSERT_EQ(res.result_int(), 200) << res.body();
  json b = body_of(res);
  EXPECT_EQ(b["status"], "produced");
  EXPECT_EQ(b["topic"], "t");
  ASSERT_EQ(b["results"].size(), 2u);
  EXPECT_EQ(b["results"][0]["partition"], 1);
  EXPECT_EQ(b["results"][0]["duplicate"], false);

  auto first = h_.send(verb::post, "/v1/produce", json{{"topic", "t"}, {"value", "x"}}.dump(),
                       {{"Idempotency-Key", "abc"}});
  auto again = h_.send(verb::post, "/v1/produce", json{{"topic", "t"}, {"value", "x"}}.dump(),
                       {{"Idempotency-Key", "abc"}});
  ASSERT_EQ(first.result_int(), 200);
  ASSERT_EQ(again.result_int(), 200);
  EXPECT_EQ(body_of(first)["duplicate"], false);
  EXPECT_EQ(body_of(again)["duplicate"], true);
  EXPECT_EQ(body_of(again)["offset"], body_of(first)["offset"]);
  EXPECT_EQ(body_of(again)["partition"], body_of(first)["partition"]);
}

TEST_F(RouterTest, ConsumeWithQueryParameters) {
  create("t");
  produce("t", "v");
  auto res = h_.get("/v1/consume?topic=t&group=g&owner=w%201&max_messages=5&lease_ms=1000");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  auto ds = lines_of(res.body());
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0]["lease_expires_at_ms"], h_.clock().now_ms() + 1000);
  // The owner from the query ("w 1") holds it.
  EXPECT_EQ(h_.post("/v1/ack", ack_body(ds[0], "w 1")).result_int(), 204);
}

TEST_F(RouterTest, ConsumeBadParameters) {
  create("t");
  EXPECT_TRUE(is_error(h_.get("/v1/consume?topic=t&group=g&owner=o&max_messages=0"), 400,
                       "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(h_.get("/v1/consume?topic=t&group=g&owner=o&max_messages=x"), 400,
                       "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(h_.get("/v1/consume?topic=t&group=g"), 400, "INVALID_ARGUMENT"));
  EXPECT_TRUE(is_error(h_.get("/v1/consume?topic=t&group=g&owner=o&wait_ms=60001&max_messages=1"),
                       400, "INVALID_ARGUMENT"));
}

TEST_F(RouterTest, LongPollWithNothingAnswersEmptyAfterWait) {
  create("t");
  auto start = std::chrono::steady_clock::now();
  auto res = h_.get("/v1/consume?topic=t&group=g&owner=o&max_messages=1&wait_ms=150");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_TRUE(res.body().empty());
  EXPECT_EQ(res[bhttp::field::content_type], "application/x-ndjson");
  EXPECT_GE(took, std::chrono::milliseconds(140));
}

TEST_F(RouterTest, LongPollWakesOnProduce) {
  create("t");
  std::thread producer([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    router_harness* h = &h_;
    (void)h->post("/v1/produce", {{"topic", "t"}, {"value", "late"}});
  });
  auto start = std::chrono::steady_clock::now();
  auto res = h_.get("/v1/consume?topic=t&group=g&owner=o&max_messages=1&wait_ms=5000");
  auto took = std::chrono::steady_clock::now() - start;
  producer.join();
  ASSERT_EQ(res.result_int(), 200);
  auto ds = lines_of(res.body());
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0]["value"], "late");
  EXPECT_LT(took, std::chrono::milliseconds(4000));
}

TEST_F(RouterTest, StreamConsume) {
  create("t");
  produce("t", "one");
  produce("t", "two");
  request req{verb::get, "/v1/consume?topic=t&group=g&owner=s", 11};
  reply r = h_.call(std::move(req));
  ASSERT_EQ(r.res.result_int(), 200) << r.res.body();
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(r.res[bhttp::field::content_type], "application/x-ndjson");
  EXPECT_FALSE(r.res["X-Request-Id"].empty());
  auto first = lines_of(r.stream->take_initial());
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0]["value"], "one");
  EXPECT_EQ(first[1]["value"], "two");

  // Nothing more: a poll answers "".
  auto empty = h_.next(*r.stream);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  produce("t", "three");
  auto more = h_.next(*r.stream);
  ASSERT_TRUE(more.ok());
  auto lines = lines_of(*more);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["value"], "three");
  EXPECT_EQ(lines[0]["attempts"], 1);

  // Once the core stops, the stream ends with an error.
  h_.core().stop();
  auto ended = h_.next(*r.stream);
  EXPECT_FALSE(ended.ok());
}

TEST_F(RouterTest, AbandonedStreamBatchIsRedeliveredAtOnce) {
  create("t");
  produce("t", "lost");
  request req{verb::get, "/v1/consume?topic=t&group=g&owner=gone", 11};
  reply r = h_.call(std::move(req));
  ASSERT_TRUE(r.stream);
  ASSERT_EQ(lines_of(r.stream->take_initial()).size(), 1u);
  // Without abandoning, the lease would hold the message for 30 s.
  r.stream->abandon_last();
  // Any later command runs after the abandon on the core: then move time.
  EXPECT_EQ(body_of(h_.get("/v1/topics/t"))["groups"]["g"]["inflight"], 1);
  h_.clock().advance(5);
  std::vector<json> got;
  for (int i = 0; i < 100 && got.empty(); ++i) {
    got = consume("t", "alive");
    if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["value"], "lost");
  EXPECT_EQ(got[0]["attempts"], 2);
  EXPECT_EQ(got[0]["last_error"], "lease_expired");
}

TEST_F(RouterTest, AckBatch) {
  create("t");
  produce("t", "a");
  produce("t", "b");
  auto ds = consume("t", "w");
  ASSERT_EQ(ds.size(), 2u);
  json body = {
      {"topic", "t"},
      {"group", "g"},
      {"owner", "w"},
      {"acks",
       {{{"partition", 0}, {"offset", ds[0]["offset"]}}, {{"partition", 0}, {"offset", 999}}}}};
  auto res = h_.post("/v1/ack", body);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  json results = body_of(res)["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0], (json{{"partition", 0}, {"offset", ds[0]["offset"]}, {"status", "acked"}}));
  EXPECT_EQ(results[1]["status"], "error");
  EXPECT_TRUE(results[1]["error"].is_string());
}

TEST_F(RouterTest, NackRedelivers) {
  create("t");
  produce("t", "v");
  auto ds = consume("t", "w");
  ASSERT_EQ(ds.size(), 1u);
  json nack = ack_body(ds[0], "w");
  nack["reason"] = "boom";
  auto res = h_.post("/v1/nack", nack);
  EXPECT_EQ(res.result_int(), 204) << res.body();
  ds = consume("t", "w2");
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0]["attempts"], 2);
  EXPECT_EQ(ds[0]["last_error"], "boom");
  // The first owner no longer holds it.
  EXPECT_TRUE(is_error(h_.post("/v1/nack", nack), 409, "FAILED_PRECONDITION"));
}

TEST_F(RouterTest, Extend) {
  create("t");
  produce("t", "v");
  auto ds = consume("t", "w");
  ASSERT_EQ(ds.size(), 1u);
  h_.clock().advance(1000);
  json ext = ack_body(ds[0], "w");
  ext["lease_ms"] = 60000;
  auto res = h_.post("/v1/extend", ext);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(body_of(res), (json{{"lease_expires_at_ms", h_.clock().now_ms() + 60000}}));
  ext["owner"] = "other";
  EXPECT_TRUE(is_error(h_.post("/v1/extend", ext), 409, "FAILED_PRECONDITION"));
}

TEST_F(RouterTest, KeyStates) {
  create("t");
  auto res = h_.get("/v1/keys?topic=t&group=g&key=job-1");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(body_of(res), (json{{"state", "none"}}));

  produce("t", "v", {{"envelope", {{"idempotency_key", "job-1"}}}});
  auto ds = consume("t", "w");
  ASSERT_EQ(ds.size(), 1u);
  json k = body_of(h_.get("/v1/keys?topic=t&group=g&key=job-1"));
  EXPECT_EQ(k["state"], "leased");
  EXPECT_EQ(k["owner"], "w");
  EXPECT_EQ(k["offset"], ds[0]["offset"]);
  EXPECT_EQ(k["lease_expires_at_ms"], ds[0]["lease_expires_at_ms"]);

  json ack = ack_body(ds[0], "w");
  ack["result"] = {{"charge", "ch_1"}};
  ASSERT_EQ(h_.post("/v1/ack", ack).result_int(), 204);
  k = body_of(h_.get("/v1/keys?topic=t&group=g&key=job-1"));
  EXPECT_EQ(k["state"], "committed");
  EXPECT_EQ(k["result"], (json{{"charge", "ch_1"}}));
  EXPECT_EQ(k["committed_at_ms"], h_.clock().now_ms());
  EXPECT_EQ(k["expires_at_ms"], h_.clock().now_ms() + 604800000);
  EXPECT_FALSE(k.contains("lease_expires_at_ms"));
}

TEST_F(RouterTest, KeyWaitReturnsOnCommit) {
  create("t");
  produce("t", "v", {{"envelope", {{"idempotency_key", "job-2"}}}});
  auto ds = consume("t", "w");
  ASSERT_EQ(ds.size(), 1u);
  std::thread acker([this, ack = ack_body(ds[0], "w")] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (void)h_.post("/v1/ack", ack);
  });
  auto res = h_.get("/v1/keys?topic=t&group=g&key=job-2&wait_ms=5000");
  acker.join();
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(body_of(res)["state"], "committed");
}

TEST_F(RouterTest, DeadLetterAndRedrive) {
  create("t", {{"max_attempts", 1}});
  produce("t", "v", {{"envelope", {{"run_id", "r1"}}}});
  auto ds = consume("t", "w");
  ASSERT_EQ(ds.size(), 1u);
  json nack = ack_body(ds[0], "w");
  nack["reason"] = "fatal";
  ASSERT_EQ(h_.post("/v1/nack", nack).result_int(), 204);

  auto dead = consume("dlq.t", "w");
  ASSERT_EQ(dead.size(), 1u);
  json env = dead[0]["envelope"];
  EXPECT_EQ(env["run_id"], "r1");
  ASSERT_TRUE(env.contains("dlq"));
  EXPECT_EQ(env["dlq"]["original_topic"], "t");
  EXPECT_EQ(env["dlq"]["original_offset"], ds[0]["offset"]);
  EXPECT_EQ(env["dlq"]["last_error"], "fatal");
  EXPECT_EQ(env["dlq"]["attempts"], 1);

  auto res = h_.post("/v1/dlq/redrive", {{"topic", "t"}});
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(body_of(res), (json{{"moved", 1}}));
  auto back = consume("t", "w", 10, "g2");
  ASSERT_FALSE(back.empty());
}

TEST_F(RouterTest, ReplayShowsTheDiffThenHandsBackOnlyWhatDidNotCommit) {
  create("t", {{"replay_window_ms", 3600000}});
  produce("t", "a", {{"envelope", {{"idempotency_key", "k1"}}}});
  produce("t", "b");
  auto ds = consume("t", "w");
  ASSERT_EQ(ds.size(), 2u);
  json first = ack_body(ds[0], "w");
  first["result"] = {{"n", 1}};
  ASSERT_EQ(h_.post("/v1/ack", first).result_int(), 204);
  ASSERT_EQ(h_.post("/v1/ack", ack_body(ds[1], "w")).result_int(), 204);

  json req = {
      {"topic", "t"}, {"group", "g"}, {"partition", 0}, {"from_offset", 0}, {"to_offset", 10}};
  auto res = h_.post("/v1/replay", req);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  json dry = body_of(res);
  EXPECT_EQ(dry["dry_run"], true);
  EXPECT_EQ(dry["summary"]["already_committed"], 1);
  EXPECT_EQ(dry["summary"]["would_deliver"], 1);
  EXPECT_EQ(dry["replayed"], 0);
  EXPECT_EQ(dry["messages"][0]["result"], (json{{"n", 1}}));
  EXPECT_EQ(dry["messages"][0]["owner"], "w");
  EXPECT_TRUE(dry["next"].is_null());
  EXPECT_TRUE(consume("t", "w").empty()) << "a dry run changes nothing";

  req["dry_run"] = false;
  res = h_.post("/v1/replay", req);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(body_of(res)["replayed"], 1);
  auto again = consume("t", "w");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]["value"], "b");
  EXPECT_EQ(again[0]["last_error"], "replay");
}

TEST_F(RouterTest, ReplayRefusesUnknownTopicsAndGroupsAndBadRanges) {
  create("t");
  produce("t", "a");
  consume("t", "w");
  auto status = [&](json body) { return h_.post("/v1/replay", body).result_int(); };
  json ok = {{"topic", "t"}, {"group", "g"}, {"from_ms", 0}, {"to_ms", 10}};
  EXPECT_EQ(status(ok), 200);
  json j = ok;
  j["topic"] = "nope";
  EXPECT_EQ(status(j), 404);
  j = ok;
  j["group"] = "nope";
  EXPECT_EQ(status(j), 404);
  j = ok;
  j["from_ms"] = 20;
  EXPECT_EQ(status(j), 400);
  j = ok;
  j["from_offset"] = 0;
  EXPECT_EQ(status(j), 400);
  auto res = h_.post("/v1/replay", {{"topic", "t"}, {"group", "g"}});
  ASSERT_EQ(res.result_int(), 400);
  EXPECT_EQ(body_of(res)["error"], "INVALID_ARGUMENT");
}

TEST_F(RouterTest, Metrics) {
  create("t");
  produce("t", "v");
  consume("t", "w");
  auto res = h_.get("/metrics");
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(res[bhttp::field::content_type].substr(0, 10), "text/plain");
  const std::string& text = res.body();
  EXPECT_NE(text.find("onceq_produced_total{topic=\"t\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("onceq_delivered_total{topic=\"t\",group=\"g\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("onceq_inflight{topic=\"t\",group=\"g\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("onceq_http_request_duration_seconds_count{route=\"/v1/produce\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("onceq_http_responses_total{route=\"/v1/topics\",code=\"201\"} 1\n"),
            std::string::npos);
}

TEST_F(RouterTest, MetricsOmitWalSyncsForAStoreWithoutAWal) {
  auto res = h_.get("/metrics");
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body().find("onceq_wal_sync"), std::string::npos) << res.body();
}

// The in-memory store, reporting WAL sync statistics as the RocksDB store does.
class wal_store final : public storage::memory_store {
 public:
  explicit wal_store(storage::sync_stats s) : stats_(s) {}
  std::optional<storage::sync_stats> wal_sync_stats() const override { return stats_; }

 private:
  storage::sync_stats stats_;
};

TEST(RouterWalMetricsTest, MetricsShowTheStoresWalSyncs) {
  storage::sync_stats s;
  s.buckets[2] = 4;  // <= 250 µs
  s.count = 4;
  s.sum_ns = 800'000;
  s.waiters = 10;
  wal_store store(s);
  router_harness h(test_options(), &store);
  auto res = h.get("/metrics");
  ASSERT_EQ(res.result_int(), 200);
  const std::string& text = res.body();
  EXPECT_NE(text.find("# TYPE onceq_wal_sync_duration_seconds histogram\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("onceq_wal_sync_duration_seconds_bucket{le=\"0.0001\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("onceq_wal_sync_duration_seconds_bucket{le=\"0.00025\"} 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("onceq_wal_sync_duration_seconds_bucket{le=\"+Inf\"} 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("onceq_wal_sync_duration_seconds_sum 0.0008\n"), std::string::npos);
  EXPECT_NE(text.find("onceq_wal_sync_duration_seconds_count 4\n"), std::string::npos);
  EXPECT_NE(text.find("onceq_wal_sync_waiters_total 10\n"), std::string::npos);
}

TEST(RouterBackpressureTest, QueueOverLimitAnswers429) {
  http_options o = test_options();
  o.max_queue_depth = 0;
  o.retry_after_ms = 250;
  router_harness h(o);
  // Block the core thread, then queue one more command behind it.
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> started;
  h.core().execute<int>(
      [&started, released](broker&) -> result<int> {
        started.set_value();
        released.wait();
        return 0;
      },
      [](result<int>) {});
  started.get_future().wait();
  h.core().execute<int>([](broker&) -> result<int> { return 0; }, [](result<int>) {});
  ASSERT_GE(h.core().queue_depth(), 1u);

  auto res = h.post("/v1/topics", {{"name", "t"}});
  EXPECT_TRUE(is_error(res, 429, "RESOURCE_EXHAUSTED"));
  EXPECT_EQ(res[bhttp::field::retry_after], "1");
  EXPECT_EQ(body_of(res)["retry_after_ms"], 250);
  // Health checks are not held back.
  EXPECT_EQ(h.get("/v1/healthz").result_int(), 200);
  release.set_value();
}

TEST_F(RouterTest, RoutesAreDescribed) {
  auto routes = h_.routes().describe_routes();
  EXPECT_NE(std::find(routes.begin(), routes.end(), "POST /v1/produce"), routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "GET /metrics"), routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "GET /ui"), routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "GET /v1/openapi.json"), routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "GET /v1/keys/history"), routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "POST /v1/replay"), routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "GET /v1/cluster"), routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "POST /v1/internal/outbox_append"),
            routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "POST /v1/cluster/nodes/{id}/drain"),
            routes.end());
  EXPECT_NE(std::find(routes.begin(), routes.end(), "POST /v1/cluster/shards/{shard}/move"),
            routes.end());
  EXPECT_EQ(routes.size(), 25u);
}

}  // namespace
}  // namespace onceq::http
