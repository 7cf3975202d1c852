// Workflow steps over HTTP (docs/API.md, "Workflow steps (ext)"): an ack
// that produces the next messages, into a topic of its own shard (one
// command) and of another shard (its outbox); every refusal stores
// nothing; a retried ack stores nothing twice; a target shard whose disk is
// full leaves the message pending until it heals.

#include <filesystem>
#include <thread>

#include "test_support.hpp"
#include "tmpfs_mount.hpp"

namespace onceq::itest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

server_process::options two_shards(std::string data_dir = {}) {
  server_process::options o;
  o.extra_args = {"--shards", "2"};
  o.data_dir = std::move(data_dir);
  return o;
}

json step(const std::string& topic, const std::string& value, json envelope = nullptr) {
  json m = {{"topic", topic}, {"value", value}};
  if (!envelope.is_null()) m["envelope"] = std::move(envelope);
  return m;
}

// Messages stored in topic since the server started (its metric).
std::uint64_t produced_in(http_client& c, const std::string& topic) {
  return static_cast<std::uint64_t>(metric(c, "onceq_produced_total{topic=\"" + topic + "\"}"));
}

class steps : public onceq_test {
 protected:
  void SetUp() override { start_server(two_shards()); }

  // orders and charges on shard 0, receipts on shard 1 (the fewest topics
  // at creation, lowest id on a tie).
  void three_topics(json charges_settings = json::object()) {
    create_topic("orders");
    create_topic("receipts");
    create_topic("charges", 1, std::move(charges_settings));
    ASSERT_EQ(metric(client(), "onceq_shard_topics{shard=\"0\"}"), 2);
  }

  // One order, leased to "w".
  json leased_order(const std::string& idem = "order-1") {
    produce("orders", "o1", std::nullopt, json{{"idempotency_key", idem}});
    auto got = consume("orders", "g", "w", 1);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? json() : got[0];
  }

  http_response ack_with(const json& msg, json produce, const std::string& owner = "w") {
    return client().post(
        "/v1/ack", delivery_body("orders", "g", owner, msg,
                                 {{"result", {{"ok", true}}}, {"produce", std::move(produce)}}));
  }

  std::uint64_t produced(const std::string& topic) { return produced_in(client(), topic); }
};

TEST_F(steps, an_ack_produces_into_its_own_and_another_shard_once) {
  three_topics();
  auto msg = leased_order();
  auto res = ack_with(msg, json::array({step("charges", "c1"), step("receipts", "r1")}));
  ASSERT_EQ(res.status, 200u) << res.body;
  auto body = res.json();
  EXPECT_EQ(body["status"], "acked");
  ASSERT_EQ(body["produced"].size(), 2u) << res.body;
  EXPECT_EQ(body["produced"][0]["topic"], "charges");
  EXPECT_EQ(body["produced"][0]["status"], "stored");
  EXPECT_EQ(body["produced"][0]["offset"], 0);
  EXPECT_EQ(body["produced"][1]["topic"], "receipts");
  EXPECT_EQ(body["produced"][1]["status"], "stored") << res.body;
  EXPECT_EQ(body["produced"][1]["offset"], 0);

  // The ack lost its answer and is sent again: the same list, nothing new.
  auto again = ack_with(msg, json::array({step("charges", "c1"), step("receipts", "r1")}));
  ASSERT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(again.json()["produced"], body["produced"]);

  auto charges = consume("charges", "g", "w", 10);
  ASSERT_EQ(charges.size(), 1u);
  EXPECT_EQ(charges[0]["value"], "c1");
  auto receipts = consume("receipts", "g", "w", 10);
  ASSERT_EQ(receipts.size(), 1u);
  EXPECT_EQ(receipts[0]["value"], "r1");
  EXPECT_EQ(metric(client(), "onceq_shard_outbox_depth{shard=\"0\"}"), 0);

  // The key's history names the step's messages.
  auto h = client().get("/v1/keys/history?topic=orders&group=g&key=order-1");
  if (h.status == 200) {
    int made = 0;
    for (const auto& e : h.json()["events"])
      if (e["event"] == "produced") ++made;
    EXPECT_EQ(made, 2) << h.body;
  }
}

TEST_F(steps, every_refusal_stores_nothing) {
  three_topics({{"max_backlog_messages", 1}});
  produce("charges", "fills charges");
  auto msg = leased_order();
  const auto before_charges = produced("charges");
  const auto before_receipts = produced("receipts");
  // Another owner: the lease is not theirs.
  auto fenced = ack_with(msg, json::array({step("receipts", "r")}), "intruder");
  EXPECT_TRUE(is_error(fenced, 409, "FAILED_PRECONDITION")) << fenced.body;
  // An unknown topic.
  auto unknown = ack_with(msg, json::array({step("receipts", "r"), step("nope", "x")}));
  EXPECT_TRUE(is_error(unknown, 404, "NOT_FOUND")) << unknown.body;
  // A bad message, on either shard.
  auto bad = ack_with(msg, json::array({step("receipts", "")}));
  EXPECT_TRUE(is_error(bad, 400, "INVALID_ARGUMENT")) << bad.body;
  auto bad_env = ack_with(msg, json::array({step("receipts", "r", {{"delay_ms", -1}})}));
  EXPECT_TRUE(is_error(bad_env, 400, "INVALID_ARGUMENT")) << bad_env.body;
  auto no_topic = ack_with(msg, json::array({json{{"value", "x"}}}));
  EXPECT_TRUE(is_error(no_topic, 400, "INVALID_ARGUMENT")) << no_topic.body;
  // Over 1,000 messages.
  json many = json::array();
  for (int i = 0; i < 1001; ++i) many.push_back(step("receipts", "r"));
  auto big = ack_with(msg, many);
  EXPECT_TRUE(is_error(big, 400, "INVALID_ARGUMENT")) << big.body.substr(0, 200);
  // A full target, on the ack's own shard and on the other one.
  auto full = ack_with(msg, json::array({step("receipts", "r"), step("charges", "c")}));
  EXPECT_TRUE(is_error(full, 429, "RESOURCE_EXHAUSTED")) << full.body;
  EXPECT_EQ(produced("charges"), before_charges);
  EXPECT_EQ(produced("receipts"), before_receipts);
  EXPECT_EQ(metric(client(), "onceq_shard_outbox_depth{shard=\"0\"}"), 0);
  // The delivery is still the owner's: the key is not committed.
  auto k = client().get("/v1/keys?topic=orders&group=g&key=order-1");
  ASSERT_EQ(k.status, 200u) << k.body;
  EXPECT_EQ(k.json()["state"], "leased");
  // And the ack goes through once it is right.
  auto ok = ack_with(msg, json::array({step("receipts", "r")}));
  ASSERT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(produced("receipts"), before_receipts + 1);
}

TEST_F(steps, the_batch_form_answers_each_entry) {
  three_topics();
  produce("orders", "a");
  produce("orders", "b");
  auto got = consume("orders", "g", "w", 2);
  ASSERT_EQ(got.size(), 2u);
  json body = {{"topic", "orders"},
               {"group", "g"},
               {"owner", "w"},
               {"acks", json::array({{{"partition", 0},
                                      {"offset", got[0]["offset"]},
                                      {"produce", json::array({step("receipts", "ra")})}},
                                     {{"partition", 0}, {"offset", got[1]["offset"]}}})}};
  auto res = client().post("/v1/ack", body);
  ASSERT_EQ(res.status, 200u) << res.body;
  auto results = res.json()["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["status"], "acked");
  ASSERT_EQ(results[0]["produced"].size(), 1u) << res.body;
  EXPECT_EQ(results[0]["produced"][0]["status"], "stored");
  EXPECT_FALSE(results[1].contains("produced"));
  EXPECT_EQ(produced("receipts"), 1u);
}

// The target shard's disk fills: the ack still stands, its message is
// pending in the outbox, and it is stored once the disk has room again.
TEST(steps_disk, a_full_target_shard_leaves_the_message_pending_until_it_heals) {
  if (!tmpfs_mount::can_mount()) GTEST_SKIP() << "needs root to mount a small tmpfs";
  tmpfs_mount disk("40M");
  ASSERT_TRUE(disk.mounted()) << disk.error();
  const fs::path root = fs::temp_directory_path() / ("onceq-steps-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "data");
  fs::create_directories(fs::path(disk.path()) / "shard-1");
  // Shard 1's store on the small disk, shard 0's on the big one.
  fs::create_directory_symlink(fs::path(disk.path()) / "shard-1", root / "data" / "shard-1");
  {
    server_process server(two_shards((root / "data").string()));
    http_client c(server.port());
    ASSERT_EQ(c.post("/v1/topics", {{"name", "orders"}, {"key_history", true}}).status, 201u);
    ASSERT_EQ(c.post("/v1/topics", {{"name", "receipts"}}).status, 201u);
    ASSERT_EQ(metric(c, "onceq_shard_topics{shard=\"1\"}"), 1);
    // Fill shard 1 through its own topic until it refuses writes.
    const std::string filler(16384, 'x');
    unsigned last = 200;
    for (int i = 0; i < 20'000 && last == 200; ++i)
      last = c.post("/v1/produce", {{"topic", "receipts"}, {"value", filler}}).status;
    ASSERT_EQ(last, 503u);
    const auto before = produced_in(c, "receipts");

    ASSERT_EQ(c.post("/v1/produce", {{"topic", "orders"},
                                     {"value", "o1"},
                                     {"envelope", {{"idempotency_key", "order-1"}}}})
                  .status,
              200u);
    auto got = c.post("/v1/consume", consume_body("orders", "g", "w", 1, json::object()));
    ASSERT_EQ(got.status, 200u);
    auto msg = got.ndjson().at(0);
    auto res =
        c.post("/v1/ack", delivery_body("orders", "g", "w", msg,
                                        {{"produce", json::array({step("receipts", "r1")})}}));
    ASSERT_EQ(res.status, 200u) << res.body;
    EXPECT_EQ(res.json()["produced"][0]["status"], "pending") << res.body;
    EXPECT_EQ(metric(c, "onceq_shard_outbox_depth{shard=\"0\"}"), 1);
    // The oldest entry's age is shown while it waits (metric() is -1 when absent).
    std::this_thread::sleep_for(1100ms);
    EXPECT_GE(metric(c, "onceq_shard_outbox_age_seconds{shard=\"0\"}"), 1.0);
    // The key is committed: the ack stands.
    EXPECT_EQ(c.get("/v1/keys?topic=orders&group=g&key=order-1").json()["state"], "committed");

    ASSERT_TRUE(disk.resize("300M")) << std::strerror(errno);
    const auto grown = std::chrono::steady_clock::now();
    double depth = 1;
    while (std::chrono::steady_clock::now() - grown < 30s) {
      depth = metric(c, "onceq_shard_outbox_depth{shard=\"0\"}");
      if (depth == 0) break;
      std::this_thread::sleep_for(100ms);
    }
    ASSERT_EQ(depth, 0) << "the outbox did not drain within 30 s of the disk growing";
    EXPECT_EQ(metric(c, "onceq_shard_outbox_age_seconds{shard=\"0\"}"), 0);
    EXPECT_EQ(produced_in(c, "receipts"), before + 1);
    // The key's history now names where it went.
    auto h = c.get("/v1/keys/history?topic=orders&group=g&key=order-1");
    ASSERT_EQ(h.status, 200u) << h.body;
    const auto events = h.json()["events"];
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back()["event"], "produced") << h.body;
    EXPECT_EQ(events.back()["topic"], "receipts") << h.body;
    EXPECT_EQ(events.back()["offset"], before) << h.body;
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace onceq::itest
