// Measurements, disabled by default: run with
//   http_tests --gtest_also_run_disabled_tests --gtest_filter='CodecSpeed.*'
// They compare the request path (read_params + parse_* + the reply) with
// what it did on nlohmann::json: parse into the DOM, read the fields,
// re-serialize envelopes, build the reply as a DOM and dump it.

#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/json_samples.hpp"
#include "http/codec.hpp"

namespace onceq::http {
namespace {

using json = nlohmann::json;
constexpr int k_messages = bench::k_sample_messages;

// What parse_produce + to_json did on nlohmann::json, in the same steps.
std::size_t nlohmann_produce(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  std::size_t sink = 0;
  const json& msgs = j.at("messages");
  produce_reply reply;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    std::string where = fmt::format("messages[{}]", i);
    for (auto it = m.begin(); it != m.end(); ++it) sink += it.key().size();  // only()
    std::string key = m.at("key").get<std::string>();
    std::string value = m.at("value").get<std::string>();
    const json& env = m.at("envelope");
    std::string env_where = where + ".envelope";
    for (auto it = env.begin(); it != env.end(); ++it) sink += it.key().size();
    std::string idem = env.at("idempotency_key").get<std::string>();
    std::string msg_id = env.at("msg_id").get<std::string>();
    for (const char* f :
         {"tenant_id", "run_id", "step_id", "parent_step_id", "target_topic", "partition_override",
          "key_ttl_ms", "delay_ms", "deadline", "retry_policy", "headers"}) {
      sink += env.contains(f) ? 1 : 0;
    }
    std::string envelope_json = dump(env);
    sink += key.size() + value.size() + idem.size() + msg_id.size() + envelope_json.size();
    reply.results.push_back(produced{static_cast<std::uint32_t>(i % 4), 1'000'000 + i, false});
  }
  json results = json::array();
  for (const auto& p : reply.results) {
    results.push_back(
        {{"partition", p.partition}, {"offset", p.offset}, {"duplicate", p.duplicate}});
  }
  json out = {{"status", "produced"}, {"topic", "bench"}, {"results", std::move(results)}};
  return sink + dump(out).size();
}

std::size_t nlohmann_ack(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  std::size_t sink = j.at("topic").get<std::string>().size();
  const json& acks = j.at("acks");
  std::vector<ack_outcome> outcomes;
  for (std::size_t i = 0; i < acks.size(); ++i) {
    const json& a = acks[i];
    std::string where = fmt::format("acks[{}]", i);
    for (auto it = a.begin(); it != a.end(); ++it) sink += it.key().size();
    auto partition = a.at("partition").get<std::int64_t>();
    auto offset = a.at("offset").get<std::int64_t>();
    auto attempts = a.at("attempts").get<std::int64_t>();
    sink += a.contains("result") ? 1 : 0;
    sink += static_cast<std::size_t>(attempts) + where.size();
    outcomes.push_back(ack_outcome{static_cast<std::uint32_t>(partition),
                                   static_cast<std::uint64_t>(offset),
                                   errc::ok,
                                   "",
                                   {}});
  }
  json results = json::array();
  for (const auto& o : outcomes) {
    json item = {{"partition", o.partition}, {"offset", o.offset}};
    item["status"] = "acked";
    results.push_back(std::move(item));
  }
  return sink + dump(json{{"results", std::move(results)}}).size();
}

std::size_t new_produce(const std::string& body) {
  auto p = read_params(body, "");
  auto pr = parse_produce(*p, "");
  produce_reply reply;
  reply.results.reserve(pr->cmd.messages.size());
  for (std::size_t i = 0; i < pr->cmd.messages.size(); ++i) {
    reply.results.push_back(produced{static_cast<std::uint32_t>(i % 4), 1'000'000 + i, false});
  }
  return pr->cmd.messages.size() + produce_reply_json(reply, pr->cmd.topic, true).size();
}

std::size_t new_ack(const std::string& body) {
  auto p = read_params(body, "");
  auto a = parse_ack(*p);
  const auto& b = std::get<ack_batch_cmd>(*a);
  std::vector<ack_outcome> outcomes;
  outcomes.reserve(b.acks.size());
  for (const auto& item : b.acks)
    outcomes.push_back({item.partition, item.offset, errc::ok, "", {}});
  return b.acks.size() + ack_outcomes_json(outcomes).size();
}

// Nanoseconds per message of fn(body), best of a few rounds.
template <class Fn>
double ns_per_message(Fn fn, const std::string& body) {
  constexpr int k_rounds = 5;
  constexpr int k_iterations = 400;
  double best = 1e300;
  std::size_t sink = 0;
  for (int r = 0; r < k_rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < k_iterations; ++i) sink += fn(body);
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / (k_iterations * k_messages));
  }
  EXPECT_GT(sink, 0u);
  return best;
}

TEST(CodecSpeed, DISABLED_ParseSpeedProduceAndAck) {
  const std::string produce = bench::sample_produce_body();
  const std::string ack = bench::sample_ack_body();
  // Both paths read the same bodies the same way.
  ASSERT_TRUE(parse_produce(*read_params(produce, ""), "").ok());
  ASSERT_TRUE(parse_ack(*read_params(ack, "")).ok());

  const double old_produce = ns_per_message(nlohmann_produce, produce);
  const double fast_produce = ns_per_message(new_produce, produce);
  const double old_ack = ns_per_message(nlohmann_ack, ack);
  const double fast_ack = ns_per_message(new_ack, ack);
  std::printf(
      "produce (%zu-byte body, %d messages): nlohmann %.0f ns/msg, new %.0f ns/msg (x%.1f)\n",
      produce.size(), k_messages, old_produce, fast_produce, old_produce / fast_produce);
  std::printf(
      "ack     (%zu-byte body, %d acks):     nlohmann %.0f ns/msg, new %.0f ns/msg (x%.1f)\n",
      ack.size(), k_messages, old_ack, fast_ack, old_ack / fast_ack);
}

}  // namespace
}  // namespace onceq::http
