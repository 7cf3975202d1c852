#pragma once

// Request bodies the integration tests build again and again.

#include <string_view>

#include <nlohmann/json.hpp>

namespace onceq::itest {

// The body of a consume of up to max_messages by owner, with extra's fields
// (wait_ms, lease_ms, ...) added.
inline nlohmann::json consume_body(std::string_view topic, std::string_view group,
                                   std::string_view owner, int max_messages,
                                   const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json body = {
      {"topic", topic}, {"group", group}, {"owner", owner}, {"max_messages", max_messages}};
  body.update(extra);
  return body;
}

// The body of an ack, nack or extend of a delivered message (its partition
// and offset) by owner, with extra's fields (reason, delay_ms, lease_ms,
// result, ...) added.
inline nlohmann::json delivery_body(std::string_view topic, std::string_view group,
                                    std::string_view owner, const nlohmann::json& message,
                                    const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json body = {{"topic", topic},
                         {"group", group},
                         {"owner", owner},
                         {"partition", message.at("partition")},
                         {"offset", message.at("offset")}};
  body.update(extra);
  return body;
}

}  // namespace onceq::itest
