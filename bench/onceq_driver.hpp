#pragma once

#include <memory>

#include "bench/driver.hpp"

namespace onceq::bench {

// Drives onceqd over its HTTP API (docs/API.md) with one Beast keep-alive
// connection per producer / consumer thread. Batched produce is the batch
// produce form; every message carries envelope.idempotency_key and
// envelope.msg_id. Consume is the long-poll batch (max_messages, wait_ms);
// acks use the batch ack form with `attempts` as a fence.
std::unique_ptr<system_driver> make_onceq_driver(const bench_options& o);

}  // namespace onceq::bench
