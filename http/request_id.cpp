#include "http/request_id.hpp"

#include <atomic>
#include <charconv>
#include <cstdint>
#include <random>

namespace onceq::http {

namespace {

std::uint64_t process_prefix() {
  static const std::uint64_t prefix = [] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return prefix;
}

std::atomic<std::uint64_t> g_counter{0};

}  // namespace

std::string new_request_id() {
  // "{:016x}-{}" by hand: one per request that brings no id of its own.
  char buf[16 + 1 + 20];
  const std::uint64_t prefix = process_prefix();
  static constexpr char k_hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) buf[i] = k_hex[(prefix >> (60 - 4 * i)) & 0xf];
  buf[16] = '-';
  auto [end, ec] = std::to_chars(buf + 17, buf + sizeof(buf),
                                 g_counter.fetch_add(1, std::memory_order_relaxed) + 1);
  (void)ec;  // 20 digits hold any uint64
  return std::string(buf, end);
}

std::string request_id_for(std::string_view client_id) {
  if (client_id.empty() || client_id.size() > k_max_request_id_bytes) return new_request_id();
  for (char c : client_id) {
    if (c < 0x21 || c > 0x7e) return new_request_id();
  }
  return std::string(client_id);
}

}  // namespace onceq::http
