#pragma once

// What every resource's codec (http/codec/) shares and callers use: the
// API's limits the codec checks, and dump().

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "broker/limits.hpp"

namespace onceq::http {

// The API's limits have one home, broker/limits.hpp; the codec rejects
// what is out of range before a command is built.
using onceq::k_max_batch;
using onceq::k_max_wait_ms;
inline constexpr std::size_t k_max_label_bytes = k_max_name_bytes;  // topic, group, owner

// Serializes compactly; invalid UTF-8 is replaced, never thrown.
std::string dump(const nlohmann::json& j);

}  // namespace onceq::http
