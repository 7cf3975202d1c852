// GET /v1/healthz and onceq_storage_writable follow the store's health.

#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "router_test_support.hpp"

namespace onceq::http {
namespace {

using namespace test;

// The in-memory store with a health the test sets (any thread may read it,
// as the router does).
class flaky_store final : public storage::memory_store {
 public:
  storage::store_health health() const override {
    std::lock_guard lk(mu_);
    return health_;
  }
  void set(storage::store_health h) {
    std::lock_guard lk(mu_);
    health_ = std::move(h);
  }

 private:
  mutable std::mutex mu_;
  storage::store_health health_;
};

class RouterHealthTest : public ::testing::Test {
 protected:
  flaky_store store_;
  router_harness h_{test_options(), &store_};
};

TEST_F(RouterHealthTest, HealthzIsOkWhileTheStoreIsWritable) {
  auto res = h_.get("/v1/healthz");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(body_of(res), (json{{"status", "ok"}}));
  EXPECT_EQ(res.count(bhttp::field::retry_after), 0u);
}

TEST_F(RouterHealthTest, HealthzIs503WithTheReasonWhileTheStoreCannotWrite) {
  store_.set({false, "write failed: IO error: No space left on device"});
  auto res = h_.get("/v1/healthz");
  EXPECT_EQ(res.result_int(), 503);
  EXPECT_EQ(res[bhttp::field::content_type], "application/json");
  EXPECT_EQ(res[bhttp::field::retry_after], "1");
  EXPECT_FALSE(res["X-Request-Id"].empty());
  auto body = body_of(res);
  EXPECT_EQ(body["status"], "unavailable");
  EXPECT_NE(body["reason"].get<std::string>().find("No space left on device"), std::string::npos)
      << body;

  store_.set({});  // the fault cleared
  EXPECT_EQ(h_.get("/v1/healthz").result_int(), 200);
}

TEST_F(RouterHealthTest, MetricsShowWhetherTheStoreIsWritable) {
  auto ok = h_.get("/metrics");
  ASSERT_EQ(ok.result_int(), 200);
  EXPECT_NE(ok.body().find("# TYPE onceq_storage_writable gauge\n"), std::string::npos);
  EXPECT_NE(ok.body().find("\nonceq_storage_writable 1\n"), std::string::npos) << ok.body();

  store_.set({false, "wal sync failed"});
  auto down = h_.get("/metrics");
  ASSERT_EQ(down.result_int(), 200);  // metrics are a read: they keep working
  EXPECT_NE(down.body().find("\nonceq_storage_writable 0\n"), std::string::npos) << down.body();
}

// Two shards, a topic on each; shard 0's store fails its writes. Its topic
// answers 503, the other shard's topic goes on, and healthz names shard 0.
TEST(RouterShardFaultTest, AFaultInOneShardAnswers503ForItsTopicsOnly) {
  storage::memory_store shard0_store;
  router_harness h{test_options(), &shard0_store, 2};
  ASSERT_EQ(h.post("/v1/topics", {{"name", "a"}}).result_int(), 201);
  ASSERT_EQ(h.post("/v1/topics", {{"name", "b"}}).result_int(), 201);
  shard0_store.fail_writes(true);

  int failed = 0, produced = 0;
  for (const char* topic : {"a", "b"}) {
    auto res = h.post("/v1/produce", {{"topic", topic}, {"value", "v"}});
    if (res.result_int() == 503) ++failed;
    if (res.result_int() == 200) ++produced;
  }
  EXPECT_EQ(failed, 1);    // the topic on shard 0
  EXPECT_EQ(produced, 1);  // the topic on shard 1

  auto health = h.get("/v1/healthz");
  EXPECT_EQ(health.result_int(), 503);
  auto body = body_of(health);
  ASSERT_EQ(body["shards"].size(), 1u) << body;
  EXPECT_EQ(body["shards"][0]["shard"], 0) << body;
  EXPECT_NE(body["reason"].get<std::string>().find("shard 0: storage is not writable"),
            std::string::npos)
      << body;
  auto metrics = h.get("/metrics").body();
  EXPECT_NE(metrics.find("onceq_shard_writable{shard=\"0\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("onceq_shard_writable{shard=\"1\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace onceq::http
