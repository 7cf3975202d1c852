#pragma once

// The binary encoding of onceq's values: little-endian fixed64, LEB128
// varints, zig-zag signed varints, length-prefixed strings. Used by the
// disk records (storage/schema.cpp) and the replicated log's entries
// (broker/log_entry.cpp), so that both read and write one way.
//
// byte_reader never reads past its input: a short or malformed input makes
// every later read fail, and ok() says so.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace onceq {

class byte_writer {
 public:
  void fixed64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (i * 8)) & 0xff));
  }
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  // Signed values zig-zag encoded (-1 is the common "unset").
  void svarint(std::int64_t v) {
    varint((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
  }
  void str(std::string_view s) {
    varint(s.size());
    out_.append(s);
  }
  void byte(std::uint8_t b) { out_.push_back(static_cast<char>(b)); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
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
