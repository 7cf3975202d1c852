#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace onceq::bench {

// One message as the workloads produce it: the same for every system.
// `seq` numbers the unique work items of a run (0..N-1); a duplicate reuses
// the seq (so the idempotency key) of an earlier message.
struct bench_message {
  std::string key;      // envelope.idempotency_key (the work identity)
  std::string msg_id;   // envelope.msg_id / Nats-Msg-Id
  std::string payload;  // exactly the payload size; ASCII, never needs escaping
  // onceq's message `key` (partition, ordering) when not empty; else `key`.
  std::string order_key;
};

// Fills `m` for work item `seq`, produced at `sent_ns` (steady clock).
// `dup_variant` 0 is the original; n > 0 gives the same key with msg id
// variant n (a producer that re-sends with a fresh message id).
void make_message(bench_message& m, std::uint64_t seq, std::uint64_t sent_ns,
                  std::size_t payload_size, unsigned dup_variant = 0);

std::string key_of(std::uint64_t seq);

// What a consumer reads back from a payload.
struct payload_header {
  std::uint64_t seq = 0;
  std::uint64_t sent_ns = 0;
};
std::optional<payload_header> parse_payload(std::string_view payload);

std::uint64_t steady_now_ns();

}  // namespace onceq::bench
