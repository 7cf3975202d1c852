#pragma once

// The dead-letter queue: POST /v1/dlq/redrive in; a dead letter's origin
// (envelope.dlq) out.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

result<redrive_cmd> parse_redrive(const params& p);

nlohmann::json to_json(const dlq_origin& d);

}  // namespace onceq::http
