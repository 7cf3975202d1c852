#include "storage/schema.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace onceq::storage {
namespace {

// Every proper prefix of a valid encoding, plus a wrong version byte, must
// decode to an error, never crash or succeed.
template <class Decode>
void expect_rejects_truncations(const std::string& encoded, Decode decode) {
  for (std::size_t n = 0; n < encoded.size(); ++n) {
    auto r = decode(std::string_view(encoded).substr(0, n));
    EXPECT_FALSE(r.ok()) << "prefix of length " << n << " decoded";
    EXPECT_EQ(r.code(), errc::internal);
  }
}

// ---- records ----------------------------------------------------------

TEST(schema, topic_round_trip) {
  topic_record t;
  t.id = 7;
  t.name = "orders.eu";
  t.partitions = 12;
  t.settings.lease_ms = 5'000;
  t.settings.max_attempts = 3;
  t.settings.backoff_ms = 250;
  t.settings.max_backoff_ms = 60'000;
  t.settings.key_ttl_ms = 0;
  t.settings.dedup_window_ms = 1;
  t.settings.retention_ms = 0;
  t.created_at_ms = 1'700'000'000'123;

  auto r = decode_topic(encode(t));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->id, t.id);
  EXPECT_EQ(r->name, t.name);
  EXPECT_EQ(r->partitions, t.partitions);
  EXPECT_EQ(r->settings, t.settings);
  EXPECT_EQ(r->created_at_ms, t.created_at_ms);
  expect_rejects_truncations(encode(t), decode_topic);
}

TEST(schema, topic_backpressure_settings_round_trip) {
  topic_record t;
  t.name = "capped";
  t.settings.max_backlog_messages = 1000;
  t.settings.max_backlog_bytes = 1 << 20;
  t.settings.max_inflight = 7;
  auto r = decode_topic(encode(t));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->settings, t.settings);
  expect_rejects_truncations(encode(t), decode_topic);
}

TEST(schema, version_1_topic_records_decode_with_default_limits) {
  // A topic record as written before the backpressure settings existed.
  topic_record t;
  t.id = 3;
  t.name = "old";
  t.settings.max_backlog_messages = 5;  // not in a version 1 record
  auto v2 = encode(t);
  // Version 1 = version 2 without its last three varints (one byte each
  // here: 5, 0, 0) and with version byte 1.
  std::string v1 = v2.substr(0, v2.size() - 3);
  v1[0] = 1;
  auto r = decode_topic(v1);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->name, "old");
  EXPECT_EQ(r->settings.max_backlog_messages, 0);
  EXPECT_EQ(r->settings.max_inflight, 0);
}

TEST(schema, topic_defaults_round_trip) {
  topic_record t;
  auto r = decode_topic(encode(t));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->settings, topic_settings{});
  EXPECT_EQ(r->name, "");
}

TEST(schema, group_round_trip) {
  group_record g{3, 9, "billing"};
  auto r = decode_group(encode(g));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->topic, 3u);
  EXPECT_EQ(r->id, 9u);
  EXPECT_EQ(r->name, "billing");
  expect_rejects_truncations(encode(g), decode_group);
}

message_record full_message() {
  message_record m;
  m.produced_at_ms = 1'700'000'000'000;
  m.deliver_at_ms = 1'700'000'005'000;
  m.key = std::string("user-42");
  m.value = std::string("{\"a\":1}\0binary\xff", 15);
  m.envelope_json = R"({"value":{"a":1}})";
  m.idempotency_key = "charge-1";
  m.tenant_id = "acme";
  m.key_ttl_ms = 0;
  m.max_attempts = 5;
  m.backoff_ms = 100;
  m.max_backoff_ms = 10'000;
  m.dlq = dlq_origin{"orders", 3, 123'456'789'012ull, 5, "timeout", 1'700'000'009'999};
  return m;
}

TEST(schema, message_round_trip_with_every_field) {
  const message_record m = full_message();
  auto r = decode_message(encode(m));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->produced_at_ms, m.produced_at_ms);
  EXPECT_EQ(r->deliver_at_ms, m.deliver_at_ms);
  ASSERT_TRUE(r->key.has_value());
  EXPECT_EQ(*r->key, "user-42");
  EXPECT_EQ(r->value, m.value);
  EXPECT_EQ(r->envelope_json, m.envelope_json);
  EXPECT_EQ(r->idempotency_key, m.idempotency_key);
  EXPECT_EQ(r->tenant_id, m.tenant_id);
  EXPECT_EQ(r->key_ttl_ms, 0);
  EXPECT_EQ(r->max_attempts, 5);
  EXPECT_EQ(r->backoff_ms, 100);
  EXPECT_EQ(r->max_backoff_ms, 10'000);
  ASSERT_TRUE(r->dlq.has_value());
  EXPECT_EQ(r->dlq->original_topic, "orders");
  EXPECT_EQ(r->dlq->original_partition, 3u);
  EXPECT_EQ(r->dlq->original_offset, 123'456'789'012ull);
  EXPECT_EQ(r->dlq->attempts, 5);
  EXPECT_EQ(r->dlq->last_error, "timeout");
  EXPECT_EQ(r->dlq->routed_at_ms, 1'700'000'009'999);
  expect_rejects_truncations(encode(m), decode_message);
}

TEST(schema, message_round_trip_with_unset_fields) {
  message_record m;  // no key, no dlq, -1 "the topic's" overrides
  m.value = "v";
  auto r = decode_message(encode(m));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->key.has_value());
  EXPECT_FALSE(r->dlq.has_value());
  EXPECT_EQ(r->key_ttl_ms, -1);
  EXPECT_EQ(r->max_attempts, -1);
  EXPECT_EQ(r->backoff_ms, -1);
  EXPECT_EQ(r->max_backoff_ms, -1);
  EXPECT_EQ(r->value, "v");
  EXPECT_EQ(r->envelope_json, "");
}

TEST(schema, message_empty_key_differs_from_no_key) {
  message_record m;
  m.key = std::string();
  auto r = decode_message(encode(m));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->key.has_value());
  EXPECT_EQ(*r->key, "");
}

TEST(schema, signed_extremes_round_trip) {
  message_record m;
  m.produced_at_ms = std::numeric_limits<std::int64_t>::max();
  m.deliver_at_ms = std::numeric_limits<std::int64_t>::min();
  m.key_ttl_ms = -2;
  auto r = decode_message(encode(m));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->produced_at_ms, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(r->deliver_at_ms, std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(r->key_ttl_ms, -2);
}

TEST(schema, delivery_round_trip_every_state) {
  for (auto st : {delivery_state::pending, delivery_state::leased, delivery_state::acked,
                  delivery_state::dead}) {
    delivery_record d{st, "worker-1", 4, 1'700'000'030'000, 1'700'000'001'000, "boom"};
    auto r = decode_delivery(encode(d));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->state, st);
    EXPECT_EQ(r->owner, "worker-1");
    EXPECT_EQ(r->attempts, 4);
    EXPECT_EQ(r->lease_deadline_ms, 1'700'000'030'000);
    EXPECT_EQ(r->not_before_ms, 1'700'000'001'000);
    EXPECT_EQ(r->last_error, "boom");
  }
  expect_rejects_truncations(encode(delivery_record{}), decode_delivery);
}

TEST(schema, lease_run_round_trip_and_key) {
  lease_run_record run{
      "worker-1", 1'700'000'030'000, {{7, 100}, {8, 101}, {12, 130}, {1u << 30, 131}}};
  auto r = decode_lease_run(encode(run));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, run);
  expect_rejects_truncations(encode(run), decode_lease_run);
  std::string trailing = encode(run) + "x";
  EXPECT_EQ(decode_lease_run(trailing).code(), errc::internal);

  // The key: the first member's delivery key and 0x01, between that key
  // and the next offset's.
  const auto k = keys::lease_run(3, 4, 5, 7);
  EXPECT_TRUE(keys::is_lease_run(k));
  EXPECT_FALSE(keys::is_lease_run(keys::delivery(3, 4, 5, 7)));
  EXPECT_LT(keys::delivery(3, 4, 5, 7), k);
  EXPECT_LT(k, keys::delivery(3, 4, 5, 8));
  auto dk = keys::parse_lease_run(k);
  ASSERT_TRUE(dk.ok());
  EXPECT_EQ(dk->group, 4u);
  EXPECT_EQ(dk->partition, 5u);
  EXPECT_EQ(dk->offset, 7u);
  EXPECT_FALSE(keys::parse_delivery(k).ok());
  EXPECT_FALSE(keys::parse_lease_run(keys::delivery(3, 4, 5, 7)).ok());
}

TEST(schema, lease_run_rejects_members_out_of_order_and_empty_runs) {
  // Offsets or tokens that do not ascend, and a run of no member.
  for (const auto& members : std::vector<std::vector<lease_run_record::member>>{
           {{7, 100}, {7, 101}}, {{7, 100}, {8, 100}}, {}}) {
    EXPECT_EQ(decode_lease_run(encode(lease_run_record{"w", 1, members})).code(), errc::internal);
  }
  // A count no consume hands out is refused before anything is reserved.
  std::string huge = encode(lease_run_record{"w", 1, {{1, 1}}});
  huge[4] = '\xff';  // version, owner (2), deadline (1): the count's first byte
  huge.insert(5, "\xff\xff\x7f");
  EXPECT_EQ(decode_lease_run(huge).code(), errc::internal);
}

TEST(schema, delivery_rejects_unknown_state) {
  std::string v = encode(delivery_record{});
  v[1] = 4;  // [0] is the format version, [1] the state
  EXPECT_EQ(decode_delivery(v).code(), errc::internal);
}

TEST(schema, key_round_trip_both_states) {
  for (auto st : {key_state::committed, key_state::failed}) {
    key_record k;
    k.expires_at_ms = st == key_state::committed ? 1'700'604'800'000 : 0;
    k.state = st;
    k.owner = "worker-2";
    k.partition = 5;
    k.offset = 99;
    k.attempts = 2;
    k.committed_at_ms = 1'700'000'000'000;
    k.result_json = R"({"charged":true})";
    auto r = decode_key(encode(k));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->expires_at_ms, k.expires_at_ms);
    EXPECT_EQ(r->state, st);
    EXPECT_EQ(r->owner, k.owner);
    EXPECT_EQ(r->partition, 5u);
    EXPECT_EQ(r->offset, 99u);
    EXPECT_EQ(r->attempts, 2);
    EXPECT_EQ(r->committed_at_ms, k.committed_at_ms);
    EXPECT_EQ(r->result_json, k.result_json);
    expect_rejects_truncations(encode(k), decode_key);
  }
}

TEST(schema, key_rejects_unknown_state) {
  std::string v = encode(key_record{});
  v[9] = 0;  // 8 bytes expires_at, the version, then the state
  EXPECT_EQ(decode_key(v).code(), errc::internal);
}

TEST(schema, dedup_round_trip) {
  dedup_record d{1'700'000'120'000, 2, 77, 1'700'000'000'000};
  auto r = decode_dedup(encode(d));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->expires_at_ms, d.expires_at_ms);
  EXPECT_EQ(r->partition, 2u);
  EXPECT_EQ(r->offset, 77u);
  EXPECT_EQ(r->stored_at_ms, d.stored_at_ms);
  expect_rejects_truncations(encode(d), decode_dedup);
}

TEST(schema, u64_round_trip) {
  for (std::uint64_t v : {0ull, 1ull, 127ull, 128ull, 1ull << 35, ~0ull}) {
    auto r = decode_u64(encode_u64(v));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, v);
  }
  expect_rejects_truncations(encode_u64(~0ull), decode_u64);
}

TEST(schema, garbage_is_an_error_not_a_crash) {
  const std::vector<std::string> inputs = {
      "",
      std::string(1, '\x02'),                      // unknown format version
      std::string(64, '\xff'),                     // endless varints
      std::string("\x01\xff\xff\xff\xff\x0f", 6),  // huge string length
      std::string(40, '\0'),
  };
  for (const auto& in : inputs) {
    EXPECT_FALSE(decode_topic(in).ok());
    EXPECT_FALSE(decode_group(in).ok());
    EXPECT_FALSE(decode_message(in).ok());
    EXPECT_FALSE(decode_delivery(in).ok());
    EXPECT_FALSE(decode_lease_run(in).ok());
    EXPECT_FALSE(decode_key(in).ok());
    EXPECT_FALSE(decode_dedup(in).ok());
  }
  EXPECT_FALSE(decode_u64("").ok());
  EXPECT_FALSE(decode_u64(std::string(1, '\x02')).ok());
}

TEST(schema, expires_at_of_reads_key_and_dedup_records) {
  key_record k;
  k.expires_at_ms = 1'700'000'000'001;
  EXPECT_EQ(expires_at_of(encode(k)), 1'700'000'000'001);
  k.expires_at_ms = 0;
  EXPECT_EQ(expires_at_of(encode(k)), 0);

  dedup_record d;
  d.expires_at_ms = 42;
  EXPECT_EQ(expires_at_of(encode(d)), 42);

  EXPECT_EQ(expires_at_of(""), 0);
  EXPECT_EQ(expires_at_of("short"), 0);
}

// ---- keys -------------------------------------------------------------

TEST(schema, message_keys_order_numerically) {
  EXPECT_LT(keys::message(1, 0, 255), keys::message(1, 0, 256));
  EXPECT_LT(keys::message(1, 0, 65'535), keys::message(1, 0, 65'536));
  EXPECT_LT(keys::message(1, 0, ~0ull - 1), keys::message(1, 0, ~0ull));
  EXPECT_LT(keys::message(1, 0, ~0ull), keys::message(1, 1, 0));
  EXPECT_LT(keys::message(1, 255, 0), keys::message(1, 256, 0));
  EXPECT_LT(keys::message(255, 9, 9), keys::message(256, 0, 0));
}

TEST(schema, delivery_keys_order_numerically) {
  EXPECT_LT(keys::delivery(1, 2, 3, 255), keys::delivery(1, 2, 3, 256));
  EXPECT_LT(keys::delivery(1, 2, 3, ~0ull), keys::delivery(1, 2, 4, 0));
  EXPECT_LT(keys::delivery(1, 255, 0, 0), keys::delivery(1, 256, 0, 0));
}

TEST(schema, topic_and_group_ranges_contain_exactly_their_keys) {
  const auto in = keys::delivery(5, 7, 0, 0);
  const auto in_last = keys::delivery(5, 7, ~0u, ~0ull);
  EXPECT_LE(keys::group_begin(5, 7), in);
  EXPECT_LT(in_last, keys::group_end(5, 7));
  EXPECT_LE(keys::group_end(5, 7), keys::delivery(5, 8, 0, 0));
  EXPECT_LT(keys::delivery(5, 6, ~0u, ~0ull), keys::group_begin(5, 7));

  EXPECT_LE(keys::topic_begin(5), keys::message(5, 0, 0));
  EXPECT_LT(keys::message(5, ~0u, ~0ull), keys::topic_end(5));
  EXPECT_LE(keys::topic_end(5), keys::message(6, 0, 0));
  EXPECT_LT(keys::dedup(5, "\xff\xff"), keys::topic_end(5));
  EXPECT_LT(keys::idem_key(5, ~0u, "t", "k"), keys::topic_end(5));
  EXPECT_LT(keys::message(255, 0, 0), keys::topic_begin(256));
}

TEST(schema, prefix_end_is_the_least_upper_bound) {
  EXPECT_EQ(keys::prefix_end("a"), "b");
  EXPECT_EQ(keys::prefix_end(std::string("a\xff", 2)), "b");
  const auto p = keys::group_prefix(3);
  EXPECT_LT(p + std::string(8, '\xff'), keys::prefix_end(p));
  EXPECT_LT(keys::group(3, "zzz"), keys::prefix_end(keys::group_prefix(3)));
  EXPECT_GE(keys::group(4, ""), keys::prefix_end(keys::group_prefix(3)));
}

TEST(schema, idem_keys_do_not_collide_across_tenants) {
  // The tenant is length-prefixed: ("ab", "c") and ("a", "bc") differ.
  EXPECT_NE(keys::idem_key(1, 1, "ab", "c"), keys::idem_key(1, 1, "a", "bc"));
  EXPECT_NE(keys::idem_key(1, 1, "", "k"), keys::idem_key(1, 2, "", "k"));
}

TEST(schema, meta_keys_have_distinct_prefixes) {
  EXPECT_TRUE(keys::topic("orders").starts_with(keys::topic_prefix()));
  EXPECT_TRUE(keys::group(1, "g").starts_with(keys::group_prefix(1)));
  EXPECT_FALSE(keys::group(2, "g").starts_with(keys::group_prefix(1)));
  EXPECT_TRUE(keys::cursor(1, 2, 3).starts_with(keys::cursor_prefix(1)));
  EXPECT_TRUE(keys::partition_start(1, 3).starts_with(keys::partition_start_prefix(1)));
  EXPECT_FALSE(keys::next_topic_id().starts_with(keys::topic_prefix()));
}

// The key layout is persisted: the exact bytes, big-endian words at their
// boundaries (0, 1, 2^31, 2^32-1 and 2^64-1).
std::string hex(std::string_view s) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    const auto b = static_cast<std::uint8_t>(c);
    out += digits[b >> 4];
    out += digits[b & 0xf];
  }
  return out;
}

// Hex digits with spaces between the fields, for reading.
std::string fields(std::string_view spaced) {
  std::string out(spaced);
  std::erase(out, ' ');
  return out;
}

TEST(schema, keys_exact_bytes) {
  constexpr std::uint32_t m32 = 0xffffffffu;
  constexpr std::uint64_t m64 = ~0ull;
  EXPECT_EQ(hex(keys::message(0, 1, 1ull << 31)), fields("00000000 00000001 0000000080000000"));
  EXPECT_EQ(hex(keys::message(m32, 0x80000000u, m64)),
            fields("ffffffff 80000000 ffffffffffffffff"));
  EXPECT_EQ(hex(keys::message(0x01020304, 0x0a0b0c0d, 0x0102030405060708ull)),
            fields("01020304 0a0b0c0d 0102030405060708"));
  EXPECT_EQ(hex(keys::message(1, 0, m32)), fields("00000001 00000000 00000000ffffffff"));
  EXPECT_EQ(hex(keys::delivery(1, 2, m32, 1ull << 32)),
            fields("00000001 00000002 ffffffff 0000000100000000"));
  EXPECT_EQ(hex(keys::delivery(0x80000000u, 0, 1, m64)),
            fields("80000000 00000000 00000001 ffffffffffffffff"));
  EXPECT_EQ(hex(keys::delivery(0, 0, 0, 0)), std::string(40, '0'));
  EXPECT_EQ(hex(keys::cursor(0x01020304, 0x80000000u, m32)),
            fields("63 01020304 80000000 ffffffff"));
  EXPECT_EQ(hex(keys::partition_start(1, 0x01000000)), fields("73 00000001 01000000"));
  EXPECT_EQ(hex(keys::group(0x01020304, "g")), fields("67 01020304 67"));
  EXPECT_EQ(hex(keys::group_prefix(m32)), fields("67 ffffffff"));
  EXPECT_EQ(hex(keys::fence(1, 2)), fields("66 00000001 00000002"));
  EXPECT_EQ(hex(keys::outbox(0x0102030405060708ull)), fields("6f 0102030405060708"));
  EXPECT_EQ(hex(keys::outbox(m64)), fields("6f ffffffffffffffff"));
  EXPECT_EQ(hex(keys::outbox(0)), fields("6f 0000000000000000"));
  EXPECT_EQ(hex(keys::outbox_high_water(0x80000000u)), fields("77 80000000"));
  EXPECT_EQ(hex(keys::idem_key(1, 0x80000002u, "ten", "k")),
            fields("00000001 80000002 00000003 74656e 6b"));
  EXPECT_EQ(hex(keys::key_latest(m32, "", "k")), fields("ffffffff 00000000 00000000 6b"));
  EXPECT_EQ(hex(keys::key_history(1, 2, "", "k")), fields("00000001 80000002 00000000 6b"));
  EXPECT_EQ(hex(keys::dedup(7, "id")), fields("00000007 6964"));
  EXPECT_EQ(hex(keys::topic_begin(0xff)), "000000ff");
  EXPECT_EQ(hex(keys::topic_end(0xff)), "00000100");
  EXPECT_EQ(hex(keys::group_begin(1, m32)), fields("00000001 ffffffff"));
  EXPECT_EQ(hex(keys::group_end(1, m32)), "00000002");
  auto seq = keys::parse_outbox_seq(keys::outbox(m64));
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(*seq, m64);
  auto d = keys::parse_delivery(keys::delivery(m32, 0x80000000u, 1, m64));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->topic, m32);
  EXPECT_EQ(d->group, 0x80000000u);
  EXPECT_EQ(d->partition, 1u);
  EXPECT_EQ(d->offset, m64);
}

// The record values are persisted too: the exact bytes of each kind the
// drain writes (delivery, key, message) and of the others.
TEST(schema, records_exact_bytes) {
  delivery_record d{delivery_state::leased, "worker-1", 4, 1'700'000'030'000, -1, "boom"};
  d.fencing_token = 300;
  d.ended_at_ms = 1'700'000'040'000;
  // version 3, leased, owner, attempts, lease deadline, not before, last
  // error, fencing token, ended at.
  EXPECT_EQ(hex(encode(d)),
            fields("03 01 08776f726b65722d31 08 e0f4aefef962 01 04626f6f6d ac02 8091b0fef962"));
  EXPECT_EQ(hex(encode(delivery_record{})), fields("03 00 00 00 00 00 00 00 00"));

  key_record k;
  k.expires_at_ms = 1'700'604'800'000;
  k.state = key_state::committed;
  k.owner = "w";
  k.partition = 5;
  k.offset = 1ull << 40;
  k.attempts = 2;
  k.committed_at_ms = 1'700'000'000'000;
  k.result_json = R"({"ok":true})";
  k.fencing_token = 16384;
  k.produced.push_back(produced_ref{"next", 1, 127, true, false, true, 128});
  // expires at (fixed64), version 3, committed, owner, partition, offset,
  // attempts, committed at, result, fencing token; one produced: topic,
  // partition, offset, flags, outbox seq.
  EXPECT_EQ(hex(encode(k)), fields("00ecf1f38b010000 03 01 0177 05 808080808020 04 80a0abfef962 "
                                   "0b7b226f6b223a747275657d 808001 "
                                   "01 046e657874 01 7f 05 8001"));

  // version 1, produced at, deliver at, has key, key, value, envelope,
  // idempotency key, tenant, key ttl, max attempts, backoff, max backoff;
  // has dlq, its topic, partition, offset, attempts, last error, routed at.
  EXPECT_EQ(hex(encode(full_message())),
            fields("01 80a0abfef962 90eeabfef962 01 07757365722d3432 "
                   "0f7b2261223a317d0062696e617279ff 117b2276616c7565223a7b2261223a317d7d "
                   "086368617267652d31 0461636d65 00 0a c801 a09c01 "
                   "01 066f7264657273 03 94b4e4f4cb03 0a 0774696d656f7574 9ebcacfef962"));
  message_record m;
  m.produced_at_ms = 1'700'000'000'000;
  m.value = std::string(200, 'v');
  EXPECT_EQ(hex(encode(m)), fields("01 80a0abfef962 00 00 c801") + hex(m.value) +
                                fields("00 00 00 01 01 01 01 00"));

  EXPECT_EQ(hex(encode(dedup_record{1'700'000'120'000, 2, 77, 1'700'000'000'000})),
            fields("c03ce7cf8b010000 01 02 4d 80a0abfef962"));
  EXPECT_EQ(hex(encode(latest_record{9, 1, 2})), fields("0900000000000000 01 01 02"));
  EXPECT_EQ(hex(encode(group_record{3, 9, "billing"})), fields("01 03 09 0762696c6c696e67"));
  EXPECT_EQ(hex(encode_u64(~0ull)), fields("01 ffffffffffffffffff01"));
  outbox_record o;
  o.topic = "t";
  o.message = "{}";
  o.created_at_ms = 5;
  o.source_scope = "s";
  o.source_partition = 1;
  o.source_offset = 128;
  o.index = 2;
  EXPECT_EQ(hex(encode(o)), fields("01 0174 027b7d 0a 0173 01 8001 02"));
}

TEST(schema, parse_delivery_key) {
  auto r = keys::parse_delivery(keys::delivery(1, 2, 3, 1ull << 40));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->topic, 1u);
  EXPECT_EQ(r->group, 2u);
  EXPECT_EQ(r->partition, 3u);
  EXPECT_EQ(r->offset, 1ull << 40);
  EXPECT_FALSE(keys::parse_delivery(keys::message(1, 2, 3)).ok());
  EXPECT_FALSE(keys::parse_delivery("").ok());
}

TEST(schema, parse_cursor_key) {
  auto r = keys::parse_cursor(keys::cursor(0xdeadbeef, 2, 300));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->topic, 0xdeadbeefu);
  EXPECT_EQ(r->group, 2u);
  EXPECT_EQ(r->partition, 300u);
  EXPECT_FALSE(keys::parse_cursor(keys::partition_start(1, 2)).ok());
  std::string wrong_prefix = keys::cursor(1, 2, 3);
  wrong_prefix[0] = 'x';
  EXPECT_FALSE(keys::parse_cursor(wrong_prefix).ok());
}

TEST(schema, parse_message_offset) {
  auto r = keys::parse_message_offset(keys::message(4, 5, 256));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 256u);
  EXPECT_FALSE(keys::parse_message_offset("short").ok());
}

TEST(schema, parse_partition_start) {
  auto r = keys::parse_partition_start(keys::partition_start(4, 65'537));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 65'537u);
  EXPECT_FALSE(keys::parse_partition_start(keys::cursor(1, 2, 3)).ok());
}

}  // namespace
}  // namespace onceq::storage

namespace onceq::storage {
namespace {

TEST(schema_idempotency, topic_version_3_settings_round_trip) {
  topic_record t;
  t.name = "derived";
  t.settings.idempotency_key_fields = {"envelope.tenant_id", "value.order.id"};
  t.settings.idempotency_key_include_topic = true;
  t.settings.dedup_by_content = true;
  t.settings.key_conflict = 1;
  t.settings.key_history = true;
  auto r = decode_topic(encode(t));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->settings, t.settings);
  expect_rejects_truncations(encode(t), decode_topic);
}

TEST(schema_idempotency, tokens_round_trip_and_version_1_records_decode_with_token_0) {
  delivery_record d;
  d.state = delivery_state::leased;
  d.owner = "w";
  d.fencing_token = 1234567;
  auto rd = decode_delivery(encode(d));
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ(rd->fencing_token, 1234567u);
  expect_rejects_truncations(encode(d), decode_delivery);
  // Version 1: the same without the trailing token, version byte 1.
  d.fencing_token = 0;
  std::string v1 = encode(d);
  v1.pop_back();
  v1[0] = 1;
  auto old = decode_delivery(v1);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->fencing_token, 0u);
  EXPECT_EQ(old->owner, "w");

  key_record k;
  k.owner = "w";
  k.fencing_token = 9;
  auto rk = decode_key(encode(k));
  ASSERT_TRUE(rk.ok());
  EXPECT_EQ(rk->fencing_token, 9u);
  k.fencing_token = 0;
  std::string k1 = encode(k);
  k1.pop_back();
  k1[8] = 1;  // after the 8-byte expiry
  auto oldk = decode_key(k1);
  ASSERT_TRUE(oldk.ok());
  EXPECT_EQ(oldk->owner, "w");
}

TEST(schema_idempotency, history_and_latest_round_trip_and_stay_out_of_idem_keys) {
  history_record h;
  h.expires_at_ms = 77;
  h.events.push_back(history_event{.kind = history_kind::committed,
                                   .at_ms = 5,
                                   .owner = "w",
                                   .partition = 1,
                                   .offset = 2,
                                   .attempts = 3,
                                   .fencing_token = 4,
                                   .reason = "r",
                                   .result_bytes = 6});
  auto rh = decode_history(encode(h));
  ASSERT_TRUE(rh.ok());
  ASSERT_EQ(rh->events.size(), 1u);
  EXPECT_EQ(rh->events[0].result_bytes, 6u);
  EXPECT_EQ(expires_at_of(encode(h)), 77);
  expect_rejects_truncations(encode(h), decode_history);
  auto rl = decode_latest(encode(latest_record{9, 1, 2}));
  ASSERT_TRUE(rl.ok());
  EXPECT_EQ(rl->offset, 2u);
  const auto idem = keys::idem_key(3, 1, "t", "k");
  EXPECT_EQ(keys::history_of(idem), keys::key_history(3, 1, "t", "k"));
  EXPECT_EQ(keys::latest_of(idem), keys::key_latest(3, "t", "k"));
  EXPECT_NE(keys::history_of(idem), idem);
  EXPECT_NE(keys::latest_of(idem), idem);
}

}  // namespace
}  // namespace onceq::storage

namespace onceq::storage {
namespace {

TEST(schema_replay, window_and_end_times_round_trip_and_older_records_decode_with_0) {
  topic_record t;
  t.name = "kept";
  t.settings.key_history = true;
  t.settings.replay_window_ms = 86'400'000;
  auto rt = decode_topic(encode(t));
  ASSERT_TRUE(rt.ok()) << rt.err().message;
  EXPECT_EQ(rt->settings, t.settings);
  expect_rejects_truncations(encode(t), decode_topic);
  // Version 3: the same without the trailing window.
  t.settings.replay_window_ms = 0;
  std::string v3 = encode(t);
  v3.pop_back();
  v3[0] = 3;
  auto old = decode_topic(v3);
  ASSERT_TRUE(old.ok()) << old.err().message;
  EXPECT_EQ(old->settings.replay_window_ms, 0);
  EXPECT_TRUE(old->settings.key_history);

  delivery_record d;
  d.state = delivery_state::acked;
  d.owner = "w";
  d.fencing_token = 7;
  d.ended_at_ms = 1'700'000'000'123;
  auto rd = decode_delivery(encode(d));
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ(rd->ended_at_ms, 1'700'000'000'123);
  EXPECT_EQ(rd->fencing_token, 7u);
  expect_rejects_truncations(encode(d), decode_delivery);
  // Version 2: the same without the trailing end time.
  d.ended_at_ms = 0;
  std::string v2 = encode(d);
  v2.pop_back();
  v2[0] = 2;
  auto oldd = decode_delivery(v2);
  ASSERT_TRUE(oldd.ok());
  EXPECT_EQ(oldd->ended_at_ms, 0);
  EXPECT_EQ(oldd->fencing_token, 7u);
}

}  // namespace
}  // namespace onceq::storage
