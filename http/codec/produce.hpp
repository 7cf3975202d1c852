#pragma once

// POST /v1/produce: the body (one message, or "messages", each with its
// envelope) in; the produce reply out.

#include <string>
#include <string_view>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

struct produce_request {
  produce_cmd cmd;
  bool batch = false;  // the "messages" form: answered with "results"
};
// POST /v1/produce; idempotency_header is the Idempotency-Key header ("" if none).
result<produce_request> parse_produce(const params& p, std::string_view idempotency_header);

// A hot reply, written straight into text (same bytes as a dump() of the
// equivalent nlohmann object: keys in alphabetical order).
// POST /v1/produce: {"duplicate","offset","partition","status","topic"},
// or for a batch {"results":[{"duplicate","offset","partition"},...],
// "status","topic"}.
std::string produce_reply_json(const produce_reply& r, std::string_view topic, bool batch);

}  // namespace onceq::http
