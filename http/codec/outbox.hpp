#pragma once

// POST /v1/internal/outbox_append: how a cluster's node hands a source
// shard's outbox entries to the node that leads their target shard
// (shard/outbox_relay.hpp), and that node's answer.

#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params.hpp"

namespace onceq::http {

// {"source":N,"entries":[{"seq":S,"created_at_ms":T,"topic":..,"key":..,"value":..,
//  "envelope":{...}}]}: each message as a produce body (its envelope as sent).
std::string outbox_append_json(const outbox_append_cmd& cmd);
result<outbox_append_cmd> parse_outbox_append(const params& p);

// {"results":[{"seq","code","message","stored","duplicate","partition","offset"}]},
// code the errc's number (0: ok).
std::string outbox_appended_json(const std::vector<outbox_appended>& results);
result<std::vector<outbox_appended>> parse_outbox_appended(std::string_view body);

}  // namespace onceq::http
