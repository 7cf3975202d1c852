// libFuzzer target: any bytes as a stored value, as a stored key and as a
// replicated log entry, fed to every decoder of storage/schema.hpp and to
// broker/log_entry.hpp's (a corrupt or foreign record must be
// an error, never a crash), and where a decoder accepts, its round trip:
// encode(decode(x)) decodes to the same record, and a parsed key re-encodes
// to the same bytes. (encode(decode(x)) == x does not hold: decoders accept
// non-minimal varints and ignore trailing bytes.)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "broker/log_entry.hpp"
#include "storage/schema.hpp"

using namespace onceq::storage;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

std::uint32_t be32(std::string_view s) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<std::uint8_t>(s[i]);
  return v;
}

// decode(encode(r)) succeeds and encodes to the same bytes as r.
template <class Decode, class Record>
void round_trip(Decode decode, const Record& r) {
  const std::string once = encode(r);
  auto again = decode(once);
  check(again.ok());
  check(encode(*again) == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (auto r = decode_topic(in); r.ok()) round_trip(decode_topic, *r);
  if (auto r = decode_group(in); r.ok()) round_trip(decode_group, *r);
  if (auto r = decode_message(in); r.ok()) round_trip(decode_message, *r);
  if (auto r = decode_delivery(in); r.ok()) round_trip(decode_delivery, *r);
  if (auto r = decode_lease_run(in); r.ok()) round_trip(decode_lease_run, *r);
  if (auto r = decode_key(in); r.ok()) {
    round_trip(decode_key, *r);
    check(expires_at_of(in) == r->expires_at_ms);  // what the compaction filter reads
  }
  if (auto r = decode_dedup(in); r.ok()) {
    round_trip(decode_dedup, *r);
    check(expires_at_of(in) == r->expires_at_ms);
  }
  if (auto e = onceq::decode_entry(in); e.ok()) {
    const std::string once = onceq::encode_entry(*e);
    auto again = onceq::decode_entry(once);
    check(again.ok());
    check(onceq::encode_entry(*again) == once);
  }
  if (auto r = decode_u64(in); r.ok()) {
    auto again = decode_u64(encode_u64(*r));
    check(again.ok() && *again == *r);
  }

  if (auto k = keys::parse_delivery(in); k.ok()) {
    check(keys::delivery(k->topic, k->group, k->partition, k->offset) == in);
  }
  if (auto k = keys::parse_cursor(in); k.ok()) {
    check(keys::cursor(k->topic, k->group, k->partition) == in);
  }
  if (auto off = keys::parse_message_offset(in); off.ok()) {
    check(keys::message(be32(in), be32(in.substr(4)), *off) == in);
  }
  if (auto p = keys::parse_partition_start(in); p.ok()) {
    check(keys::partition_start(be32(in.substr(1)), *p) == in);
  }
  return 0;
}
