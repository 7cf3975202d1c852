#include "http/request_id.hpp"

#include <atomic>
#include <cstdint>
#include <random>

#include <fmt/format.h>

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
  return fmt::format("{:016x}-{}", process_prefix(),
                     g_counter.fetch_add(1, std::memory_order_relaxed) + 1);
}

std::string request_id_for(std::string_view client_id) {
  if (client_id.empty() || client_id.size() > k_max_request_id_bytes) return new_request_id();
  for (char c : client_id) {
    if (c < 0x21 || c > 0x7e) return new_request_id();
  }
  return std::string(client_id);
}

}  // namespace onceq::http
