// base/hash.hpp: the same bytes give the same hash, whatever buffer holds
// them; every byte of keys of every length up to 80 changes it; keys that
// differ in one byte, or only in length, spread over the buckets of a
// table; reads stay within the key (ASan checks it on exact-size heap
// copies).

#include "base/hash.hpp"

#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

namespace onceq {
namespace {

// The key in a heap block of exactly its size: a read past its end is a
// heap-buffer-overflow under ASan.
std::uint64_t hash_exact(const std::string& s) {
  auto copy = std::make_unique<char[]>(s.size() == 0 ? 1 : s.size());
  std::copy(s.begin(), s.end(), copy.get());
  return hash_bytes(std::string_view(copy.get(), s.size()));
}

TEST(hash, the_same_bytes_hash_the_same_wherever_they_are) {
  for (std::size_t n = 0; n <= 80; ++n) {
    std::string a(n, 'x');
    for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<char>('a' + (i * 7) % 26);
    const std::string padded = "##" + a + "##";
    EXPECT_EQ(hash_exact(a), hash_bytes(std::string_view(padded).substr(2, n))) << n;
    EXPECT_EQ(string_hash{}(a), string_hash{}(std::string_view(a))) << n;
  }
}

TEST(hash, every_byte_of_every_length_counts) {
  for (std::size_t n = 1; n <= 80; ++n) {
    const std::string base(n, '\0');
    const std::uint64_t h = hash_exact(base);
    for (std::size_t i = 0; i < n; ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string flipped = base;
        flipped[i] = static_cast<char>(1 << bit);
        EXPECT_NE(hash_exact(flipped), h) << "length " << n << " byte " << i << " bit " << bit;
      }
    }
  }
}

TEST(hash, zeros_of_different_lengths_differ) {
  std::set<std::uint64_t> seen;
  for (std::size_t n = 0; n <= 200; ++n) seen.insert(hash_exact(std::string(n, '\0')));
  EXPECT_EQ(seen.size(), 201u);
}

TEST(hash, similar_keys_spread_over_a_tables_buckets) {
  // 100k keys shaped like real idempotency keys ("order-<n>"): no two hash
  // the same, and in 1024 buckets (low bits, as a power-of-two table
  // indexes) the fullest holds less than twice the average.
  std::unordered_set<std::uint64_t> seen;
  std::vector<int> buckets(1024);
  constexpr int n = 100'000;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t h = hash_bytes("order-" + std::to_string(i));
    seen.insert(h);
    ++buckets[h & 1023];
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(n));
  int fullest = 0;
  for (int b : buckets) fullest = std::max(fullest, b);
  EXPECT_LT(fullest, 2 * n / 1024);
}

}  // namespace
}  // namespace onceq
