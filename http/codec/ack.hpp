#pragma once

// Finishing a delivery: POST /v1/ack (single and batch forms), /v1/nack and
// /v1/extend in; the batch ack's outcomes out, also as the first line of a
// consume that carried acks.

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

// POST /v1/ack: the single form, or the batch form ("acks").
using ack_request = std::variant<ack_cmd, ack_batch_cmd>;
result<ack_request> parse_ack(const params& p);
result<nack_cmd> parse_nack(const params& p);
result<extend_cmd> parse_extend(const params& p);

// Hot replies, written straight into text (same bytes as a dump() of the
// equivalent nlohmann object: keys in alphabetical order).
// POST /v1/ack, batch form: {"results":[{"error"?,"offset","partition","status"},...]}.
std::string ack_outcomes_json(const std::vector<ack_outcome>& outcomes);
// The first line of a consume that carried acks: {"acks":[...]} (the same
// items as ack_outcomes_json's), then '\n'.
// A single ack that produced: {"produced":[...],"status":"acked"}.
std::string ack_produced_json(const ack_outcome& o);
std::string consumed_acks_line(const std::vector<ack_outcome>& outcomes);

}  // namespace onceq::http
