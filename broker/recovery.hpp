#pragma once

#include "base/result.hpp"
#include "broker/core.hpp"

namespace onceq {

// Rebuilds every module's in-memory state from the store: topics, partition
// ranges, groups and cursors, open deliveries with their leases, attempts
// and held keys, and the timers. c's modules must be empty (core::reset).
result<void> recover(core& c);

}  // namespace onceq
