#pragma once

// The Beast message types every part of http/ speaks.

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace onceq::http {

namespace bhttp = boost::beast::http;

using request = bhttp::request<bhttp::string_body>;
using response = bhttp::response<bhttp::string_body>;

inline constexpr std::string_view k_json_type = "application/json";
inline constexpr std::string_view k_ndjson_type = "application/x-ndjson";
inline constexpr std::string_view k_request_id_header = "X-Request-Id";

}  // namespace onceq::http
