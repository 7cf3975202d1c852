#include "bench/message.hpp"

#include <fmt/format.h>

#include <charconv>
#include <chrono>

namespace onceq::bench {
namespace {

// Payload layout: "<seq:16 hex>.<sent_ns:16 hex>." then 'x' padding.
constexpr std::size_t k_header = 34;

}  // namespace

std::uint64_t steady_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::string key_of(std::uint64_t seq) {
  return fmt::format("k{:010x}", seq);
}

void make_message(bench_message& m, std::uint64_t seq, std::uint64_t sent_ns,
                  std::size_t payload_size, unsigned dup_variant) {
  m.key.clear();
  fmt::format_to(std::back_inserter(m.key), "k{:010x}", seq);
  m.msg_id.clear();
  if (dup_variant == 0) {
    fmt::format_to(std::back_inserter(m.msg_id), "m{:010x}", seq);
  } else {
    fmt::format_to(std::back_inserter(m.msg_id), "m{:010x}-r{}", seq, dup_variant);
  }
  m.payload.clear();
  fmt::format_to(std::back_inserter(m.payload), "{:016x}.{:016x}.", seq, sent_ns);
  if (payload_size > m.payload.size()) m.payload.append(payload_size - m.payload.size(), 'x');
}

std::optional<payload_header> parse_payload(std::string_view payload) {
  if (payload.size() < k_header || payload[16] != '.' || payload[33] != '.') return std::nullopt;
  payload_header h;
  const char* p = payload.data();
  auto r1 = std::from_chars(p, p + 16, h.seq, 16);
  auto r2 = std::from_chars(p + 17, p + 33, h.sent_ns, 16);
  if (r1.ec != std::errc{} || r1.ptr != p + 16 || r2.ec != std::errc{} || r2.ptr != p + 33) {
    return std::nullopt;
  }
  return h;
}

}  // namespace onceq::bench
