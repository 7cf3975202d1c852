// --auth-file against the real onceqd: 401/403/200 per scope and topic, a
// batch checked once, no token in the server's output, SIGHUP reload, and
// exit 2 on a bad file.

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

// Tokens long enough to never occur in a log by accident.
constexpr std::string_view k_ops = "ops-7f3a9c1e-token";
constexpr std::string_view k_producer = "prod-2b8d4e6f-token";
constexpr std::string_view k_worker = "work-5c1a7e3d-token";
constexpr std::string_view k_scraper = "scrape-9e4b2a8c-token";
constexpr std::string_view k_guess = "guess-0d6f3b9a-token";
constexpr std::string_view k_rotated = "rotated-4a8c2e6b-token";
constexpr std::string_view k_stepper = "step-6d2f8a4c-token";

// sha256(k_worker), written as token_sha256 in the file.
std::string worker_sha256() {
  std::string out;
  FILE* p = ::popen(("printf %s '" + std::string(k_worker) + "' | sha256sum").c_str(), "r");
  if (p == nullptr) return out;
  char buf[128] = {};
  if (std::fgets(buf, sizeof buf, p) != nullptr) out.assign(buf, 64);
  ::pclose(p);
  return out;
}

json base_tokens() {
  return json::array({
      {{"name", "ops"},
       {"token", k_ops},
       {"scopes", {"admin", "produce", "consume", "metrics"}},
       {"topics", {"*"}}},
      {{"name", "producer"},
       {"token", k_producer},
       {"scopes", {"produce"}},
       {"topics", {"orders", "payments.*"}}},
      {{"name", "worker"},
       {"token_sha256", worker_sha256()},
       {"scopes", {"consume"}},
       {"topics", {"orders"}}},
      {{"name", "scraper"},
       {"token", k_scraper},
       {"scopes", {"metrics"}},
       {"topics", json::array()}},
      {{"name", "stepper"},
       {"token", k_stepper},
       {"scopes", {"consume", "produce"}},
       {"topics", {"orders", "payments.*"}}},
  });
}

header_list bearer(std::string_view token) {
  return {{"Authorization", "Bearer " + std::string(token)}};
}

class auth : public onceq_test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("onceq-auth-" + std::to_string(::getpid()) + "-" + std::to_string(now_ms()));
    std::filesystem::create_directories(dir_);
    file_ = (dir_ / "auth.json").string();
    write_file({{"tokens", base_tokens()}});
    server_process::options o;
    o.extra_args = {"--auth-file", file_};
    start_server(std::move(o));
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  void write_file(const json& j) { write_text(j.dump(2)); }
  void write_text(const std::string& text) {
    // Written aside and renamed: a SIGHUP never sees half a file.
    const std::string tmp = file_ + ".tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, file_);
  }

  http_response as(std::string_view token, std::string_view method, std::string_view target,
                   const json& body = nullptr) {
    return client().request(method, target, body.is_null() ? std::string() : body.dump(),
                            bearer(token));
  }

  // onceq_auth_denied_total for that token name and reason (0 if absent).
  long long denied(std::string_view name, std::string_view reason) {
    auto res = as(k_scraper, "GET", "/metrics");
    EXPECT_EQ(res.status, 200u);
    std::regex re("onceq_auth_denied_total\\{token=\"" + std::string(name) + "\",reason=\"" +
                  std::string(reason) + "\"\\} ([0-9]+)");
    std::smatch m;
    return std::regex_search(res.body, m, re) ? std::stoll(m[1]) : 0;
  }

  void admin_create(const std::string& name) {
    auto res = as(k_ops, "POST", "/v1/topics", {{"name", name}});
    ASSERT_EQ(res.status, 201u) << res.body;
  }

  std::filesystem::path dir_;
  std::string file_;
};

TEST_F(auth, missing_or_unknown_token_is_401_with_a_challenge) {
  for (auto res : {client().get("/v1/topics"), as(k_guess, "GET", "/v1/topics"),
                   client().get("/v1/topics", {{"Authorization", "Basic b3BzOm9wcw=="}}),
                   client().post("/v1/produce", {{"topic", "orders"}, {"value", "v"}})}) {
    EXPECT_TRUE(is_error(res, 401, "UNAUTHENTICATED"));
    EXPECT_EQ(res.header("WWW-Authenticate"), "Bearer");
    EXPECT_EQ(res.body.find(k_guess), std::string::npos);
  }
  EXPECT_EQ(client().get("/v1/healthz").status, 200u);
  EXPECT_EQ(client().get("/v1/version").status, 200u);
  EXPECT_TRUE(is_error(client().get("/metrics"), 401, "UNAUTHENTICATED"));
}

TEST_F(auth, each_scope_and_topic_decides) {
  // admin
  EXPECT_TRUE(is_error(as(k_producer, "POST", "/v1/topics", {{"name", "orders"}}), 403,
                       "PERMISSION_DENIED"));
  admin_create("orders");
  admin_create("other");
  EXPECT_EQ(as(k_ops, "GET", "/v1/topics").json()["topics"], json({"orders", "other"}));
  EXPECT_TRUE(is_error(as(k_worker, "GET", "/v1/topics/orders"), 403, "PERMISSION_DENIED"));
  EXPECT_EQ(as(k_ops, "GET", "/v1/topics/orders").status, 200u);

  // produce: the scope, then the topic
  const json to_orders = {{"topic", "orders"}, {"value", "v1"}};
  EXPECT_TRUE(is_error(as(k_worker, "POST", "/v1/produce", to_orders), 403, "PERMISSION_DENIED"));
  EXPECT_EQ(as(k_producer, "POST", "/v1/produce", to_orders).status, 200u);
  EXPECT_TRUE(is_error(as(k_producer, "POST", "/v1/produce", {{"topic", "other"}, {"value", "x"}}),
                       403, "PERMISSION_DENIED"));

  // consume (the hashed token), ack, keys
  EXPECT_TRUE(is_error(as(k_producer, "POST", "/v1/consume", consume_body("orders", "g", "w", 1)),
                       403, "PERMISSION_DENIED"));
  auto got = as(k_worker, "POST", "/v1/consume", consume_body("orders", "g", "w", 10));
  ASSERT_EQ(got.status, 200u) << got.body;
  auto msgs = got.ndjson();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0]["value"], "v1");
  EXPECT_TRUE(is_error(as(k_worker, "POST", "/v1/consume", consume_body("other", "g", "w", 1)), 403,
                       "PERMISSION_DENIED"));
  // The DLQ of a covered topic is covered.
  auto dlq = as(k_worker, "POST", "/v1/consume", consume_body("dlq.orders", "g", "w", 1));
  EXPECT_NE(dlq.status, 403u) << dlq.body;
  const json ack_body = delivery_body("orders", "g", "w", msgs[0]);
  EXPECT_TRUE(is_error(as(k_producer, "POST", "/v1/ack", ack_body), 403, "PERMISSION_DENIED"));
  EXPECT_EQ(as(k_worker, "POST", "/v1/ack", ack_body).status, 204u);
  EXPECT_EQ(as(k_worker, "GET", "/v1/keys?topic=orders&group=g&key=k").status, 200u);

  // admin-only: redrive and delete
  EXPECT_TRUE(is_error(as(k_worker, "POST", "/v1/dlq/redrive", {{"topic", "orders"}}), 403,
                       "PERMISSION_DENIED"));
  const auto redrive = as(k_ops, "POST", "/v1/dlq/redrive", {{"topic", "orders"}});
  EXPECT_TRUE(redrive.status != 401u && redrive.status != 403u) << redrive.body;
  EXPECT_TRUE(is_error(as(k_producer, "DELETE", "/v1/topics/other"), 403, "PERMISSION_DENIED"));

  // metrics
  EXPECT_TRUE(is_error(as(k_worker, "GET", "/metrics"), 403, "PERMISSION_DENIED"));
  EXPECT_EQ(as(k_scraper, "GET", "/metrics").status, 200u);
  EXPECT_TRUE(is_error(as(k_scraper, "GET", "/v1/topics"), 403, "PERMISSION_DENIED"));

  // Nothing refused reached the core: "other" is still there and empty.
  auto other = as(k_ops, "POST", "/v1/consume", consume_body("other", "g2", "o", 10));
  ASSERT_EQ(other.status, 200u);
  EXPECT_TRUE(other.ndjson().empty());
}

// A workflow step (an ack with produce) needs the produce scope and every
// target topic, besides the ack's own; refused, it stores nothing.
TEST_F(auth, an_ack_that_produces_needs_produce_on_every_target) {
  admin_create("orders");
  admin_create("other");
  admin_create("payments.eu");
  ASSERT_EQ(as(k_ops, "POST", "/v1/produce", {{"topic", "orders"}, {"value", "o"}}).status, 200u);
  auto got = as(k_stepper, "POST", "/v1/consume", consume_body("orders", "g", "w", 1));
  ASSERT_EQ(got.status, 200u) << got.body;
  const json msg = got.ndjson().at(0);
  auto step_to = [&](const std::string& topic) {
    return delivery_body("orders", "g", "w", msg,
                         {{"produce", json::array({{{"topic", topic}, {"value", "next"}}})}});
  };
  // The worker token consumes orders but may not produce at all.
  EXPECT_TRUE(
      is_error(as(k_worker, "POST", "/v1/ack", step_to("payments.eu")), 403, "PERMISSION_DENIED"));
  // The stepper may produce, but not into "other".
  EXPECT_TRUE(
      is_error(as(k_stepper, "POST", "/v1/ack", step_to("other")), 403, "PERMISSION_DENIED"));
  // Nothing was stored, the delivery is still open: the right ack works.
  auto ok = as(k_stepper, "POST", "/v1/ack", step_to("payments.eu"));
  ASSERT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(ok.json()["produced"][0]["status"], "stored");
  auto other = as(k_ops, "POST", "/v1/consume", consume_body("other", "g", "o", 10));
  ASSERT_EQ(other.status, 200u);
  EXPECT_TRUE(other.ndjson().empty());
}

TEST_F(auth, a_batch_is_checked_once) {
  admin_create("other");
  const long long before = denied("producer", "forbidden");
  json messages = json::array();
  for (int i = 0; i < 5; ++i) messages.push_back({{"value", numbered("m", i)}});
  EXPECT_TRUE(
      is_error(as(k_producer, "POST", "/v1/produce", {{"topic", "other"}, {"messages", messages}}),
               403, "PERMISSION_DENIED"));
  EXPECT_EQ(denied("producer", "forbidden"), before + 1);
  admin_create("payments.eu");
  auto ok =
      as(k_producer, "POST", "/v1/produce", {{"topic", "payments.eu"}, {"messages", messages}});
  ASSERT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(ok.json()["results"].size(), 5u);
  EXPECT_EQ(denied("producer", "forbidden"), before + 1);
}

TEST_F(auth, sighup_reloads_and_a_bad_file_keeps_the_old_tokens) {
  admin_create("orders");
  ASSERT_EQ(as(k_producer, "POST", "/v1/produce", {{"topic", "orders"}, {"value", "a"}}).status,
            200u);
  EXPECT_TRUE(is_error(as(k_rotated, "GET", "/v1/topics"), 401, "UNAUTHENTICATED"));

  // Rotate: the producer token goes, a new admin token comes.
  json tokens = base_tokens();
  tokens.erase(1);
  tokens.push_back(
      {{"name", "rotated"}, {"token", k_rotated}, {"scopes", {"admin"}}, {"topics", {"*"}}});
  write_file({{"tokens", tokens}});
  // The connection opened before the reload stays open and works.
  ASSERT_EQ(::kill(server_->pid(), SIGHUP), 0);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (as(k_rotated, "GET", "/v1/topics").status != 200 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(as(k_rotated, "GET", "/v1/topics").status, 200u);
  EXPECT_TRUE(is_error(as(k_producer, "POST", "/v1/produce", {{"topic", "orders"}, {"value", "b"}}),
                       401, "UNAUTHENTICATED"));

  // A file that does not parse: the last good table stays, and the log says why.
  write_text(R"({"tokens": [{"name": "x", "token": ")" + std::string(k_guess) + R"(" "oops"}]})");
  ASSERT_EQ(::kill(server_->pid(), SIGHUP), 0);
  const auto deadline2 = std::chrono::steady_clock::now() + 10s;
  while (server_->log_tail(100'000).find("keeping the previous tokens") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline2) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(server_->log_tail(100'000).find("keeping the previous tokens"), std::string::npos);
  EXPECT_EQ(as(k_rotated, "GET", "/v1/topics").status, 200u);
  EXPECT_TRUE(is_error(as(k_guess, "GET", "/v1/topics"), 401, "UNAUTHENTICATED"));
  EXPECT_TRUE(server_->alive());
}

TEST_F(auth, no_token_reaches_the_servers_output) {
  admin_create("orders");
  (void)as(k_producer, "POST", "/v1/produce", {{"topic", "orders"}, {"value", "v"}});
  (void)as(k_guess, "POST", "/v1/produce", {{"topic", "orders"}, {"value", "v"}});
  (void)as(k_worker, "POST", "/v1/produce", {{"topic", "orders"}, {"value", "v"}});
  (void)as(k_scraper, "GET", "/metrics");
  // A reload that fails right after a token in the file.
  write_text(R"({"tokens": [{"name": "x", "token": ")" + std::string(k_guess) + R"(" ]})");
  ASSERT_EQ(::kill(server_->pid(), SIGHUP), 0);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->log_tail(100'000).find("keeping the previous tokens") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  const std::string metrics = as(k_scraper, "GET", "/metrics").body;
  client_.reset();
  ASSERT_EQ(server_->terminate(), 0);
  const std::string log = server_->log_tail(1'000'000);
  EXPECT_NE(log.find("keeping the previous tokens"), std::string::npos) << log;
  for (std::string_view t : {k_ops, k_producer, k_worker, k_scraper, k_guess}) {
    EXPECT_EQ(log.find(t), std::string::npos) << t << " in:\n" << log;
    EXPECT_EQ(metrics.find(t), std::string::npos) << t << " in /metrics";
  }
}

// Runs onceqd with args until it exits; returns its exit code and output.
std::pair<int, std::string> run_onceqd(const std::string& args) {
  const std::string cmd = std::string(ONCEQD_PATH) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(auth_start, a_missing_or_bad_file_exits_2_with_the_reason) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("onceq-auth-start-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string common =
      "--listen 127.0.0.1:0 --data-dir " + (dir / "data").string() + " --auth-file ";

  auto [code, out] = run_onceqd(common + (dir / "missing.json").string());
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("missing.json"), std::string::npos) << out;

  const auto bad = dir / "bad.json";
  std::ofstream(bad) << R"({"tokens": [{"name": "a", "token": ")" << k_guess
                     << R"(", "scopes": ["root"], "topics": []}]})";
  std::tie(code, out) = run_onceqd(common + bad.string());
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("scopes"), std::string::npos) << out;
  EXPECT_EQ(out.find(k_guess), std::string::npos) << out;

  std::ofstream(bad) << "not json";
  std::tie(code, out) = run_onceqd(common + bad.string());
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("not valid JSON"), std::string::npos) << out;

  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace onceq::itest
