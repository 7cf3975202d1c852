#include "storage/schema.hpp"

#include <bit>
#include <cstring>

#include "base/bytes.hpp"

namespace onceq::storage {
namespace {

constexpr std::uint8_t k_format_version = 1;
// Topic records with the backpressure settings (max_backlog_*, max_inflight)
// are version 2; version 1 records (written before) decode with defaults.
// Version 3 adds the idempotency settings (key fields, conflict policy,
// history), version 4 replay_window_ms, version 5 ordering.
constexpr std::uint8_t k_topic_version = 5;
// Delivery and key records with a fencing token are version 2; delivery
// records with ended_at_ms (for replay_window_ms) are version 3.
constexpr std::uint8_t k_delivery_version = 3;
// Key records with the committing ack's produced list are version 3.
constexpr std::uint8_t k_key_version = 3;
constexpr std::uint8_t k_lease_run_version = 1;
constexpr char k_lease_run_tag = '\x01';
// More members than any consume hands out (max_batch is far below): a
// larger count is a corrupt record, not an allocation to attempt.
constexpr std::uint64_t k_lease_run_max = 1u << 20;
constexpr std::uint8_t k_outbox_version = 1;

// Big-endian words (keys sort numerically), written whole: into a key's
// stack buffer, which becomes the string in one copy, rather than a
// push_back per byte (docs/BENCHMARKS.md, ninth round).
static_assert(std::endian::native == std::endian::little ||
              std::endian::native == std::endian::big);
char* be32(char* p, std::uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
  return p + sizeof v;
}
char* be64(char* p, std::uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof v);
  return p + sizeof v;
}
void put_be32(std::string& out, std::uint32_t v) {
  char b[4];
  be32(b, v);
  out.append(b, sizeof b);
}
std::uint32_t get_be32(std::string_view s) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<std::uint8_t>(s[i]);
  return v;
}
std::uint64_t get_be64(std::string_view s) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<std::uint8_t>(s[i]);
  return v;
}

// A varint's most bytes, for the room a record needs (writer's hint).
constexpr std::size_t k_varint = 10;

// Record values: a version byte (after the expiry for records the
// compaction filter reads), then base/bytes.hpp's encoding.
class writer : public byte_writer {
 public:
  struct versioned {
    std::uint8_t v;
  };
  // hint: about the bytes the record takes (0: unknown), made room for at once.
  explicit writer(versioned v = versioned{k_format_version}, std::size_t hint = 0) {
    if (hint != 0) reserve(hint);
    byte(v.v);
  }
  explicit writer(millis expires_at, std::uint8_t version = k_format_version,
                  std::size_t hint = 0) {
    if (hint != 0) reserve(hint);
    fixed64(static_cast<std::uint64_t>(expires_at));
    byte(version);
  }
};

class reader : public byte_reader {
 public:
  using byte_reader::byte_reader;
  bool version() {
    std::uint8_t v;
    return byte(v) && v == k_format_version;
  }
  // Accepts versions lo..hi and says which one it read.
  bool version_in(std::uint8_t lo, std::uint8_t hi, std::uint8_t& v) {
    return byte(v) && v >= lo && v <= hi;
  }
};

error corrupt(std::string_view what) {
  return make_error(errc::internal, std::string("corrupt record: ") + std::string(what));
}

std::string with_prefix(char p, topic_id t) {
  char k[5] = {p};
  be32(k + 1, t);
  return std::string(k, sizeof k);
}

}  // namespace

millis expires_at_of(std::string_view value) noexcept {
  if (value.size() < 8) return 0;
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(value[i]);
  return static_cast<millis>(v);
}

namespace keys {

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = end.back();
    if (static_cast<std::uint8_t>(c) != 0xff) {
      c = static_cast<char>(static_cast<std::uint8_t>(c) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\xff');  // unreachable for our prefixes
}

std::string topic(std::string_view name) {
  std::string k(1, 't');
  k.append(name);
  return k;
}
std::string topic_prefix() {
  return "t";
}
std::string group(topic_id t, std::string_view name) {
  return with_prefix('g', t).append(name);
}
std::string group_prefix(topic_id t) {
  return with_prefix('g', t);
}
std::string cursor(topic_id t, group_id g, std::uint32_t partition) {
  char k[13] = {'c'};
  be32(be32(be32(k + 1, t), g), partition);
  return std::string(k, sizeof k);
}
std::string cursor_prefix(topic_id t) {
  return with_prefix('c', t);
}
std::string partition_start(topic_id t, std::uint32_t partition) {
  char k[9] = {'s'};
  be32(be32(k + 1, t), partition);
  return std::string(k, sizeof k);
}
std::string partition_start_prefix(topic_id t) {
  return with_prefix('s', t);
}
std::string next_topic_id() {
  return "n";
}
std::string applied() {
  return "a";
}
std::string next_retention() {
  return "r";
}
std::string outbox(std::uint64_t seq) {
  char k[9] = {'o'};
  be64(k + 1, seq);
  return std::string(k, sizeof k);
}
std::string outbox_prefix() {
  return "o";
}
std::string outbox_next() {
  return "q";
}
std::string outbox_high_water(std::uint32_t source) {
  char k[5] = {'w'};
  be32(k + 1, source);
  return std::string(k, sizeof k);
}
result<std::uint64_t> parse_outbox_seq(std::string_view key) {
  if (key.size() != 9 || key[0] != 'o') return corrupt("outbox key");
  std::uint64_t v = 0;
  for (int i = 1; i < 9; ++i) v = (v << 8) | static_cast<std::uint8_t>(key[i]);
  return v;
}
std::string fence(topic_id t, group_id g) {
  char k[9] = {'f'};
  be32(be32(k + 1, t), g);
  return std::string(k, sizeof k);
}
std::string fence_prefix(topic_id t) {
  return with_prefix('f', t);
}

std::string message(topic_id t, std::uint32_t partition, std::uint64_t offset) {
  char k[16];
  be64(be32(be32(k, t), partition), offset);
  return std::string(k, sizeof k);
}
std::string delivery(topic_id t, group_id g, std::uint32_t partition, std::uint64_t offset) {
  char k[20];
  be64(be32(be32(be32(k, t), g), partition), offset);
  return std::string(k, sizeof k);
}
std::string lease_run(topic_id t, group_id g, std::uint32_t partition, std::uint64_t offset) {
  char k[21];
  be64(be32(be32(be32(k, t), g), partition), offset);
  k[20] = k_lease_run_tag;
  return std::string(k, sizeof k);
}
bool is_lease_run(std::string_view key) noexcept {
  return key.size() == 21 && key[20] == k_lease_run_tag;
}
std::string idem_key(topic_id t, group_id g, std::string_view tenant, std::string_view key) {
  char head[12];
  be32(be32(be32(head, t), g), static_cast<std::uint32_t>(tenant.size()));
  std::string k;
  k.reserve(sizeof head + tenant.size() + key.size());
  k.append(head, sizeof head);
  k.append(tenant);
  k.append(key);
  return k;
}
std::string key_latest(topic_id t, std::string_view tenant, std::string_view key) {
  return idem_key(t, 0, tenant, key);
}
std::string key_history(topic_id t, group_id g, std::string_view tenant, std::string_view key) {
  return idem_key(t, g | 0x80000000u, tenant, key);
}
std::string history_of(std::string_view idem_key) {
  std::string k(idem_key);
  if (k.size() >= 8) k[4] = static_cast<char>(static_cast<std::uint8_t>(k[4]) | 0x80);
  return k;
}
std::string latest_of(std::string_view idem_key) {
  std::string k(idem_key);
  for (std::size_t i = 4; i < 8 && i < k.size(); ++i) k[i] = 0;
  return k;
}
topic_id topic_of(std::string_view idem_key) {
  return idem_key.size() < 8 ? 0 : get_be32(idem_key);
}
std::string topic_history_of(std::string_view idem_key) {
  return history_of(latest_of(idem_key));
}
std::string dedup(topic_id t, std::string_view id) {
  std::string k;
  k.reserve(4 + id.size());
  put_be32(k, t);
  k.append(id);
  return k;
}
std::string topic_begin(topic_id t) {
  char k[4];
  be32(k, t);
  return std::string(k, sizeof k);
}
std::string topic_end(topic_id t) {
  char k[4];
  be32(k, t + 1);
  return std::string(k, sizeof k);
}
std::string group_begin(topic_id t, group_id g) {
  char k[8];
  be32(be32(k, t), g);
  return std::string(k, sizeof k);
}
std::string group_end(topic_id t, group_id g) {
  return prefix_end(group_begin(t, g));
}

result<delivery_key> parse_delivery(std::string_view key) {
  if (key.size() != 20) return corrupt("delivery key");
  return delivery_key{get_be32(key), get_be32(key.substr(4)), get_be32(key.substr(8)),
                      get_be64(key.substr(12))};
}
result<delivery_key> parse_lease_run(std::string_view key) {
  if (!is_lease_run(key)) return corrupt("lease run key");
  return parse_delivery(key.substr(0, 20));
}
result<cursor_key> parse_cursor(std::string_view key) {
  if (key.size() != 13 || key[0] != 'c') return corrupt("cursor key");
  return cursor_key{get_be32(key.substr(1)), get_be32(key.substr(5)), get_be32(key.substr(9))};
}
result<std::uint64_t> parse_message_offset(std::string_view key) {
  if (key.size() != 16) return corrupt("message key");
  return get_be64(key.substr(8));
}
result<std::uint32_t> parse_partition_start(std::string_view key) {
  if (key.size() != 9 || key[0] != 's') return corrupt("partition start key");
  return get_be32(key.substr(5));
}

}  // namespace keys

std::string encode(const topic_record& r) {
  writer w(writer::versioned{k_topic_version});
  w.varint(r.id);
  w.str(r.name);
  w.varint(r.partitions);
  const auto& s = r.settings;
  w.svarint(s.lease_ms);
  w.svarint(s.max_attempts);
  w.svarint(s.backoff_ms);
  w.svarint(s.max_backoff_ms);
  w.svarint(s.key_ttl_ms);
  w.svarint(s.dedup_window_ms);
  w.svarint(s.retention_ms);
  w.svarint(r.created_at_ms);
  // Version 2.
  w.svarint(s.max_backlog_messages);
  w.svarint(s.max_backlog_bytes);
  w.svarint(s.max_inflight);
  // Version 3.
  w.varint(s.idempotency_key_fields.size());
  for (const auto& f : s.idempotency_key_fields) w.str(f);
  w.byte(s.idempotency_key_include_topic ? 1 : 0);
  w.byte(s.idempotency_key_optional ? 1 : 0);
  w.byte(s.dedup_by_content ? 1 : 0);
  w.byte(s.key_conflict);
  w.byte(s.key_history ? 1 : 0);
  // Version 4.
  w.svarint(s.replay_window_ms);
  // Version 5.
  w.byte(s.ordering);
  return w.take();
}

result<topic_record> decode_topic(std::string_view v) {
  reader r(v);
  topic_record t;
  auto& s = t.settings;
  std::uint8_t version = 0;
  if (!(r.version_in(k_format_version, k_topic_version, version) && r.uvar(t.id) && r.str(t.name) &&
        r.uvar(t.partitions) && r.svarint(s.lease_ms) && r.svarint(s.max_attempts) &&
        r.svarint(s.backoff_ms) && r.svarint(s.max_backoff_ms) && r.svarint(s.key_ttl_ms) &&
        r.svarint(s.dedup_window_ms) && r.svarint(s.retention_ms) && r.svarint(t.created_at_ms)))
    return corrupt("topic");
  if (version >= 2 && !(r.svarint(s.max_backlog_messages) && r.svarint(s.max_backlog_bytes) &&
                        r.svarint(s.max_inflight)))
    return corrupt("topic");
  if (version >= 3) {
    std::uint64_t n = 0;
    if (!r.varint(n) || n > 64) return corrupt("topic");
    s.idempotency_key_fields.resize(n);
    for (auto& f : s.idempotency_key_fields)
      if (!r.str(f)) return corrupt("topic");
    std::uint8_t inc = 0, opt = 0, content = 0, history = 0;
    if (!(r.byte(inc) && r.byte(opt) && r.byte(content) && r.byte(s.key_conflict) &&
          r.byte(history)))
      return corrupt("topic");
    s.idempotency_key_include_topic = inc != 0;
    s.idempotency_key_optional = opt != 0;
    s.dedup_by_content = content != 0;
    s.key_history = history != 0;
  }
  if (version >= 4 && !r.svarint(s.replay_window_ms)) return corrupt("topic");
  if (version >= 5 && !(r.byte(s.ordering) && s.ordering <= 1)) return corrupt("topic");
  return t;
}

std::string encode(const group_record& r) {
  writer w;
  w.varint(r.topic);
  w.varint(r.id);
  w.str(r.name);
  return w.take();
}

result<group_record> decode_group(std::string_view v) {
  reader r(v);
  group_record g;
  if (!(r.version() && r.uvar(g.topic) && r.uvar(g.id) && r.str(g.name))) return corrupt("group");
  return g;
}

std::string encode(const message_record& r) {
  writer w(writer::versioned{k_format_version}, 3 + 11 * k_varint + (r.key ? r.key->size() : 0) +
                                                    r.value.size() + r.envelope_json.size() +
                                                    r.idempotency_key.size() + r.tenant_id.size());
  w.svarint(r.produced_at_ms);
  w.svarint(r.deliver_at_ms);
  w.byte(r.key ? 1 : 0);
  if (r.key) w.str(*r.key);
  w.str(r.value);
  w.str(r.envelope_json);
  w.str(r.idempotency_key);
  w.str(r.tenant_id);
  w.svarint(r.key_ttl_ms);
  w.svarint(r.max_attempts);
  w.svarint(r.backoff_ms);
  w.svarint(r.max_backoff_ms);
  w.byte(r.dlq ? 1 : 0);
  if (r.dlq) {
    w.str(r.dlq->original_topic);
    w.varint(r.dlq->original_partition);
    w.varint(r.dlq->original_offset);
    w.svarint(r.dlq->attempts);
    w.str(r.dlq->last_error);
    w.svarint(r.dlq->routed_at_ms);
  }
  return w.take();
}

result<message_record> decode_message(std::string_view v) {
  reader r(v);
  message_record m;
  std::uint8_t has_key = 0, has_dlq = 0;
  if (!(r.version() && r.svarint(m.produced_at_ms) && r.svarint(m.deliver_at_ms) &&
        r.byte(has_key)))
    return corrupt("message");
  if (has_key) {
    m.key.emplace();
    if (!r.str(*m.key)) return corrupt("message key");
  }
  if (!(r.str(m.value) && r.str(m.envelope_json) && r.str(m.idempotency_key) &&
        r.str(m.tenant_id) && r.svarint(m.key_ttl_ms) && r.svarint(m.max_attempts) &&
        r.svarint(m.backoff_ms) && r.svarint(m.max_backoff_ms) && r.byte(has_dlq)))
    return corrupt("message");
  if (has_dlq) {
    dlq_origin d;
    if (!(r.str(d.original_topic) && r.uvar(d.original_partition) && r.uvar(d.original_offset) &&
          r.svarint(d.attempts) && r.str(d.last_error) && r.svarint(d.routed_at_ms)))
      return corrupt("message dlq");
    m.dlq = std::move(d);
  }
  return m;
}

std::string encode(const delivery_record& r) {
  writer w(writer::versioned{k_delivery_version},
           2 + 7 * k_varint + r.owner.size() + r.last_error.size());
  w.byte(static_cast<std::uint8_t>(r.state));
  w.str(r.owner);
  w.svarint(r.attempts);
  w.svarint(r.lease_deadline_ms);
  w.svarint(r.not_before_ms);
  w.str(r.last_error);
  w.varint(r.fencing_token);
  w.svarint(r.ended_at_ms);
  return w.take();
}

result<delivery_record> decode_delivery(std::string_view v) {
  reader r(v);
  delivery_record d;
  std::uint8_t st = 0, version = 0;
  if (!(r.version_in(k_format_version, k_delivery_version, version) && r.byte(st) && st <= 3 &&
        r.str(d.owner) && r.svarint(d.attempts) && r.svarint(d.lease_deadline_ms) &&
        r.svarint(d.not_before_ms) && r.str(d.last_error)))
    return corrupt("delivery");
  if (version >= 2 && !r.varint(d.fencing_token)) return corrupt("delivery");
  if (version >= 3 && !r.svarint(d.ended_at_ms)) return corrupt("delivery");
  d.state = static_cast<delivery_state>(st);
  return d;
}

std::string encode(const lease_run_record& r) {
  writer w(writer::versioned{k_lease_run_version},
           3 * k_varint + r.owner.size() + r.members.size() * 4);
  w.str(r.owner);
  w.svarint(r.lease_deadline_ms);
  w.varint(r.members.size());
  // Offsets and tokens as steps from the one before: a byte or two each.
  std::uint64_t off = 0, token = 0;
  for (const auto& m : r.members) {
    w.varint(m.offset - off);
    w.varint(m.fencing_token - token);
    off = m.offset;
    token = m.fencing_token;
  }
  return w.take();
}

result<lease_run_record> decode_lease_run(std::string_view v) {
  reader r(v);
  lease_run_record run;
  std::uint8_t version = 0;
  std::uint64_t n = 0;
  if (!(r.version_in(k_lease_run_version, k_lease_run_version, version) && r.str(run.owner) &&
        r.svarint(run.lease_deadline_ms) && r.varint(n) && n > 0 && n <= k_lease_run_max))
    return corrupt("lease run");
  run.members.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, v.size())));
  std::uint64_t off = 0, token = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t doff = 0, dtoken = 0;
    if (!r.varint(doff) || !r.varint(dtoken)) return corrupt("lease run");
    // Strictly ascending after the first; no wrap-around.
    if (i > 0 && (doff == 0 || dtoken == 0)) return corrupt("lease run");
    if (doff > ~off || dtoken > ~token) return corrupt("lease run");
    off += doff;
    token += dtoken;
    run.members.push_back({off, token});
  }
  if (!r.at_end()) return corrupt("lease run");
  return run;
}

std::string encode(const key_record& r) {
  std::size_t hint = 10 + 8 * k_varint + r.owner.size() + r.result_json.size();
  for (const auto& p : r.produced) hint += 1 + 5 * k_varint + p.topic.size();
  writer w(r.expires_at_ms, k_key_version, hint);
  w.byte(static_cast<std::uint8_t>(r.state));
  w.str(r.owner);
  w.varint(r.partition);
  w.varint(r.offset);
  w.svarint(r.attempts);
  w.svarint(r.committed_at_ms);
  w.str(r.result_json);
  w.varint(r.fencing_token);
  // Version 3.
  w.varint(r.produced.size());
  for (const auto& p : r.produced) {
    w.str(p.topic);
    w.varint(p.partition);
    w.varint(p.offset);
    w.byte(static_cast<std::uint8_t>((p.duplicate ? 1 : 0) | (p.pending ? 2 : 0) |
                                     (p.no_position ? 4 : 0)));
    w.varint(p.outbox_seq);
  }
  return w.take();
}

result<key_record> decode_key(std::string_view v) {
  reader r(v);
  key_record k;
  std::uint64_t exp = 0;
  std::uint8_t st = 0, version = 0;
  if (!(r.fixed64(exp) && r.version_in(k_format_version, k_key_version, version) && r.byte(st) &&
        (st == 1 || st == 2) && r.str(k.owner) && r.uvar(k.partition) && r.uvar(k.offset) &&
        r.svarint(k.attempts) && r.svarint(k.committed_at_ms) && r.str(k.result_json)))
    return corrupt("key");
  if (version >= 2 && !r.varint(k.fencing_token)) return corrupt("key");
  if (version >= 3) {
    std::uint64_t n = 0;
    if (!r.varint(n) || n > 1000) return corrupt("key");
    k.produced.resize(n);
    for (auto& p : k.produced) {
      std::uint8_t flags = 0;
      if (!(r.str(p.topic) && r.uvar(p.partition) && r.varint(p.offset) && r.byte(flags) &&
            flags <= 7 && r.varint(p.outbox_seq)))
        return corrupt("key");
      p.duplicate = (flags & 1) != 0;
      p.pending = (flags & 2) != 0;
      p.no_position = (flags & 4) != 0;
    }
  }
  k.expires_at_ms = static_cast<millis>(exp);
  k.state = static_cast<key_state>(st);
  return k;
}

std::string encode(const outbox_record& r) {
  writer w(writer::versioned{k_outbox_version});
  w.str(r.topic);
  w.str(r.message);
  w.svarint(r.created_at_ms);
  w.str(r.source_scope);
  w.varint(r.source_partition);
  w.varint(r.source_offset);
  w.varint(r.index);
  return w.take();
}

result<outbox_record> decode_outbox(std::string_view v) {
  reader r(v);
  outbox_record o;
  std::uint8_t version = 0;
  if (!(r.version_in(k_format_version, k_outbox_version, version) && r.str(o.topic) &&
        r.str(o.message) && r.svarint(o.created_at_ms) && r.str(o.source_scope) &&
        r.uvar(o.source_partition) && r.varint(o.source_offset) && r.uvar(o.index)))
    return corrupt("outbox");
  return o;
}

std::string encode(const dedup_record& r) {
  writer w(r.expires_at_ms);
  w.varint(r.partition);
  w.varint(r.offset);
  w.svarint(r.stored_at_ms);
  return w.take();
}

result<dedup_record> decode_dedup(std::string_view v) {
  reader r(v);
  dedup_record d;
  std::uint64_t exp = 0;
  if (!(r.fixed64(exp) && r.version() && r.uvar(d.partition) && r.uvar(d.offset) &&
        r.svarint(d.stored_at_ms)))
    return corrupt("dedup");
  d.expires_at_ms = static_cast<millis>(exp);
  return d;
}

std::string encode(const latest_record& r) {
  writer w(r.expires_at_ms);
  w.varint(r.partition);
  w.varint(r.offset);
  return w.take();
}

result<latest_record> decode_latest(std::string_view v) {
  reader r(v);
  latest_record l;
  std::uint64_t exp = 0;
  if (!(r.fixed64(exp) && r.version() && r.uvar(l.partition) && r.uvar(l.offset)))
    return corrupt("latest");
  l.expires_at_ms = static_cast<millis>(exp);
  return l;
}

std::string encode(const history_record& r) {
  writer w(r.expires_at_ms);
  w.varint(r.events.size());
  for (const auto& e : r.events) {
    w.byte(static_cast<std::uint8_t>(e.kind));
    w.svarint(e.at_ms);
    w.str(e.owner);
    w.varint(e.partition);
    w.varint(e.offset);
    w.svarint(e.attempts);
    w.varint(e.fencing_token);
    w.str(e.reason);
    w.varint(e.result_bytes);
  }
  return w.take();
}

result<history_record> decode_history(std::string_view v) {
  reader r(v);
  history_record h;
  std::uint64_t exp = 0, n = 0;
  if (!(r.fixed64(exp) && r.version() && r.varint(n) && n <= k_history_max))
    return corrupt("history");
  h.expires_at_ms = static_cast<millis>(exp);
  h.events.resize(n);
  for (auto& e : h.events) {
    std::uint8_t kind = 0;
    if (!(r.byte(kind) && kind >= 1 && kind <= 11 && r.svarint(e.at_ms) && r.str(e.owner) &&
          r.uvar(e.partition) && r.uvar(e.offset) && r.svarint(e.attempts) &&
          r.varint(e.fencing_token) && r.str(e.reason) && r.varint(e.result_bytes)))
      return corrupt("history");
    e.kind = static_cast<history_kind>(kind);
  }
  return h;
}

std::string encode_u64(std::uint64_t v) {
  writer w;
  w.varint(v);
  return w.take();
}

result<std::uint64_t> decode_u64(std::string_view v) {
  reader r(v);
  std::uint64_t x = 0;
  if (!(r.version() && r.varint(x))) return corrupt("u64");
  return x;
}

}  // namespace onceq::storage
