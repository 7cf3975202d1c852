#pragma once

#include <memory>

#include "bench/driver.hpp"

namespace onceq::bench {

// Drives NATS JetStream (libnats) against a nats-server the driver starts
// with -js and a fresh store dir: a WorkQueue stream on file storage, one
// durable pull consumer shared by the consumer threads, explicit acks, and
// a Nats-Msg-Id on every publish. Batched produce is async publish followed
// by waiting for every pub ack; one message is a sync publish. Consumers
// ack each message (fire-and-forget "+ACK") and then flush, a round trip
// that returns once the server has read the acks.
std::unique_ptr<system_driver> make_nats_driver(const bench_options& o);

}  // namespace onceq::bench
