#pragma once

// The binary encoding of onceq's values: little-endian fixed64, LEB128
// varints, zig-zag signed varints, length-prefixed strings. Used by the
// disk records (storage/schema.cpp) and the replicated log's entries
// (broker/log_entry.cpp), so that both read and write one way.
//
// byte_reader never reads past its input: a short or malformed input makes
// every later read fail, and ok() says so.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace onceq {

class byte_writer {
 public:
  byte_writer() = default;
  byte_writer(const byte_writer&) = default;
  byte_writer& operator=(const byte_writer&) = default;
  // A moved-from writer is empty and usable (len_ must not outlive out_).
  byte_writer(byte_writer&& o) noexcept : out_(std::move(o.out_)), len_(std::exchange(o.len_, 0)) {
    o.out_.clear();
  }
  byte_writer& operator=(byte_writer&& o) noexcept {
    if (this != &o) {
      out_ = std::move(o.out_);
      len_ = std::exchange(o.len_, 0);
      o.out_.clear();
    }
    return *this;
  }
  ~byte_writer() = default;

  // Writes go straight into out_'s bytes past len_ (out_.size() is the room
  // made so far, len_ what is written): a varint is a few stores, not a
  // push_back per byte, whose capacity check and length update cost more
  // than the byte (docs/BENCHMARKS.md, ninth round).
  void fixed64(std::uint64_t v) {
    char* p = room(8);
    for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (i * 8)) & 0xff);
    len_ += 8;
  }
  void varint(std::uint64_t v) {
    char* const start = room(k_max_varint);
    char* p = start;
    while (v >= 0x80) {
      *p++ = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    len_ += static_cast<std::size_t>(p - start);
  }
  // Signed values zig-zag encoded (-1 is the common "unset").
  void svarint(std::int64_t v) {
    varint((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
  }
  void str(std::string_view s) {
    varint(s.size());
    if (s.empty()) return;
    std::memcpy(room(s.size()), s.data(), s.size());
    len_ += s.size();
  }
  void byte(std::uint8_t b) {
    *room(1) = static_cast<char>(b);
    ++len_;
  }
  // Makes room for n more bytes at once: one allocation for a record whose
  // size is known roughly, instead of a doubling every few fields.
  void reserve(std::size_t n) { room(n); }
  std::string take() {
    out_.resize(len_);
    std::string out = std::move(out_);
    out_.clear();
    len_ = 0;
    return out;
  }

 private:
  static constexpr std::size_t k_max_varint = 10;
  // Where the next n bytes go.
  char* room(std::size_t n) {
    if (out_.size() - len_ < n) [[unlikely]]
      grow(n);
    return out_.data() + len_;
  }
  // Out of line, so that the writes above stay a few instructions and
  // inline into their callers.
  [[gnu::noinline]] void grow(std::size_t n) {
    // Doubles, as push_back would, and uses all the capacity there is (at
    // first the string's own short-string buffer).
    out_.resize(std::max({out_.size() * 2, len_ + n, out_.capacity()}));
  }

  std::string out_;
  std::size_t len_ = 0;
};

class byte_reader {
 public:
  explicit byte_reader(std::string_view in) : in_(in) {}
  bool fixed64(std::uint64_t& v) {
    if (in_.size() < 8) return fail();
    v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(in_[i]);
    in_.remove_prefix(8);
    return true;
  }
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
      if (in_.empty()) return fail();
      auto b = static_cast<std::uint8_t>(in_[0]);
      in_.remove_prefix(1);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return fail();
  }
  template <class T>
  bool uvar(T& out) {
    std::uint64_t v;
    if (!varint(v)) return false;
    out = static_cast<T>(v);
    return true;
  }
  bool svarint(std::int64_t& out) {
    std::uint64_t v;
    if (!varint(v)) return false;
    out = static_cast<std::int64_t>((v >> 1) ^ (~(v & 1) + 1));
    return true;
  }
  bool str(std::string& s) {
    std::uint64_t n;
    if (!varint(n) || n > in_.size()) return fail();
    s.assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool byte(std::uint8_t& b) {
    if (in_.empty()) return fail();
    b = static_cast<std::uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return in_.empty(); }

 protected:
  bool fail() {
    ok_ = false;
    return false;
  }

 private:
  std::string_view in_;
  bool ok_ = true;
};

}  // namespace onceq
