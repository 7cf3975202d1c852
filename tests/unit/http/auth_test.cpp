#include "http/auth.hpp"

#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "broker/broker.hpp"
#include "http/codec/inspector.hpp"
#include "http/router.hpp"
#include "shard/shard_set.hpp"
#include "storage/memory_store.hpp"

namespace onceq::http {
namespace {

using json = nlohmann::json;
namespace asio = boost::asio;

std::string hex(const sha256_digest& d) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

json entry(std::string name, std::string token, std::vector<std::string> scopes,
           std::vector<std::string> topics) {
  return {{"name", std::move(name)},
          {"token", std::move(token)},
          {"scopes", std::move(scopes)},
          {"topics", std::move(topics)}};
}

auth_table parsed(const json& file) {
  auto t = auth_table::parse(file.dump());
  EXPECT_TRUE(t.ok()) << t.err().message;
  return t.ok() ? std::move(*t) : auth_table{};
}

// The parse failed and the message says what.
::testing::AssertionResult rejected(std::string_view text, std::string_view what) {
  auto t = auth_table::parse(text);
  if (t.ok()) return ::testing::AssertionFailure() << "accepted";
  if (t.code() != errc::invalid_argument) {
    return ::testing::AssertionFailure() << "code " << to_string(t.code());
  }
  if (t.err().message.find(what) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message '" << t.err().message << "' lacks '" << what << "'";
  }
  return ::testing::AssertionSuccess();
}

// ---- hashing and the file ---------------------------------------------------

TEST(AuthTableTest, Sha256IsTheStandardOne) {
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuthTableTest, PlainAndHashedTokensBothMatch) {
  const std::string digest = hex(sha256("hashed-secret"));
  auto t = parsed({{"tokens",
                    {entry("plain", "plain-secret", {"produce"}, {"*"}),
                     {{"name", "hashed"},
                      {"token_sha256", digest},
                      {"scopes", {"consume"}},
                      {"topics", {"orders"}}}}}});
  ASSERT_EQ(t.tokens().size(), 2u);
  const auth_token* p = t.find("plain-secret");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name, "plain");
  const auth_token* h = t.find("hashed-secret");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->name, "hashed");
  // The digest itself is not a token.
  EXPECT_EQ(t.find(digest), nullptr);
  EXPECT_EQ(t.find("plain-secreT"), nullptr);
  EXPECT_EQ(t.find(""), nullptr);
}

// Tokens are compared in constant time: with OpenSSL's CRYPTO_memcmp, and
// against every entry whichever matched, so neither a guess's closeness nor
// the matching entry's place shows in the time taken.
TEST(AuthTableTest, TokensAreComparedInConstantTimeWithEveryEntry) {
  EXPECT_EQ(k_digest_compare, &CRYPTO_memcmp);
  json tokens = json::array();
  for (int i = 0; i < 5; ++i) {
    tokens.push_back(entry(fmt::format("t{}", i), fmt::format("secret-{}", i), {"produce"}, {"*"}));
  }
  auto t = parsed({{"tokens", tokens}});
  for (const std::string token : {"secret-0", "secret-4", "no-such-secret"}) {
    std::size_t compares = 0;
    auto counting = [&](const void* a, const void* b, std::size_t n) {
      ++compares;
      return CRYPTO_memcmp(a, b, n);
    };
    const auth_token* found = t.find_with(token, counting);
    EXPECT_EQ(compares, 5u) << token;
    EXPECT_EQ(found, t.find(token)) << token;
  }
  ASSERT_NE(t.find("secret-0"), nullptr);
  EXPECT_EQ(t.find("secret-0")->name, "t0");
}

TEST(AuthTableTest, UppercaseHexDigestIsAccepted) {
  std::string digest = hex(sha256("x"));
  for (char& c : digest) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto t = parsed({{"tokens",
                    {{{"name", "up"},
                      {"token_sha256", digest},
                      {"scopes", {"admin"}},
                      {"topics", json::array()}}}}});
  EXPECT_NE(t.find("x"), nullptr);
}

TEST(AuthTableTest, AnEmptyListIsValidAndAdmitsNobody) {
  auto t = parsed({{"tokens", json::array()}});
  EXPECT_TRUE(t.tokens().empty());
  EXPECT_EQ(t.find("anything"), nullptr);
}

TEST(AuthTableTest, BadFilesAreRejectedWithTheReason) {
  EXPECT_TRUE(rejected("", "not valid JSON"));
  EXPECT_TRUE(rejected(R"({"tokens": [)", "not valid JSON"));
  EXPECT_TRUE(rejected("[]", "top level must be an object"));
  EXPECT_TRUE(rejected("{}", "tokens must be an array"));
  EXPECT_TRUE(rejected(R"({"tokens": [], "extra": 1})", "unknown field 'extra'"));
  EXPECT_TRUE(rejected(R"({"tokens": [1]})", "tokens[0] must be an object"));
  EXPECT_TRUE(rejected(R"({"tokens": [{"token": "t", "scopes": ["admin"], "topics": []}]})",
                       "tokens[0].name must be a string"));
  EXPECT_TRUE(
      rejected(R"({"tokens": [{"name": "a b", "token": "t", "scopes": ["admin"], "topics": []}]})",
               "tokens[0].name must be"));
  EXPECT_TRUE(rejected(R"({"tokens": [{"name": "a", "scopes": ["admin"], "topics": []}]})",
                       "exactly one of token and token_sha256"));
  EXPECT_TRUE(rejected(R"({"tokens": [{"name": "a", "token": "t", "token_sha256": ")" +
                           hex(sha256("t")) + R"(", "scopes": ["admin"], "topics": []}]})",
                       "exactly one of token and token_sha256"));
  EXPECT_TRUE(
      rejected(R"({"tokens": [{"name": "a", "token": "", "scopes": ["admin"], "topics": []}]})",
               "tokens[0] ('a').token must be a non-empty string"));
  EXPECT_TRUE(rejected(
      R"({"tokens": [{"name": "a", "token_sha256": "abc", "scopes": ["admin"], "topics": []}]})",
      "token_sha256 must be 64 hex digits"));
  EXPECT_TRUE(rejected(R"({"tokens": [{"name": "a", "token": "t", "scopes": [], "topics": []}]})",
                       "scopes must be a non-empty array"));
  EXPECT_TRUE(
      rejected(R"({"tokens": [{"name": "a", "token": "t", "scopes": ["root"], "topics": []}]})",
               "each must be produce, consume, admin or metrics"));
  EXPECT_TRUE(rejected(R"({"tokens": [{"name": "a", "token": "t", "scopes": ["admin"]}]})",
                       "topics must be an array"));
  for (std::string bad : {"or*ders", "*orders", "a b", "", "x**"}) {
    EXPECT_TRUE(rejected(R"({"tokens": [{"name": "a", "token": "t", "scopes": ["admin"],
                             "topics": [")" +
                             bad + R"("]}]})",
                         "each must be a topic name or a prefix ending in '*'"))
        << bad;
  }
  EXPECT_TRUE(rejected(
      R"({"tokens": [{"name": "a", "token": "t", "scopes": ["admin"], "topics": [], "ttl": 1}]})",
      "unknown field 'ttl'"));
  EXPECT_TRUE(
      rejected(R"({"tokens": [{"name": "a", "token": "t", "scopes": ["admin"], "topics": []},
                                      {"name": "a", "token": "u", "scopes": ["admin"], "topics": []}]})",
               "name 'a' given twice"));
  EXPECT_TRUE(
      rejected(R"({"tokens": [{"name": "a", "token": "t", "scopes": ["admin"], "topics": []},
                                      {"name": "b", "token": "t", "scopes": ["admin"], "topics": []}]})",
               "has the same token as 'a'"));
}

TEST(AuthTableTest, NoErrorMessageQuotesASecret) {
  // A JSON error right after a token: the parser's own message would quote it.
  auto t = auth_table::parse(R"({"tokens": [{"name": "a", "token": "hunter2-secret" "scopes"}]})");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.err().message.find("hunter2"), std::string::npos) << t.err().message;
  // A bad field after a good token.
  t = auth_table::parse(
      R"({"tokens": [{"name": "a", "token": "hunter2-secret", "scopes": ["x"], "topics": []}]})");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.err().message.find("hunter2"), std::string::npos) << t.err().message;
  // A malformed digest is not echoed either (it may be a token pasted in the wrong field).
  t = auth_table::parse(
      R"({"tokens": [{"name": "a", "token_sha256": "hunter2-secret", "scopes": ["admin"],
                      "topics": []}]})");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.err().message.find("hunter2"), std::string::npos) << t.err().message;
}

TEST(AuthTableTest, LoadNamesAMissingFile) {
  auto t = auth_table::load("/nonexistent/onceq-auth.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.err().message.find("/nonexistent/onceq-auth.json"), std::string::npos);
}

// ---- topics and scopes --------------------------------------------------------

TEST(AuthTableTest, TopicPatternsAreExactOrPrefixGlobs) {
  EXPECT_TRUE(topic_pattern_matches("orders", "orders"));
  EXPECT_FALSE(topic_pattern_matches("orders", "orders2"));
  EXPECT_FALSE(topic_pattern_matches("orders", "order"));
  EXPECT_TRUE(topic_pattern_matches("payments.*", "payments.eu"));
  EXPECT_TRUE(topic_pattern_matches("payments.*", "payments."));
  EXPECT_FALSE(topic_pattern_matches("payments.*", "payments"));
  EXPECT_FALSE(topic_pattern_matches("payments.*", "xpayments.eu"));
  EXPECT_TRUE(topic_pattern_matches("pay*", "payments"));
  EXPECT_TRUE(topic_pattern_matches("*", "anything"));
}

TEST(AuthTableTest, ADlqIsCoveredByItsTopic) {
  auth_token t;
  t.topics = {"orders", "payments.*"};
  EXPECT_TRUE(t.covers("orders"));
  EXPECT_TRUE(t.covers("dlq.orders"));
  EXPECT_TRUE(t.covers("payments.eu"));
  EXPECT_TRUE(t.covers("dlq.payments.eu"));
  EXPECT_FALSE(t.covers("dlq.other"));
  EXPECT_FALSE(t.covers("other"));
  EXPECT_FALSE(t.covers("dlq.orders2"));
  // "dlq.orders" covers the topic of that name, not "orders".
  auth_token d;
  d.topics = {"dlq.orders"};
  EXPECT_TRUE(d.covers("dlq.orders"));
  EXPECT_FALSE(d.covers("orders"));
  auth_token none;
  EXPECT_FALSE(none.covers("orders"));
}

TEST(AuthTableTest, ScopesParseAndCombine) {
  auto t = parsed({{"tokens", {entry("w", "w", {"consume", "metrics"}, {"*"})}}});
  const auth_token& w = t.tokens().at(0);
  EXPECT_TRUE(w.has(scope::consume));
  EXPECT_TRUE(w.has(scope::metrics));
  EXPECT_FALSE(w.has(scope::produce));
  EXPECT_FALSE(w.has(scope::admin));
  EXPECT_EQ(parse_scope("admin"), scope::admin);
  EXPECT_EQ(parse_scope("Admin"), std::nullopt);
  EXPECT_EQ(to_string(scope::produce), "produce");
}

TEST(AuthTableTest, BearerHeaderParsing) {
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("bearer  abc "), "abc");
  EXPECT_EQ(bearer_token("BEARER\tabc"), "abc");
  EXPECT_EQ(bearer_token("Bearer"), std::nullopt);
  EXPECT_EQ(bearer_token("Bearer "), std::nullopt);
  EXPECT_EQ(bearer_token("Bearerabc"), std::nullopt);
  EXPECT_EQ(bearer_token("Basic YWJjOmRlZg=="), std::nullopt);
  EXPECT_EQ(bearer_token(""), std::nullopt);
}

// ---- the authenticator ---------------------------------------------------------

TEST(AuthenticatorTest, DecidesAndCountsWithoutNamingTheToken) {
  authenticator a(parsed({{"tokens", {entry("worker", "w-secret", {"consume"}, {"orders"})}}}));
  auto open = a.authorize("", scope::none);
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(open->may_use("anything"));

  auto missing = a.authorize("", scope::consume);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.code(), errc::unauthenticated);
  auto unknown = a.authorize("Bearer guess-secret", scope::consume);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.code(), errc::unauthenticated);
  EXPECT_EQ(unknown.err().message.find("guess-secret"), std::string::npos);

  auto wrong_scope = a.authorize("Bearer w-secret", scope::produce);
  ASSERT_FALSE(wrong_scope.ok());
  EXPECT_EQ(wrong_scope.code(), errc::permission_denied);
  EXPECT_NE(wrong_scope.err().message.find("worker"), std::string::npos);
  EXPECT_EQ(wrong_scope.err().message.find("w-secret"), std::string::npos);

  auto ok = a.authorize("Bearer w-secret", scope::consume);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->may_use("orders"));
  EXPECT_TRUE(ok->may_use("dlq.orders"));
  EXPECT_FALSE(ok->may_use("payments"));
  error e = a.deny_topic(*ok, "payments");
  EXPECT_EQ(e.code, errc::permission_denied);

  std::string text;
  a.render_metrics(text);
  EXPECT_NE(text.find(R"(onceq_auth_denied_total{token="",reason="unauthenticated"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(onceq_auth_denied_total{token="worker",reason="forbidden"} 2)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("secret"), std::string::npos) << text;
}

TEST(AuthenticatorTest, ReplaceSwapsTheTableButNotAGrantInFlight) {
  authenticator a(parsed({{"tokens", {entry("old", "old-secret", {"admin"}, {"*"})}}}));
  auto held = a.authorize("Bearer old-secret", scope::admin);
  ASSERT_TRUE(held.ok());
  a.replace(parsed({{"tokens", {entry("new", "new-secret", {"admin"}, {"a"})}}}));
  EXPECT_FALSE(a.authorize("Bearer old-secret", scope::admin).ok());
  EXPECT_TRUE(a.authorize("Bearer new-secret", scope::admin).ok());
  // The grant keeps its own table alive: its token pointer stays valid.
  EXPECT_EQ(held->token->name, "old");
  EXPECT_TRUE(held->may_use("zzz"));
}

// ---- the route table ----------------------------------------------------------

// A router with auth over the in-memory store, called without sockets.
class AuthRouterTest : public ::testing::Test {
 protected:
  AuthRouterTest()
      : auth_(
            parsed({{"tokens",
                     {entry("ops", "ops-secret", {"admin", "produce", "consume", "metrics"}, {"*"}),
                      entry("producer", "p-secret", {"produce"}, {"orders", "payments.*"}),
                      entry("worker", "w-secret", {"consume"}, {"orders"}),
                      entry("scraper", "m-secret", {"metrics"}, {}),
                      entry("team-admin", "t-secret", {"admin"}, {"orders"})}}})),
        broker_(store_, clock_, &json_inspector()),
        runner_(0, broker_, store_, clock_),
        shards_({&runner_}),
        router_(shards_, clock_, http_options{}, &auth_) {
    EXPECT_TRUE(broker_.recover().ok());
    runner_.start();
  }
  ~AuthRouterTest() override { runner_.stop(); }

  response send(bhttp::verb method, std::string_view target, std::string body,
                std::string_view token) {
    request req{method, target, 11};
    if (!token.empty()) req.set(bhttp::field::authorization, fmt::format("Bearer {}", token));
    req.body() = std::move(body);
    req.prepare_payload();
    // One context for the fixture, outliving the shard's thread (see
    // router_harness::fresh_ioc).
    asio::io_context& ioc = ioc_;
    ioc.restart();
    std::optional<reply> out;
    asio::co_spawn(ioc, router_.handle(std::move(req)), [&](std::exception_ptr e, reply r) {
      if (e) std::rethrow_exception(e);
      out = std::move(r);
    });
    ioc.run();
    return std::move(out->res);
  }

  asio::io_context ioc_;
  manual_clock clock_;
  storage::memory_store store_;
  authenticator auth_;
  broker broker_;
  shard runner_;
  shard_set shards_;
  router router_;
};

TEST_F(AuthRouterTest, EveryRouteHasItsScope) {
  const auto routes = router_.describe_routes();
  const auto scopes = router_.route_scopes();
  ASSERT_EQ(routes.size(), scopes.size());
  const std::map<std::string, scope> expected = {
      {"GET /v1/healthz", scope::none},
      {"GET /v1/version", scope::none},
      {"POST /v1/topics", scope::admin},
      {"GET /v1/topics", scope::admin},
      {"GET /v1/topics/{name}", scope::admin},
      {"DELETE /v1/topics/{name}", scope::admin},
      {"POST /v1/produce", scope::produce},
      {"GET /v1/consume", scope::consume},
      {"POST /v1/consume", scope::consume},
      {"POST /v1/ack", scope::consume},
      {"POST /v1/nack", scope::consume},
      {"POST /v1/extend", scope::consume},
      {"GET /v1/keys", scope::consume},
      {"POST /v1/dlq/redrive", scope::admin},
      {"GET /metrics", scope::metrics},
      {"GET /ui", scope::none},
      {"GET /v1/openapi.json", scope::none},
      {"GET /v1/keys/history", scope::consume},
      {"POST /v1/replay", scope::admin},
      {"GET /v1/cluster", scope::metrics},
      // No token: only a cluster's own nodes, from its own hosts.
      {"POST /v1/internal/outbox_append", scope::none},
      {"POST /v1/cluster/nodes/{id}/drain", scope::admin},
      {"POST /v1/cluster/rebalance", scope::admin},
      {"POST /v1/cluster/shards/{shard}/move", scope::admin},
      {"POST /v1/internal/meta", scope::none},
  };
  ASSERT_EQ(routes.size(), expected.size());
  for (std::size_t i = 0; i < routes.size(); ++i) {
    auto it = expected.find(routes[i]);
    ASSERT_NE(it, expected.end()) << "a route without an expected scope: " << routes[i];
    EXPECT_EQ(scopes[i], it->second) << routes[i];
  }
}

TEST_F(AuthRouterTest, OpenRoutesNeedNoToken) {
  EXPECT_EQ(send(bhttp::verb::get, "/v1/healthz", "", "").result_int(), 200u);
  EXPECT_EQ(send(bhttp::verb::get, "/v1/version", "", "").result_int(), 200u);
  EXPECT_EQ(send(bhttp::verb::get, "/ui", "", "").result_int(), 200u);
  EXPECT_EQ(send(bhttp::verb::get, "/v1/openapi.json", "", "").result_int(), 200u);
}

TEST_F(AuthRouterTest, MissingOrUnknownTokenIs401WithChallenge) {
  for (std::string_view token : {"", "nope"}) {
    auto res = send(bhttp::verb::get, "/v1/topics", "", token);
    EXPECT_EQ(res.result_int(), 401u) << res.body();
    EXPECT_EQ(res[bhttp::field::www_authenticate], "Bearer");
    EXPECT_EQ(json::parse(res.body())["error"], "UNAUTHENTICATED");
  }
}

TEST_F(AuthRouterTest, ScopeAndTopicDecideBeforeTheCore) {
  const std::string create = R"({"name":"orders"})";
  EXPECT_EQ(send(bhttp::verb::post, "/v1/topics", create, "p-secret").result_int(), 403u);
  EXPECT_EQ(send(bhttp::verb::post, "/v1/topics", create, "ops-secret").result_int(), 201u);
  EXPECT_EQ(send(bhttp::verb::post, "/v1/topics", R"({"name":"other"})", "ops-secret").result_int(),
            201u);

  const std::string msg = R"({"topic":"orders","value":"v"})";
  EXPECT_EQ(send(bhttp::verb::post, "/v1/produce", msg, "w-secret").result_int(), 403u);
  EXPECT_EQ(send(bhttp::verb::post, "/v1/produce", msg, "p-secret").result_int(), 200u);
  auto other =
      send(bhttp::verb::post, "/v1/produce", R"({"topic":"other","value":"v"})", "p-secret");
  EXPECT_EQ(other.result_int(), 403u);
  EXPECT_EQ(json::parse(other.body())["error"], "PERMISSION_DENIED");

  // The denied produce changed nothing.
  auto info = json::parse(send(bhttp::verb::get, "/v1/topics/other", "", "ops-secret").body());
  EXPECT_EQ(info["name"], "other");
  auto got = send(bhttp::verb::post, "/v1/consume",
                  R"({"topic":"other","group":"g","owner":"o","max_messages":10})", "ops-secret");
  EXPECT_EQ(got.result_int(), 200u);
  EXPECT_EQ(got.body(), "");

  EXPECT_EQ(send(bhttp::verb::post, "/v1/consume",
                 R"({"topic":"orders","group":"g","owner":"o","max_messages":10})", "w-secret")
                .result_int(),
            200u);
  EXPECT_EQ(
      send(bhttp::verb::get, "/v1/keys?topic=other&group=g&key=k", "", "w-secret").result_int(),
      403u);
  EXPECT_EQ(send(bhttp::verb::get, "/metrics", "", "w-secret").result_int(), 403u);
  auto metrics = send(bhttp::verb::get, "/metrics", "", "m-secret");
  EXPECT_EQ(metrics.result_int(), 200u);
  EXPECT_NE(metrics.body().find(R"(onceq_auth_denied_total{token="worker",reason="forbidden"})"),
            std::string::npos);
}

TEST_F(AuthRouterTest, ListingShowsOnlyCoveredTopics) {
  ASSERT_EQ(
      send(bhttp::verb::post, "/v1/topics", R"({"name":"orders"})", "ops-secret").result_int(),
      201u);
  ASSERT_EQ(send(bhttp::verb::post, "/v1/topics", R"({"name":"other"})", "ops-secret").result_int(),
            201u);
  auto all = json::parse(send(bhttp::verb::get, "/v1/topics", "", "ops-secret").body());
  EXPECT_EQ(all["topics"], json({"orders", "other"}));
  auto mine = json::parse(send(bhttp::verb::get, "/v1/topics", "", "t-secret").body());
  EXPECT_EQ(mine["topics"], json({"orders"}));
  EXPECT_EQ(send(bhttp::verb::get, "/v1/topics/other", "", "t-secret").result_int(), 403u);
  EXPECT_EQ(send(bhttp::verb::delete_, "/v1/topics/other", "", "t-secret").result_int(), 403u);
  EXPECT_EQ(
      send(bhttp::verb::post, "/v1/dlq/redrive", R"({"topic":"other"})", "t-secret").result_int(),
      403u);
  EXPECT_EQ(send(bhttp::verb::get, "/v1/topics/other", "", "ops-secret").result_int(), 200u);
}

}  // namespace
}  // namespace onceq::http
