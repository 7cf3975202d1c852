#pragma once

#include <memory>

#include "bench/driver.hpp"

namespace onceq::bench {

// Drives Redis Streams (hiredis) against a redis-server the driver starts
// on loopback with AOF on (appendfsync always or everysec) and RDB off.
// Produce is XADD (pipelined for a batch, one round trip per message
// otherwise); consumers use XREADGROUP COUNT/BLOCK in one group and XACK
// each batch in one command. Unacked entries are taken over with
// XAUTOCLAIM once they have been idle for the run's lease time.
std::unique_ptr<system_driver> make_redis_driver(const bench_options& o);

}  // namespace onceq::bench
