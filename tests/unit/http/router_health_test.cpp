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

}  // namespace
}  // namespace onceq::http
