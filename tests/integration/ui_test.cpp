// The web console (GET /ui) in headless Chromium against a real onceqd
// with real traffic: what a person sees in the topic table after produce,
// consume, ack and a dead-lettered message, and the key lookup that the
// page runs from its own URL. Skipped, saying why, where Chromium cannot run.
//
// ONCEQ_UI_SCREENSHOT=<path.png> also writes the screenshot there
// (docs/ui.png is made that way, see docs/UI.md).

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "headless_browser.hpp"
#include "test_support.hpp"

namespace onceq::itest {
namespace {

// Virtual time for the page: its first refresh plus a few one-second ticks.
constexpr auto k_budget = std::chrono::milliseconds(3500);

// One probe per test run: the answer does not change.
const std::optional<headless_browser>& browser(std::string* why) {
  static std::string reason;
  static const std::optional<headless_browser> b = headless_browser::find(&reason);
  *why = reason;
  return b;
}

// The cells of the topic table's row for topic/group, by data-col.
std::map<std::string, std::string> row(const std::string& dom, const std::string& topic,
                                       const std::string& group) {
  std::map<std::string, std::string> cells;
  const std::string start = "<tr data-topic=\"" + topic + "\" data-group=\"" + group + "\">";
  const auto at = dom.find(start);
  if (at == std::string::npos) return cells;
  const std::string tr = dom.substr(at, dom.find("</tr>", at) - at);
  static const std::regex cell(R"re(data-col="([a-z]+)"[^>]*>([^<]*)<)re");
  for (std::sregex_iterator it(tr.begin(), tr.end(), cell), end; it != end; ++it) {
    cells[(*it)[1]] = (*it)[2];
  }
  return cells;
}

// The text of the element with data-field="name" (up to its first child
// tag). In a tag: the page's inlined style sheet names the same attribute.
std::string field(const std::string& dom, const std::string& name) {
  const std::regex re("<[a-z0-9]+ [^<>]*data-field=\"" + name + "\"[^<>]*>([^<]*)<");
  std::smatch m;
  return std::regex_search(dom, m, re) ? m[1].str() : std::string("<missing>");
}

class ui : public onceq_test {
 protected:
  void SetUp() override {
    std::string why;
    if (!browser(&why)) GTEST_SKIP() << "headless Chromium unavailable: " << why;
    onceq_test::SetUp();
  }

  const headless_browser& chrome() {
    std::string why;
    return *browser(&why);
  }

  std::string url(const std::string& rest = "") {
    return "http://127.0.0.1:" + std::to_string(port()) + "/ui" + rest;
  }

  // Traffic a person would look at: orders (group billing: 3 acked, 2 in
  // flight, one duplicate produce, one duplicate job auto-acked) and
  // payments, whose only message went to dlq.payments.
  void make_traffic() {
    create_topic("orders", 2);
    for (int i = 1; i <= 5; ++i) {
      produce("orders", numbered("order-", i), numbered("customer-", i),
              json{{"idempotency_key", numbered("charge:", i)}});
    }
    // A producer retry: stored once, counted as a produce duplicate.
    for (int i = 0; i < 2; ++i) {
      auto res = client().post("/v1/produce", {{"topic", "orders"}, {"value", "retry"}},
                               {{"Idempotency-Key", "req-1"}});
      ASSERT_EQ(res.status, 200u) << res.body;
    }
    auto got = consume("orders", "billing", "worker-1", 10, 60'000);
    ASSERT_EQ(got.size(), 6u);
    int acked = 0;
    for (const auto& m : got) {
      if (acked == 3 || m.at("value") == "retry") continue;
      json result = {{"charge_id", "ch_" + m.at("value").get<std::string>()}};
      ASSERT_EQ(ack("orders", "billing", "worker-1", m, result).status, 204u);
      ++acked;
      acked_values_.push_back(m);
    }
    // The retry message stays in flight too: 6 delivered, 3 acked.
    // The same job again: auto-acked by its committed key, never delivered.
    const std::string done_key = acked_values_.front().at("envelope").at("idempotency_key");
    produce("orders", "again", std::nullopt, json{{"idempotency_key", done_key}});
    EXPECT_TRUE(consume("orders", "billing", "worker-1", 10, 60'000).empty());

    create_topic("payments", 1, {{"max_attempts", 1}});
    produce("payments", "card-declined");
    auto pay = consume("payments", "ledger", "worker-2", 1, 60'000);
    ASSERT_EQ(pay.size(), 1u);
    auto res = client().post("/v1/nack", delivery_body("payments", "ledger", "worker-2", pay[0],
                                                       {{"reason", "card declined"}}));
    ASSERT_EQ(res.status, 204u) << res.body;
  }

  std::vector<json> acked_values_;
};

TEST_F(ui, shows_topic_counts_and_a_key_after_real_traffic) {
  ASSERT_NO_FATAL_FAILURE(make_traffic());
  const std::string key = acked_values_.front().at("envelope").at("idempotency_key");
  const std::string charge = "ch_" + acked_values_.front().at("value").get<std::string>();

  auto page =
      chrome().dump_dom(url("#topic=orders&group=billing&key=" + url_encode(key)), k_budget);
  ASSERT_TRUE(page.ok) << page.errors;
  const std::string& dom = page.output;
  EXPECT_EQ(field(dom, "error"), "<missing>");
  EXPECT_NE(dom.find("data-state=\"live\""), std::string::npos) << dom;

  auto orders = row(dom, "orders", "billing");
  ASSERT_FALSE(orders.empty()) << "no orders/billing row in:\n" << dom;
  EXPECT_EQ(orders["topic"], "orders");
  EXPECT_EQ(orders["produced"], "7");  // 5 + the retry stored once + "again"
  EXPECT_EQ(orders["group"], "billing");
  EXPECT_EQ(orders["backlog"], "0");
  EXPECT_EQ(orders["inflight"], "3");
  EXPECT_EQ(orders["acked"], "3");
  // auto-acked 1 + produce duplicates 1.
  EXPECT_EQ(orders["duplicates"], "2");
  EXPECT_NE(orders["oldest"], "none");
  EXPECT_NE(orders["oldest"], "–");
  EXPECT_EQ(orders["dlq"], "0");

  auto payments = row(dom, "payments", "ledger");
  ASSERT_FALSE(payments.empty()) << dom;
  EXPECT_EQ(payments["backlog"], "0");
  EXPECT_EQ(payments["inflight"], "0");
  EXPECT_EQ(payments["dlq"], "1 / 1");  // waiting / produced in dlq.payments
  // The DLQ topic is shown in its topic's row, not as a row of its own.
  EXPECT_EQ(dom.find("data-topic=\"dlq.payments\""), std::string::npos);

  // The key lookup the page ran from its URL.
  EXPECT_EQ(field(dom, "state"), "committed");
  EXPECT_EQ(field(dom, "owner"), "worker-1");
  EXPECT_NE(dom.find("\"charge_id\": \"" + charge + "\""), std::string::npos) << dom;
  // GET /v1/keys/history answered, or the page said it is not there.
  EXPECT_NE(field(dom, "history"), "<missing>");

  // The rate chart drew its lines.
  EXPECT_TRUE(
      std::regex_search(dom, std::regex(R"(<path d="M[^"]+" class="line" data-series="ack">)")))
      << dom;
}

TEST_F(ui, an_unknown_key_and_an_unknown_topic_read_plainly) {
  create_topic("orders");
  auto page = chrome().dump_dom(url("?topic=orders&group=billing&key=nope"), k_budget);
  ASSERT_TRUE(page.ok) << page.errors;
  EXPECT_EQ(field(page.output, "state"), "none");
  EXPECT_EQ(row(page.output, "orders", "").count("dlq"), 1u) << "a topic without groups has a row";

  page = chrome().dump_dom(url("#topic=missing&group=g&key=k"), k_budget);
  ASSERT_TRUE(page.ok) << page.errors;
  EXPECT_NE(field(page.output, "error").find("NOT_FOUND"), std::string::npos) << page.output;
}

// A workflow step's key shows the messages its ack produced, linked to
// their topic.
TEST_F(ui, a_steps_key_lists_its_next_steps) {
  create_topic("orders", 1, {{"key_history", true}});
  create_topic("receipts");
  produce("orders", "o1", std::nullopt, json{{"idempotency_key", "order-1"}});
  auto got = consume("orders", "billing", "w", 1, 60'000);
  ASSERT_EQ(got.size(), 1u);
  auto res = client().post(
      "/v1/ack",
      delivery_body("orders", "billing", "w", got[0],
                    {{"produce", json::array({{{"topic", "receipts"}, {"value", "r"}}})}}));
  ASSERT_EQ(res.status, 200u) << res.body;
  auto page = chrome().dump_dom(url("#topic=orders&group=billing&key=order-1"), k_budget);
  ASSERT_TRUE(page.ok) << page.errors;
  const std::string& dom = page.output;
  EXPECT_EQ(field(dom, "state"), "committed");
  EXPECT_TRUE(std::regex_search(
      dom,
      std::regex(
          R"re(data-field="produced"[^>]*><li><a href="#topic=receipts">receipts</a> partition 0, offset 0</li>)re")))
      << dom;
}

// The replay dialog opened by a link runs the dry run and shows its counts.
TEST_F(ui, a_replay_link_shows_the_dry_run) {
  create_topic("jobs", 1, {{"replay_window_ms", 3'600'000}});
  const auto from = now_ms() - 1000;
  produce("jobs", "done", std::nullopt, json{{"idempotency_key", "j1"}});
  produce("jobs", "no-key");
  produce("jobs", "waiting");
  auto got = consume("jobs", "workers", "w", 2, 60'000);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& m : got) ASSERT_EQ(ack("jobs", "workers", "w", m).status, 204u);
  auto page = chrome().dump_dom(
      url("#replay_topic=jobs&replay_group=workers&replay_from_ms=" + std::to_string(from) +
          "&replay_to_ms=" + std::to_string(now_ms() + 60'000)),
      k_budget);
  ASSERT_TRUE(page.ok) << page.errors;
  const std::string& dom = page.output;
  EXPECT_EQ(field(dom, "replay-already_committed"), "1") << dom;
  EXPECT_EQ(field(dom, "replay-would_deliver"), "1") << dom;
  EXPECT_EQ(field(dom, "replay-pending"), "1") << dom;
  EXPECT_NE(field(dom, "replay-note").find("Apply delivers the 1"), std::string::npos) << dom;
  EXPECT_NE(row(dom, "jobs", "workers").count("replay"), 0u) << "the row's replay button";
  // A dry run: nothing became deliverable but the message never delivered.
  auto after = consume("jobs", "workers", "w", 10, 60'000);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].at("value"), "waiting");
}

TEST_F(ui, screenshot) {
  ASSERT_NO_FATAL_FAILURE(make_traffic());
  const char* keep = std::getenv("ONCEQ_UI_SCREENSHOT");
  const std::string path =
      keep != nullptr && *keep != '\0' ? std::string(keep) : server_->data_dir() + "/../ui.png";
  const std::string key = acked_values_.front().at("envelope").at("idempotency_key");
  // Traffic while the page runs, so that the chart has something to draw.
  std::atomic<bool> stop{false};
  std::thread traffic([&] {
    http_client c(port());
    for (int i = 0; !stop.load(); ++i) {
      produce(c, "orders", numbered("live-", i), numbered("c-", i));
      auto got = consume(c, "orders", "analytics", "dash", 5, 60'000);
      for (const auto& m : got) ack(c, "orders", "analytics", "dash", m);
      std::this_thread::sleep_for(5ms);
    }
  });
  auto shot = chrome().screenshot(url("#topic=orders&group=billing&key=" + url_encode(key)), path,
                                  1280, 900, std::chrono::milliseconds(8000));
  stop = true;
  traffic.join();
  ASSERT_TRUE(shot.ok) << shot.errors;
  std::ifstream png(path, std::ios::binary);
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  EXPECT_EQ(magic, std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(std::filesystem::file_size(path), 10'000u);
}

}  // namespace
}  // namespace onceq::itest
