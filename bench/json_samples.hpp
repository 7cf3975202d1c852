#pragma once

// The request bodies the JSON measurements read: onceq-json-compare and
// the codec's speed test (tests/unit/http/codec_speed_test.cpp).

#include <string>

#include <fmt/format.h>

namespace onceq::bench {

constexpr int k_sample_messages = 100;

// A realistic batched produce: 256-byte values, envelopes with
// idempotency_key and msg_id.
inline std::string sample_produce_body() {
  std::string body = R"({"topic":"bench","messages":[)";
  for (int i = 0; i < k_sample_messages; ++i) {
    if (i > 0) body += ',';
    std::string value(256, 'v');
    for (std::size_t k = 0; k < value.size(); k += 7) value[k] = static_cast<char>('a' + k % 26);
    body += fmt::format(
        R"({{"key":"key-{}","value":"{}","envelope":{{"idempotency_key":"order-{:08}","msg_id":"m-7f3a9c-{}"}}}})",
        i % 16, value, i, i);
  }
  return body + "]}";
}

// A batched ack of k_sample_messages deliveries over four partitions.
inline std::string sample_ack_body() {
  std::string body = R"({"topic":"bench","group":"workers","owner":"w-1","acks":[)";
  for (int i = 0; i < k_sample_messages; ++i) {
    if (i > 0) body += ',';
    body += fmt::format(R"({{"partition":{},"offset":{},"attempts":1}})", i % 4, 1'000'000 + i);
  }
  return body + "]}";
}

}  // namespace onceq::bench
