#pragma once

// RFC 3339 timestamps (envelope.deadline) to Unix epoch milliseconds.

#include <string_view>

#include "base/clock.hpp"
#include "base/result.hpp"

namespace onceq::http {

// Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)" ('T' and 'Z' in
// either case). Fractions finer than a millisecond are truncated. Checks
// every field's range, including the days of the month and leap years.
// Errors: errc::invalid_argument saying what is wrong (the caller names
// the field).
result<millis> parse_rfc3339(std::string_view text);

// Days since 1970-01-01 of a proleptic Gregorian date (negative before).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept;

}  // namespace onceq::http
