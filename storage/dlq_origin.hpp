#pragma once

#include <cstdint>
#include <string>

#include "base/clock.hpp"

namespace onceq::storage {

// Where a dead-lettered message came from: stored with the message
// (message_record::dlq) and answered as it is (envelope.dlq on the wire,
// consume's and replay's dlq field). One struct for both: the disk record
// and the API name the same six facts.
struct dlq_origin {
  std::string original_topic;
  std::uint32_t original_partition = 0;
  std::uint64_t original_offset = 0;
  std::int64_t attempts = 0;
  std::string last_error;
  millis routed_at_ms = 0;
};

}  // namespace onceq::storage
