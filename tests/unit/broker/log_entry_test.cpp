#include "broker/log_entry.hpp"

#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "broker/dispatch.hpp"

namespace onceq {
namespace {

// A produce with every field away from its default.
produce_cmd full_produce() {
  message_in m;
  m.key = "customer-42";
  m.value = std::string("v\0al", 4);  // bytes, not text
  m.envelope_json = R"({"idempotency_key":"charge:7"})";
  m.idempotency_key = "charge:7";
  m.tenant_id = "acme";
  m.msg_id = "m-1";
  m.partition_override = 3;
  m.key_ttl_ms = 60'000;
  m.delay_ms = 250;
  m.deadline_ms = 1'732'000'000'000;
  m.retry = retry_policy{5, 100, 10'000};
  message_in bare;
  bare.value = "second";
  produce_cmd c;
  c.topic = "orders";
  c.messages = {m, bare};
  c.idempotency_header = "hdr";
  c.skip_if_committed = {"billing", "audit"};
  return c;
}

create_topic_cmd full_create() {
  create_topic_cmd c;
  c.name = "orders";
  c.partitions = 8;
  c.settings.lease_ms = 1234;
  c.settings.max_attempts = 7;
  c.settings.backoff_ms = 10;
  c.settings.max_backoff_ms = 20;
  c.settings.key_ttl_ms = 0;
  c.settings.dedup_window_ms = 5;
  c.settings.retention_ms = 6;
  c.settings.max_backlog_messages = 100;
  c.settings.max_backlog_bytes = 200;
  c.settings.max_inflight = 3;
  c.settings.idempotency_key_fields = {"envelope.order_id", "value.customer"};
  c.settings.idempotency_key_include_topic = true;
  c.settings.idempotency_key_optional = true;
  c.settings.dedup_by_content = true;
  c.settings.key_conflict = topic_settings::conflict::supersede;
  c.settings.key_history = true;
  c.settings.replay_window_ms = 3'600'000;
  return c;
}

delivery_ref full_ref() {
  return delivery_ref{"orders", "billing", "worker-1", 2, 99, 4, 17};
}

// One entry of every command, each with fields set.
std::vector<log_entry> every_command() {
  consume_cmd consume{"orders", "billing", "worker-1", 5000, 100, 1'732'000'001'000};
  ack_batch_cmd acks{"orders",
                     "billing",
                     "worker-1",
                     {{1, 2, 3, R"({"ok":true})", 9, {}}, {4, 5, {}, "", {}, {}}}};
  replay_cmd replay;
  replay.topic = "orders";
  replay.group = "billing";
  replay.from_ms = 10;
  replay.to_ms = 20;
  replay.partition = 1;
  replay.dry_run = false;
  replay.max_messages = 50;
  replay.cursor = replay_position{1, 77};
  std::vector<log_entry> out;
  const log_command cmds[] = {
      tick_cmd{},
      full_create(),
      delete_topic_cmd{"orders"},
      full_produce(),
      consume,
      consume_after_acks_cmd{acks, consume},
      ack_cmd{full_ref(), R"({"charged":12})", {}},
      acks,
      nack_cmd{full_ref(), "card declined", 500},
      extend_cmd{full_ref(), 30'000},
      redrive_cmd{"orders", 10},
      replay,
  };
  millis now = 1'732'000'000'000;
  for (const auto& c : cmds) out.push_back(log_entry{now++, c});
  return out;
}

TEST(LogEntry, EveryCommandRoundTrips) {
  for (const auto& e : every_command()) {
    const std::string bytes = encode_entry(e);
    auto back = decode_entry(bytes);
    ASSERT_TRUE(back.ok()) << static_cast<int>(tag_of(e.cmd)) << ": " << back.err().message;
    EXPECT_EQ(back->now_ms, e.now_ms);
    EXPECT_EQ(back->cmd.index(), e.cmd.index());
    EXPECT_EQ(tag_of(back->cmd), tag_of(e.cmd));
    // Whatever encode wrote, decode read back: the same bytes again.
    EXPECT_EQ(encode_entry(*back), bytes) << static_cast<int>(tag_of(e.cmd));
  }
}

TEST(LogEntry, AProduceKeepsEveryField) {
  auto back = decode_entry(encode_entry(log_entry{42, full_produce()}));
  ASSERT_TRUE(back.ok()) << back.err().message;
  const auto& c = std::get<produce_cmd>(back->cmd);
  EXPECT_EQ(c.topic, "orders");
  EXPECT_EQ(c.idempotency_header, "hdr");
  EXPECT_EQ(c.skip_if_committed, (std::vector<std::string>{"billing", "audit"}));
  ASSERT_EQ(c.messages.size(), 2u);
  const auto& m = c.messages[0];
  EXPECT_EQ(m.key, "customer-42");
  EXPECT_EQ(m.value, std::string("v\0al", 4));
  EXPECT_EQ(m.envelope_json, R"({"idempotency_key":"charge:7"})");
  EXPECT_EQ(m.idempotency_key, "charge:7");
  EXPECT_EQ(m.tenant_id, "acme");
  EXPECT_EQ(m.msg_id, "m-1");
  EXPECT_EQ(m.partition_override, 3);
  EXPECT_EQ(m.key_ttl_ms, 60'000);
  EXPECT_EQ(m.delay_ms, 250);
  EXPECT_EQ(m.deadline_ms, 1'732'000'000'000);
  EXPECT_EQ(m.retry.max_attempts, 5);
  EXPECT_EQ(m.retry.backoff_ms, 100);
  EXPECT_EQ(m.retry.max_backoff_ms, 10'000);
  const auto& bare = c.messages[1];
  EXPECT_FALSE(bare.key.has_value());
  EXPECT_FALSE(bare.partition_override.has_value());
  EXPECT_FALSE(bare.retry.max_attempts.has_value());
  EXPECT_EQ(bare.value, "second");
}

TEST(LogEntry, TopicSettingsKeepEveryField) {
  auto back = decode_entry(encode_entry(log_entry{1, full_create()}));
  ASSERT_TRUE(back.ok()) << back.err().message;
  const auto& c = std::get<create_topic_cmd>(back->cmd);
  EXPECT_EQ(c.name, "orders");
  EXPECT_EQ(c.partitions, 8);
  EXPECT_EQ(c.settings, full_create().settings);
}

TEST(LogEntry, AFencedAckKeepsItsFences) {
  auto back = decode_entry(encode_entry(log_entry{1, ack_cmd{full_ref(), "r", {}}}));
  ASSERT_TRUE(back.ok()) << back.err().message;
  const auto& a = std::get<ack_cmd>(back->cmd);
  EXPECT_EQ(a.ref.owner, "worker-1");
  EXPECT_EQ(a.ref.partition, 2u);
  EXPECT_EQ(a.ref.offset, 99u);
  EXPECT_EQ(a.ref.attempts, 4);
  EXPECT_EQ(a.ref.fencing_token, 17u);
  EXPECT_EQ(a.result_json, "r");
}

// The format is forever: these bytes must decode the same in every later
// build (a change here is a new k_log_entry_version, not an edit).
TEST(LogEntry, TheFormatIsFixed) {
  EXPECT_EQ(encode_entry(log_entry{5, tick_cmd{}}), std::string("\x02\x01\x0a", 3));
  EXPECT_EQ(encode_entry(log_entry{-1, delete_topic_cmd{"t"}}),
            std::string("\x02\x03\x01\x01t", 5));
  const std::string ack_bytes =
      std::string("\x01\x07\x02", 3) +             // format 1, ack, now 1
      std::string("\x01t\x01g\x01o\x02\x03", 8) +  // topic, group, owner, partition 2, offset 3
      std::string("\x01\x08\x00", 3) +             // attempts 4, no fencing token
      std::string("\x02{}", 3);                    // result "{}"
  auto back = decode_entry(ack_bytes);
  ASSERT_TRUE(back.ok()) << back.err().message;
  const auto& a = std::get<ack_cmd>(back->cmd);
  EXPECT_EQ(back->now_ms, 1);
  EXPECT_EQ(a.ref.topic, "t");
  EXPECT_EQ(a.ref.group, "g");
  EXPECT_EQ(a.ref.owner, "o");
  EXPECT_EQ(a.ref.partition, 2u);
  EXPECT_EQ(a.ref.offset, 3u);
  EXPECT_EQ(a.ref.attempts, 4);
  EXPECT_FALSE(a.ref.fencing_token.has_value());
  EXPECT_EQ(a.result_json, "{}");
  EXPECT_TRUE(a.produce.empty());
  // Written again in format 2: the same fields, then the (empty) produce list.
  const std::string v2 = std::string("\x02", 1) + ack_bytes.substr(1) + std::string("\x00", 1);
  EXPECT_EQ(encode_entry(*back), v2);
  // Format 2 with a produce list: topic, then the message's fields.
  ack_cmd with = a;
  with.produce.push_back(step_message{"n", message_in{}});
  with.produce.back().message.value = "v";
  auto again = decode_entry(encode_entry(log_entry{1, with}));
  ASSERT_TRUE(again.ok()) << again.err().message;
  const auto& b = std::get<ack_cmd>(again->cmd);
  ASSERT_EQ(b.produce.size(), 1u);
  EXPECT_EQ(b.produce[0].topic, "n");
  EXPECT_EQ(b.produce[0].message.value, "v");
}

TEST(LogEntry, EveryTruncationIsRefusedAsCorrupt) {
  for (const auto& e : every_command()) {
    const std::string bytes = encode_entry(e);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      auto r = decode_entry(std::string_view(bytes).substr(0, n));
      ASSERT_FALSE(r.ok()) << "tag " << static_cast<int>(tag_of(e.cmd)) << " cut at " << n;
      EXPECT_EQ(r.err().code, errc::internal);
    }
  }
}

TEST(LogEntry, TrailingBytesAreRefused) {
  auto r = decode_entry(encode_entry(log_entry{1, tick_cmd{}}) + "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::internal);
}

TEST(LogEntry, AnUnknownVersionOrCommandAsksForAnUpgrade) {
  auto future = decode_entry(std::string("\x03\x01\x00", 3));
  ASSERT_FALSE(future.ok());
  EXPECT_EQ(future.err().code, errc::failed_precondition);
  EXPECT_NE(future.err().message.find("upgrade"), std::string::npos);
  auto unknown = decode_entry(std::string("\x01\x7f\x00", 3));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.err().code, errc::failed_precondition);
}

TEST(LogEntry, ValuesOutOfRangeAreRefused) {
  // A bool that is neither 0 nor 1 (replay's dry_run).
  replay_cmd r;
  r.topic = "t";
  r.group = "g";
  std::string bytes = encode_entry(log_entry{0, r});
  // topic, group, five absent optionals, then dry_run.
  const std::size_t dry_run_at = 3 + 2 + 2 + 5;
  ASSERT_EQ(bytes[dry_run_at], '\x01');
  bytes[dry_run_at] = '\x02';
  auto bad_bool = decode_entry(bytes);
  ASSERT_FALSE(bad_bool.ok());
  EXPECT_EQ(bad_bool.err().code, errc::internal);

  // A partition past 32 bits.
  std::string ack =
      encode_entry(log_entry{0, ack_cmd{delivery_ref{"t", "g", "o", 1, 2, {}, {}}, "", {}}});
  const std::size_t partition_at = 3 + 6;
  ASSERT_EQ(ack[partition_at], '\x01');
  std::string wide = ack.substr(0, partition_at) + std::string("\x80\x80\x80\x80\x10", 5) +
                     ack.substr(partition_at + 1);
  auto too_wide = decode_entry(wide);
  ASSERT_FALSE(too_wide.ok());
  EXPECT_EQ(too_wide.err().code, errc::internal);

  // A key conflict policy that does not exist.
  std::string create = encode_entry(log_entry{0, create_topic_cmd{"t", 1, {}}});
  std::string flipped = create;
  bool changed = false;
  // The policy byte follows the settings' three bools; find it by
  // encoding the other policy and diffing.
  create_topic_cmd other{"t", 1, {}};
  other.settings.key_conflict = topic_settings::conflict::supersede;
  const std::string other_bytes = encode_entry(log_entry{0, other});
  ASSERT_EQ(other_bytes.size(), create.size());
  for (std::size_t i = 0; i < create.size(); ++i) {
    if (create[i] != other_bytes[i]) {
      flipped[i] = '\x09';
      changed = true;
    }
  }
  ASSERT_TRUE(changed);
  auto bad_enum = decode_entry(flipped);
  ASSERT_FALSE(bad_enum.ok());
  EXPECT_EQ(bad_enum.err().code, errc::internal);
}

TEST(LogEntry, AHugeCountIsRefusedWithoutAllocating) {
  // produce: topic "t", then a message count of 2^40.
  std::string bytes =
      std::string("\x01\x04\x00\x01t", 5) + std::string("\x80\x80\x80\x80\x80\x20", 6);
  auto r = decode_entry(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::internal);
}

// The command table's replies (broker/dispatch.hpp): every entry's answer
// is one alternative of log_reply, taken back out by its type.
TEST(LogReply, ExtendAndRedriveAreToldApartByTypeThoughBothCarryIntegers) {
  static_assert(std::is_same_v<command_traits<extend_cmd>::reply, lease_extended>);
  static_assert(std::is_same_v<command_traits<redrive_cmd>::reply, redriven>);
  EXPECT_EQ(reply_as<lease_extended>(log_reply{lease_extended{1234}})->lease_expires_at_ms, 1234);
  EXPECT_EQ(reply_as<redriven>(log_reply{redriven{7}})->moved, 7);
  EXPECT_TRUE(reply_as<void>(log_reply{std::monostate{}}).ok());
  // Another command's reply is a bug, said so, never converted.
  auto wrong = reply_as<redriven>(log_reply{lease_extended{1234}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.code(), errc::internal);
  auto not_void = reply_as<produce_reply>(log_reply{std::monostate{}});
  ASSERT_FALSE(not_void.ok());
  EXPECT_EQ(not_void.code(), errc::internal);
  // An error stays the error.
  auto failed = reply_as<lease_extended>(result<log_reply>(make_error(errc::not_found, "gone")));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), errc::not_found);
}

TEST(LogReply, WhatWritesIsExactlyWhatTheLogCarries) {
  static_assert(writes<produce_cmd> && writes<consume_after_acks_cmd> && writes<tick_cmd>);
  static_assert(!writes<key_query>);
}

}  // namespace
}  // namespace onceq
