#pragma once

// Idempotency keys: GET /v1/keys and GET /v1/keys/history in; a key's state
// and its history out.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

struct key_request {
  key_query q;
  millis wait_ms = 0;
};
result<key_request> parse_key_query(const params& p);
// GET /v1/keys/history: topic, group, key, tenant_id (no wait_ms).
result<key_query> parse_key_history_query(const params& p);

nlohmann::json to_json(const key_info& k);
// GET /v1/keys/history: {"events":[{"event","at_ms",...},...]}.
nlohmann::json to_json(const key_history& h);

}  // namespace onceq::http
