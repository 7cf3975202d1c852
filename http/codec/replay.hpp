#pragma once

// Replaying a range: POST /v1/replay in; the range's diff (each message's
// outcome for the group, the summary, `replayed`, the `next` cursor) out.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

// topic, group, from_ms/to_ms or partition with from_offset/to_offset,
// dry_run (default true), max_messages (1..1000, default 1000), cursor (a
// previous answer's next, "<partition>:<offset>"). The range's own rules
// (one form, from below to) are the broker's.
result<replay_cmd> parse_replay(const params& p);

// The outcome's name on the wire ("already_committed", "would_deliver", ...).
std::string_view to_string(replay_outcome o);

nlohmann::json to_json(const replay_reply& r);

}  // namespace onceq::http
