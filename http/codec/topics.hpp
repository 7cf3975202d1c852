#pragma once

// Topics (docs/API.md, "Topics"): POST /v1/topics in; the created topic, a
// topic's settings and GET /v1/topics/{name} out.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

// POST /v1/topics. Settings not given come from defaults.
result<create_topic_cmd> parse_create_topic(const params& p, const topic_settings& defaults);

nlohmann::json to_json(const topic_created& c);
nlohmann::json to_json(const topic_info& t);
nlohmann::json to_json(const topic_settings& s);

}  // namespace onceq::http
