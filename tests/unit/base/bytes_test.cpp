// base/bytes.hpp: the exact bytes of every encoding (they are persisted in
// the disk records and the replicated log, so they must never change) and
// reading them back.
#include "base/bytes.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace onceq {
namespace {

std::string bytes(std::initializer_list<int> bs) {
  std::string s;
  for (int b : bs) s.push_back(static_cast<char>(b));
  return s;
}

std::string varint_of(std::uint64_t v) {
  byte_writer w;
  w.varint(v);
  return w.take();
}

std::string svarint_of(std::int64_t v) {
  byte_writer w;
  w.svarint(v);
  return w.take();
}

TEST(bytes, varint_exact_bytes_at_the_length_boundaries) {
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(varint_of(0), bytes({0x00}));
  EXPECT_EQ(varint_of(1), bytes({0x01}));
  EXPECT_EQ(varint_of(127), bytes({0x7f}));
  EXPECT_EQ(varint_of(128), bytes({0x80, 0x01}));
  EXPECT_EQ(varint_of(300), bytes({0xac, 0x02}));
  EXPECT_EQ(varint_of(16383), bytes({0xff, 0x7f}));
  EXPECT_EQ(varint_of(16384), bytes({0x80, 0x80, 0x01}));
  EXPECT_EQ(varint_of(0xffffffffull), bytes({0xff, 0xff, 0xff, 0xff, 0x0f}));
  EXPECT_EQ(varint_of(0x100000000ull), bytes({0x80, 0x80, 0x80, 0x80, 0x10}));
  EXPECT_EQ(varint_of(1ull << 63),
            bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}));
  EXPECT_EQ(varint_of(max), bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
}

TEST(bytes, varint_length_and_round_trip_around_every_7_bit_boundary) {
  std::vector<std::uint64_t> values = {0, std::numeric_limits<std::uint64_t>::max()};
  for (int k = 1; k <= 9; ++k) {
    const std::uint64_t b = 1ull << (7 * k);
    values.insert(values.end(), {b - 2, b - 1, b, b + 1});
  }
  for (std::uint64_t v : values) {
    const std::string s = varint_of(v);
    std::size_t len = 1;
    for (std::uint64_t x = v; x >= 0x80; x >>= 7) ++len;
    ASSERT_EQ(s.size(), len) << v;
    // Little-endian groups of 7 bits, the continuation bit on all but the last.
    std::uint64_t x = v;
    for (std::size_t i = 0; i < s.size(); ++i, x >>= 7) {
      const auto want = static_cast<std::uint8_t>((x & 0x7f) | (i + 1 < s.size() ? 0x80 : 0));
      ASSERT_EQ(static_cast<std::uint8_t>(s[i]), want) << v << " byte " << i;
    }
    byte_reader r(s);
    std::uint64_t back = 0;
    ASSERT_TRUE(r.varint(back));
    EXPECT_EQ(back, v);
    EXPECT_TRUE(r.at_end());
  }
}

TEST(bytes, svarint_is_zigzag) {
  constexpr auto min = std::numeric_limits<std::int64_t>::min();
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(svarint_of(0), bytes({0x00}));
  EXPECT_EQ(svarint_of(-1), bytes({0x01}));
  EXPECT_EQ(svarint_of(1), bytes({0x02}));
  EXPECT_EQ(svarint_of(-64), bytes({0x7f}));
  EXPECT_EQ(svarint_of(64), bytes({0x80, 0x01}));
  EXPECT_EQ(svarint_of(max), bytes({0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  EXPECT_EQ(svarint_of(min), bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  for (std::int64_t v : {min, min + 1, std::int64_t{-1700000000000}, std::int64_t{-1},
                         std::int64_t{0}, std::int64_t{1700000000000}, max}) {
    const std::string encoded = svarint_of(v);  // the reader views it
    byte_reader r(encoded);
    std::int64_t back = 0;
    ASSERT_TRUE(r.svarint(back));
    EXPECT_EQ(back, v);
  }
}

TEST(bytes, fixed64_is_little_endian) {
  byte_writer w;
  w.fixed64(0x0102030405060708ull);
  w.fixed64(0);
  w.fixed64(std::numeric_limits<std::uint64_t>::max());
  const std::string s = w.take();
  EXPECT_EQ(s, bytes({0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}) + std::string(8, '\0') +
                   std::string(8, '\xff'));
  byte_reader r(s);
  std::uint64_t a = 0, b = 1, c = 0;
  ASSERT_TRUE(r.fixed64(a) && r.fixed64(b) && r.fixed64(c));
  EXPECT_EQ(a, 0x0102030405060708ull);
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(c, std::numeric_limits<std::uint64_t>::max());
  EXPECT_TRUE(r.at_end());
}

TEST(bytes, strings_are_length_prefixed_and_fields_concatenate) {
  byte_writer w;
  w.byte(3);
  w.str("");
  w.str("ab");
  w.str(std::string(128, 'x'));
  w.svarint(-1);
  w.varint(16384);
  const std::string s = w.take();
  EXPECT_EQ(s, bytes({0x03, 0x00, 0x02, 'a', 'b', 0x80, 0x01}) + std::string(128, 'x') +
                   bytes({0x01, 0x80, 0x80, 0x01}));
  byte_reader r(s);
  std::uint8_t b = 0;
  std::string e, ab, xs;
  std::int64_t m = 0;
  std::uint64_t v = 0;
  ASSERT_TRUE(r.byte(b) && r.str(e) && r.str(ab) && r.str(xs) && r.svarint(m) && r.varint(v));
  EXPECT_EQ(b, 3);
  EXPECT_EQ(e, "");
  EXPECT_EQ(ab, "ab");
  EXPECT_EQ(xs, std::string(128, 'x'));
  EXPECT_EQ(m, -1);
  EXPECT_EQ(v, 16384u);
  EXPECT_TRUE(r.at_end());
}

TEST(bytes, a_writer_is_reusable_after_take_and_after_a_move) {
  byte_writer w;
  w.str("first");
  EXPECT_EQ(w.take(), bytes({0x05, 'f', 'i', 'r', 's', 't'}));
  w.varint(300);
  EXPECT_EQ(w.take(), bytes({0xac, 0x02}));
  EXPECT_EQ(w.take(), "");

  w.str(std::string(40, 'a'));  // past the short-string buffer
  byte_writer moved(std::move(w));
  moved.byte(7);
  EXPECT_EQ(moved.take(), bytes({40}) + std::string(40, 'a') + bytes({7}));
  w.byte(1);  // NOLINT(bugprone-use-after-move): a moved-from writer starts empty
  EXPECT_EQ(w.take(), bytes({1}));

  byte_writer a, b;
  a.varint(1);
  b.str(std::string(100, 'b'));
  a = std::move(b);
  a.byte(2);
  EXPECT_EQ(a.take(), bytes({100}) + std::string(100, 'b') + bytes({2}));
  b.byte(3);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.take(), bytes({3}));

  byte_writer c;
  c.str("x");
  byte_writer d(c);  // a copy goes on independently
  d.byte(9);
  EXPECT_EQ(c.take(), bytes({1, 'x'}));
  EXPECT_EQ(d.take(), bytes({1, 'x', 9}));
}

}  // namespace
}  // namespace onceq
