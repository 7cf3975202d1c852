#pragma once

#include <string>
#include <string_view>

#include "base/result.hpp"
#include "http/params/params.hpp"

namespace onceq::http {

// A field of a JSON document by dot path ("a.b.c"), for the broker's
// message_inspector: strings decoded, numbers as written, booleans as
// "true" / "false". Errors: invalid_argument when doc is not JSON (or has a
// key twice, or nests deeper than k_max_json_depth) or the path names an
// object or array; not_found when it names nothing or null.
result<std::string> json_field(std::string_view doc, std::string_view dot_path);

}  // namespace onceq::http
