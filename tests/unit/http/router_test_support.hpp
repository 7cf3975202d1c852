#pragma once

// A router over real shards (each a broker on an in-memory store, with its
// loop thread; one manual clock), called without sockets: handle() runs on
// a private io_context, so every command crosses to its shard's loop.

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "broker/broker.hpp"
#include "http/codec/inspector.hpp"
#include "http/router.hpp"
#include "shard/shard_set.hpp"
#include "storage/memory_store.hpp"

namespace onceq::http::test {

using json = nlohmann::json;
namespace asio = boost::asio;

inline http_options test_options() {
  http_options o;
  o.version = "9.9.9";
  o.commit = "abc123";
  o.stream_poll_ms = 50;
  return o;
}

class router_harness {
 public:
  // backing: the store under shard 0's broker, which must outlive the
  // harness; null: the harness's own in-memory store. shards: how many.
  explicit router_harness(http_options opts = test_options(), storage::store* backing = nullptr,
                          std::size_t shards = 1)
      : backing_(backing != nullptr ? *backing : store_) {
    std::vector<shard*> ptrs;
    for (std::uint32_t i = 0; i < shards; ++i) {
      storage::store* st = &backing_;
      if (i > 0) st = extra_stores_.emplace_back(std::make_unique<storage::memory_store>()).get();
      brokers_.push_back(std::make_unique<broker>(*st, clock_, &json_inspector()));
      EXPECT_TRUE(brokers_.back()->recover().ok());
      shards_.push_back(std::make_unique<shard>(i, *brokers_.back(), *st, clock_));
      ptrs.push_back(shards_.back().get());
    }
    set_ = std::make_unique<shard_set>(ptrs);
    EXPECT_TRUE(set_->load().ok());
    for (auto& s : shards_) s->start();
    router_ = std::make_unique<router>(*set_, clock_, opts);
  }
  ~router_harness() {
    for (auto& s : shards_) s->stop();
  }

  // The io_context the calls run on: the harness's own, restarted. Not one
  // per call: a shard's thread may still be inside its post() of the last
  // completion (signalling the context) when run() returns, and a context
  // destroyed then is a use after free (TSan: pthread_cond_destroy against
  // the post). This one outlives the shards' threads.
  asio::io_context& fresh_ioc() {
    ioc_.restart();
    return ioc_;
  }

  // Runs handle() to completion.
  reply call(request req) {
    asio::io_context& ioc = fresh_ioc();
    std::optional<reply> out;
    std::exception_ptr failure;
    asio::co_spawn(ioc, router_->handle(std::move(req)), [&](std::exception_ptr e, reply r) {
      failure = e;
      if (!e) out = std::move(r);
    });
    ioc.run();
    if (failure) std::rethrow_exception(failure);
    return std::move(*out);
  }

  response send(bhttp::verb method, std::string_view target, std::string body = {},
                const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    request req{method, target, 11};
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = std::move(body);
    req.prepare_payload();
    return call(std::move(req)).res;
  }
  response get(std::string_view target) { return send(bhttp::verb::get, target); }
  response post(std::string_view target, const json& body) {
    return send(bhttp::verb::post, target, body.dump());
  }

  // Pulls one chunk from a stream on a private io_context.
  result<std::string> next(consume_stream& s) {
    asio::io_context& ioc = fresh_ioc();
    std::optional<result<std::string>> out;
    std::exception_ptr failure;
    asio::co_spawn(
        ioc, [&]() -> asio::awaitable<void> { out.emplace(co_await s.next()); },
        [&](std::exception_ptr e) { failure = e; });
    ioc.run();
    if (failure) std::rethrow_exception(failure);
    return std::move(*out);
  }

  manual_clock& clock() { return clock_; }
  shard& core(std::size_t i = 0) { return *shards_.at(i); }
  shard_set& shards() { return *set_; }
  router& routes() { return *router_; }
  storage::memory_store& store() { return store_; }

 private:
  manual_clock clock_;
  storage::memory_store store_;
  storage::store& backing_;
  std::vector<std::unique_ptr<storage::memory_store>> extra_stores_;
  std::vector<std::unique_ptr<broker>> brokers_;
  std::vector<std::unique_ptr<shard>> shards_;
  std::unique_ptr<shard_set> set_;
  std::unique_ptr<router> router_;
  asio::io_context ioc_;  // fresh_ioc()
};

inline json body_of(const response& res) {
  return json::parse(res.body());
}

inline std::vector<json> lines_of(std::string_view text) {
  std::vector<json> out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    if (!line.empty()) out.push_back(json::parse(line));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// status, {"error":code,...}, application/json and X-Request-Id.
inline ::testing::AssertionResult is_error(const response& res, unsigned status,
                                           std::string_view code) {
  if (res.result_int() != status) {
    return ::testing::AssertionFailure() << "status " << res.result_int() << " body " << res.body();
  }
  if (res[bhttp::field::content_type] != "application/json") {
    return ::testing::AssertionFailure() << "content-type " << res[bhttp::field::content_type];
  }
  if (res["X-Request-Id"].empty()) return ::testing::AssertionFailure() << "no X-Request-Id";
  auto j = json::parse(res.body(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("error", "") != code ||
      !j.contains("message") || !j["message"].is_string()) {
    return ::testing::AssertionFailure() << "body " << res.body();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace onceq::http::test
