#pragma once

#include "broker/commands.hpp"

namespace onceq::http {

// The broker's message_inspector: dot paths into JSON with json_field
// (http/params/json_field.hpp), SHA-256 with OpenSSL. Stateless; any thread.
const message_inspector& json_inspector();

}  // namespace onceq::http
