#pragma once

// A fast hash of byte strings for the broker's in-memory tables keyed by
// strings a client chose (idempotency keys, per consume and per ack).
// libstdc++'s std::hash (MurmurHash2, one byte-wise tail) took about 100
// instructions for a 30-byte key, several times per drained message; this
// one reads 8 bytes at a time (4 and 3 below 8) and mixes with a 64x64 ->
// 128-bit multiply, as wyhash does: about 25 for the same key.
//
// The seed is fixed, not drawn per process: replicas of a shard run the
// same commands and must reach the same state, so nothing here may differ
// between processes (no table's order is observable today, and this keeps
// it so if one ever is).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace onceq {

namespace hash_detail {

inline constexpr std::uint64_t k0 = 0xa0761d6478bd642full;
inline constexpr std::uint64_t k1 = 0xe7037ed1a0b428dbull;
inline constexpr std::uint64_t k2 = 0x8ebc6af09c88c6e3ull;

inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}
inline std::uint64_t r8(const char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint64_t r4(const char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// 1..3 bytes: the first, the middle and the last (they may coincide).
inline std::uint64_t r3(const char* p, std::size_t n) noexcept {
  return (static_cast<std::uint64_t>(static_cast<unsigned char>(p[0])) << 16) |
         (static_cast<std::uint64_t>(static_cast<unsigned char>(p[n >> 1])) << 8) |
         static_cast<unsigned char>(p[n - 1]);
}

}  // namespace hash_detail

inline std::uint64_t hash_bytes(std::string_view s) noexcept {
  using namespace hash_detail;
  const char* p = s.data();
  const std::size_t n = s.size();
  std::uint64_t seed = k0;
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  if (n <= 16) {
    if (n >= 4) {
      // Two overlapping reads of 4 from each end cover 4..16 bytes.
      const std::size_t off = (n >> 3) << 2;
      a = (r4(p) << 32) | r4(p + off);
      b = (r4(p + n - 4) << 32) | r4(p + n - 4 - off);
    } else if (n > 0) {
      a = r3(p, n);
    }
  } else {
    std::size_t i = n;
    while (i > 16) {
      seed = mix(r8(p) ^ k1, r8(p + 8) ^ seed);
      p += 16;
      i -= 16;
    }
    // The last 16 bytes (overlapping what the loop read, if it did).
    a = r8(p + i - 16);
    b = r8(p + i - 8);
  }
  return mix(k1 ^ n, mix(a ^ k1, b ^ seed ^ k2));
}

// For unordered containers keyed by std::string, with lookups by
// std::string_view (heterogeneous: pair it with std::equal_to<>).
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return static_cast<std::size_t>(hash_bytes(s));
  }
};

}  // namespace onceq
