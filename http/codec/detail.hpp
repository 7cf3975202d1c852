#pragma once

// Private to http/codec/: the field readers the resources' codecs share.
//
// The readers (http/params/reader.hpp) hand over the fields in the order
// they were written, once each; each is checked as it comes, and what is
// required is checked after the object. Errors are bad_input, which every
// public function turns into errc::invalid_argument (guarded).

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "http/codec/common.hpp"
#include "http/params.hpp"

namespace onceq::http::codec_detail {

using json = nlohmann::json;

inline constexpr std::int64_t k_int_max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t k_u32_max = std::numeric_limits<std::uint32_t>::max();

[[noreturn]] inline void fail(std::string message) {
  throw_bad_input(std::move(message));
}

template <class T, class Fn>
result<T> guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const bad_input& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

[[noreturn]] void required(const reader& r, std::string_view name);

// A field the other form of a request has ("key" in a batch produce).
[[noreturn]] void unknown(const reader& r, std::string_view name);

std::string topic_of(field& f);

// group, owner: 1..200 bytes.
std::string label_of(field& f);

// A fencing token: an integer >= 1.
std::uint64_t token_of(field& f);

// The items of a batch ack's "acks" (also carried on a consume): 1..1000
// objects of partition, offset and the optional fences and result
// (http/codec/ack.cpp).
// with_produce: an item may carry "produce" (POST /v1/ack; not the acks
// carried on a consume, which the ack route's checks do not see).
std::vector<ack_item> ack_items_of(field& f, bool with_produce);
// One field of a message (produce, an ack's produce list): 0 key, 1 value,
// 2 envelope.
void read_message_field(std::size_t i, field& f, message_in& m);

}  // namespace onceq::http::codec_detail
