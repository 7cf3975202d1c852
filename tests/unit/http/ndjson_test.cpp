#include "http/ndjson.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace onceq::http {
namespace {

using json = nlohmann::json;

delivery sample() {
  delivery d;
  d.topic = "orders";
  d.partition = 3;
  d.offset = 42;
  d.attempts = 2;
  d.key = "k1";
  d.value = "hello";
  d.last_error = "lease_expired";
  d.envelope_json = R"({"idempotency_key":"job-1","headers":{"a":"b"}})";
  d.lease_expires_at_ms = 1700000030000;
  return d;
}

TEST(NdjsonTest, EveryFieldInOrder) {
  std::string line;
  append_delivery_line(line, sample());
  EXPECT_EQ(
      line,
      R"({"topic":"orders","partition":3,"offset":42,"attempts":2,"key":"k1","value":"hello",)"
      R"("last_error":"lease_expired","envelope":{"idempotency_key":"job-1","headers":{"a":"b"}},)"
      R"("lease_expires_at_ms":1700000030000,"fencing_token":0})"
      "\n");
}

TEST(NdjsonTest, AbsentKeyAndEnvelope) {
  delivery d = sample();
  d.key.reset();
  d.envelope_json.clear();
  d.last_error.clear();
  std::string line;
  append_delivery_line(line, d);
  json j = json::parse(line);
  EXPECT_EQ(j["key"], "");
  EXPECT_EQ(j["envelope"], json::object());
  EXPECT_EQ(j["last_error"], "");
  EXPECT_EQ(j.size(), 10u);
}

TEST(NdjsonTest, EscapesStrings) {
  delivery d = sample();
  d.value = "q\"b\\n\nt\tc\x01\x1f u\xC3\xA9";
  d.key = "{\"json\": [1]}";
  std::string line;
  append_delivery_line(line, d);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line
  json j = json::parse(line);
  EXPECT_EQ(j["value"], d.value);
  EXPECT_EQ(j["key"], *d.key);
}

TEST(NdjsonTest, JsonStringEscaper) {
  std::string out;
  append_json_string(out, std::string("a\0b", 3));
  EXPECT_EQ(out, R"("a\u0000b")");
  out.clear();
  append_json_string(out, "\b\f\r");
  EXPECT_EQ(out, R"("\b\f\r")");
}

TEST(NdjsonTest, DeadLetteredEnvelopeCarriesDlq) {
  delivery d = sample();
  d.topic = "dlq.orders";
  d.dlq = dlq_origin{"orders", 1, 7, 5, "boom", 1700000000000};
  std::string line;
  append_delivery_line(line, d);
  json env = json::parse(line)["envelope"];
  EXPECT_EQ(env["idempotency_key"], "job-1");
  EXPECT_EQ(env["dlq"], (json{{"original_topic", "orders"},
                              {"original_partition", 1},
                              {"original_offset", 7},
                              {"attempts", 5},
                              {"last_error", "boom"},
                              {"routed_at_ms", 1700000000000}}));
  d.envelope_json.clear();
  line.clear();
  append_delivery_line(line, d);
  EXPECT_EQ(json::parse(line)["envelope"].size(), 1u);
}

TEST(NdjsonTest, DeadLetteredEnvelopeKeepsTheProducersFieldOrder) {
  delivery d = sample();
  d.envelope_json = R"({"tenant_id":"t","idempotency_key":"k"})";
  d.dlq = dlq_origin{"orders", 1, 7, 5, "boom", 1};
  std::string line;
  append_delivery_line(line, d);
  EXPECT_NE(line.find(R"("envelope":{"tenant_id":"t","idempotency_key":"k","dlq":{)"),
            std::string::npos)
      << line;
  EXPECT_TRUE(json::accept(line));
}

TEST(NdjsonTest, BatchIsOneLinePerDelivery) {
  std::vector<delivery> ds = {sample(), sample(), sample()};
  ds[1].offset = 43;
  std::string out = encode_deliveries(ds);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3);
  EXPECT_TRUE(encode_deliveries({}).empty());
}

}  // namespace
}  // namespace onceq::http
