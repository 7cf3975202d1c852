#pragma once

// GET and POST /v1/consume: the request in (query or body). The
// deliveries go out as NDJSON (http/ndjson.hpp); the acks a consume
// carried are answered by consumed_acks_line (http/codec/ack.hpp).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

struct consume_request {
  consume_cmd cmd;
  bool stream = false;  // no max_messages: a stream until the client leaves
  millis wait_ms = 0;
  // The previous batch's acks, carried on this consume (docs/API.md, "Acks
  // carried on the next consume"); only with max_messages, in a body.
  std::optional<std::vector<ack_item>> acks;
};
result<consume_request> parse_consume(const params& p);

}  // namespace onceq::http
