#pragma once

// The NDJSON encoding of deliveries (GET /v1/consume), the hot path: a
// hand-written JSON string escaper, no DOM per message.
//
// One line per delivery, every field present, in this order:
// {"topic","partition","offset","attempts","key","value","last_error",
//  "envelope","lease_expires_at_ms"}\n
// key is "" when absent; envelope is the producer's envelope object ({}
// when none) and, for dead-lettered messages, carries "dlq".

#include <string>
#include <string_view>
#include <vector>

#include "broker/commands.hpp"
#include "http/json_write.hpp"  // append_json_string

namespace onceq::http {

// Appends one line (ending in '\n').
void append_delivery_line(std::string& out, const delivery& d);

// All lines for a batch.
std::string encode_deliveries(const std::vector<delivery>& ds);

}  // namespace onceq::http
