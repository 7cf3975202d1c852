#include "http/rfc3339.hpp"

#include <gtest/gtest.h>

namespace onceq::http {
namespace {

TEST(Rfc3339Test, ParsesUtc) {
  auto r = parse_rfc3339("2025-01-02T03:04:05Z");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(*r, 1735787045000);
}

TEST(Rfc3339Test, Epoch) {
  auto r = parse_rfc3339("1970-01-01T00:00:00Z");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0);
}

TEST(Rfc3339Test, FractionalSecondsAreMilliseconds) {
  EXPECT_EQ(*parse_rfc3339("2025-01-02T03:04:05.5Z"), 1735787045500);
  EXPECT_EQ(*parse_rfc3339("2025-01-02T03:04:05.123Z"), 1735787045123);
  EXPECT_EQ(*parse_rfc3339("2025-01-02T03:04:05.123999999Z"), 1735787045123);  // truncated
}

TEST(Rfc3339Test, Offsets) {
  // 03:04:05+02:00 is 01:04:05Z.
  EXPECT_EQ(*parse_rfc3339("2025-01-02T03:04:05+02:00"), 1735787045000 - 2 * 3600 * 1000);
  EXPECT_EQ(*parse_rfc3339("2025-01-02T03:04:05-05:30"),
            1735787045000 + (5 * 3600 + 30 * 60) * 1000);
  EXPECT_EQ(*parse_rfc3339("2025-01-02T03:04:05+00:00"), 1735787045000);
}

TEST(Rfc3339Test, LowercaseSeparators) {
  EXPECT_EQ(*parse_rfc3339("2025-01-02t03:04:05z"), 1735787045000);
}

TEST(Rfc3339Test, LeapDay) {
  EXPECT_TRUE(parse_rfc3339("2024-02-29T00:00:00Z").ok());
  EXPECT_TRUE(parse_rfc3339("2000-02-29T00:00:00Z").ok());
  EXPECT_FALSE(parse_rfc3339("2025-02-29T00:00:00Z").ok());
  EXPECT_FALSE(parse_rfc3339("1900-02-29T00:00:00Z").ok());
}

TEST(Rfc3339Test, RejectsMalformed) {
  for (const char* bad : {
           "",
           "2025-01-02",
           "2025-01-02T03:04:05",        // no zone
           "2025-01-02 03:04:05Z",       // space
           "2025-13-02T03:04:05Z",       // month
           "2025-00-02T03:04:05Z",       // month 0
           "2025-04-31T03:04:05Z",       // day
           "2025-01-02T24:00:00Z",       // hour
           "2025-01-02T03:60:05Z",       // minute
           "2025-01-02T03:04:60Z",       // second
           "2025-01-02T03:04:05.Z",      // empty fraction
           "2025-01-02T03:04:05+0200",   // offset without colon
           "2025-01-02T03:04:05+24:00",  // offset hour
           "2025-01-02T03:04:05Zjunk",   // trailing
           "25-01-02T03:04:05Z",         // two-digit year
           "2025-1-02T03:04:05Z",        // one-digit month
           "tomorrow",
       }) {
    EXPECT_FALSE(parse_rfc3339(bad).ok()) << bad;
  }
}

TEST(Rfc3339Test, ErrorIsInvalidArgument) {
  auto r = parse_rfc3339("nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::invalid_argument);
}

TEST(Rfc3339Test, DaysFromCivil) {
  EXPECT_EQ(days_from_civil(1970, 1, 1), 0);
  EXPECT_EQ(days_from_civil(2000, 3, 1), 11017);
  EXPECT_EQ(days_from_civil(1969, 12, 31), -1);
}

}  // namespace
}  // namespace onceq::http
