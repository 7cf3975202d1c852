#include "http/rfc3339.hpp"

#include <cstdint>

namespace onceq::http {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Reads exactly n digits at s[pos..); false if any is not a digit.
bool read_digits(std::string_view s, std::size_t pos, std::size_t n, int& out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    char c = s[pos + i];
    if (!is_digit(c)) return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

bool is_leap(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int days_in_month(int y, int m) {
  static constexpr int k_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : k_days[m - 1];
}

error bad(std::string_view why) {
  return make_error(errc::invalid_argument, "not an RFC 3339 timestamp (" + std::string(why) + ")");
}

}  // namespace

// Howard Hinnant's days_from_civil.
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

result<millis> parse_rfc3339(std::string_view s) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  // "YYYY-MM-DDTHH:MM:SS" is 19 characters.
  if (s.size() < 20) return bad("too short");
  if (!read_digits(s, 0, 4, year) || s[4] != '-' || !read_digits(s, 5, 2, month) || s[7] != '-' ||
      !read_digits(s, 8, 2, day)) {
    return bad("the date must be YYYY-MM-DD");
  }
  if (s[10] != 'T' && s[10] != 't') return bad("expected 'T' between date and time");
  if (!read_digits(s, 11, 2, hour) || s[13] != ':' || !read_digits(s, 14, 2, minute) ||
      s[16] != ':' || !read_digits(s, 17, 2, second)) {
    return bad("the time must be HH:MM:SS");
  }
  if (month < 1 || month > 12) return bad("month out of range");
  if (day < 1 || day > days_in_month(year, month)) return bad("day out of range");
  if (hour > 23) return bad("hour out of range");
  if (minute > 59) return bad("minute out of range");
  if (second > 59) return bad("second out of range");

  std::size_t pos = 19;
  int frac_ms = 0;
  if (s[pos] == '.') {
    ++pos;
    std::size_t start = pos;
    int scale = 100;
    while (pos < s.size() && is_digit(s[pos])) {
      frac_ms += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return bad("empty fraction of a second");
  }
  if (pos >= s.size()) return bad("missing time zone (Z or +hh:mm)");

  int offset_min = 0;
  char z = s[pos];
  if (z == 'Z' || z == 'z') {
    ++pos;
  } else if (z == '+' || z == '-') {
    int oh = 0, om = 0;
    if (!read_digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !read_digits(s, pos + 4, 2, om)) {
      return bad("the offset must be +hh:mm or -hh:mm");
    }
    if (oh > 23 || om > 59) return bad("offset out of range");
    offset_min = (oh * 60 + om) * (z == '-' ? -1 : 1);
    pos += 6;
  } else {
    return bad("missing time zone (Z or +hh:mm)");
  }
  if (pos != s.size()) return bad("trailing characters");

  std::int64_t days =
      days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  std::int64_t secs = days * 86'400 + hour * 3'600 + minute * 60 + second -
                      static_cast<std::int64_t>(offset_min) * 60;
  return millis{secs * 1'000 + frac_ms};
}

}  // namespace onceq::http
