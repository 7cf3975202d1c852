#pragma once

// The parameters of a request: its JSON body when the body is non-empty,
// else its query string (docs/API.md "Conventions"). Either way they end up
// as a JSON object (http/json.hpp); values from a query string are strings,
// and the codec reads numbers out of them (decimal).

#include <string>
#include <string_view>

#include "http/json.hpp"
#include "storage/base/result.hpp"

namespace onceq::http {

struct params {
  jdoc doc;                 // root() is an object
  bool from_query = false;  // values are strings from the query string

  const jvalue& obj() const noexcept { return doc.root(); }
};

// "a=1&b=x%20y" -> {"a":"1","b":"x y"}; '+' is a space. The document owns
// its text. Errors (errc::invalid_argument): a bad percent escape, a name
// given twice, a name or value that is not valid UTF-8.
result<jdoc> parse_query(std::string_view query);

// Decodes %XX escapes (and '+' as a space when plus_is_space).
result<std::string> percent_decode(std::string_view s, bool plus_is_space);

// Whether s is well-formed UTF-8.
bool valid_utf8(std::string_view s) noexcept;

// The body as a JSON object if it has anything but whitespace, else the
// query. The body is borrowed: it must outlive the params (the codec copies
// what it keeps). Errors: malformed JSON, a key twice in one object, a body
// that is not an object, nesting deeper than k_max_json_depth, a bad query
// string.
result<params> read_params(std::string_view body, std::string_view query);

}  // namespace onceq::http
