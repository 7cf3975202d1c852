#pragma once

// The parameters of a request and the readers the codec (http/codec/)
// takes them apart with, one header a concept:
//
// - http/params/params.hpp: the parameters (the JSON body, or the query
//   string when the body is empty), read_params, percent-decoding, the
//   UTF-8 check, bad_input, and the padding a body needs to be parsed in
//   place;
// - http/params/reader.hpp: reader / field, one forward pass over a JSON
//   body (simdjson on-demand, no DOM) or over the query string, and what a
//   JSON body must be;
// - http/params/json_field.hpp: json_field, a dot path into a stored JSON
//   document (the broker's message inspector).
//
// The simdjson walks behind them (validation, duplicate keys, depth, the
// per-thread parser) are http/params/detail.hpp, private to http/params/.

#include "http/json_write.hpp"
#include "http/params/json_field.hpp"
#include "http/params/params.hpp"
#include "http/params/reader.hpp"
