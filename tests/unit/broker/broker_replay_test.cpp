// The core is a deterministic state machine: one recorded command log,
// replayed on two fresh cores with the same clock readings, gives the same
// answers, the same in-memory state and the same stored bytes. This is what
// replicating the command log needs (docs/REPLICATION.md).

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>
#include <regex>
#include <sstream>
#include <variant>

#include "broker/apply.hpp"
#include "broker/broker.hpp"
#include "broker/log_entry.hpp"
#include "storage/applied_index_store.hpp"
#include "storage/memory_store.hpp"
#include "storage/schema.hpp"

namespace onceq::testing {
namespace {

using command =
    std::variant<create_topic_cmd, produce_cmd, consume_cmd, ack_batch_cmd, nack_cmd, extend_cmd,
                 key_query, redrive_cmd, tick_cmd, outbox_append_cmd, outbox_done_cmd>;
struct entry {
  millis at;  // the clock reading the command runs at
  command cmd;
};

// A seeded log over two topics and two groups: produces with keys (some
// sharing an idempotency key, some retried with the same msg_id), consumes
// with short leases, acks and nacks of what was delivered (some stale),
// extends, key reads, redrives and ticks as time moves on.
std::vector<entry> record_log(std::uint32_t seed, std::size_t n) {
  std::mt19937 rng(seed);
  auto pick = [&](int k) { return static_cast<int>(rng() % static_cast<unsigned>(k)); };
  std::vector<entry> log;
  millis now = 1'700'000'000'000;
  topic_settings s;
  s.max_attempts = 3;
  s.lease_ms = 500;
  // a delivers each message key in order (ordering "key").
  s.ordering = topic_settings::ordering_mode::key;
  log.push_back({now, create_topic_cmd{"a", 3, s}});
  std::uint64_t outbox_in = 0;  // the last seq an outside source sent
  // b keeps key histories and supersedes waiting messages: the new paths
  // must be as deterministic as the old ones.
  topic_settings sb;
  sb.key_history = true;
  sb.key_conflict = topic_settings::conflict::supersede;
  log.push_back({now, create_topic_cmd{"b", 1, sb}});
  for (std::size_t i = 0; i < n; ++i) {
    now += pick(200);
    std::string topic = pick(4) == 0 ? "b" : "a";
    std::string group = pick(2) == 0 ? "g1" : "g2";
    std::string owner = fmt::format("w{}", pick(3));
    switch (pick(11)) {
      case 0:
      case 1: {
        produce_cmd p{topic, {}, {}, {}};
        if (pick(4) == 0) p.skip_if_committed = {group};
        for (int m = 0, count = 1 + pick(3); m < count; ++m) {
          message_in msg;
          msg.value = fmt::format("v{}", i);
          msg.key = fmt::format("c{}", pick(5));
          if (pick(2)) msg.idempotency_key = fmt::format("k{}", pick(20));
          if (pick(3) == 0) msg.msg_id = fmt::format("m{}", pick(30));
          p.messages.push_back(msg);
        }
        log.push_back({now, p});
        break;
      }
      case 2:
      case 3:
        log.push_back({now, consume_cmd{topic, group, owner, 100 + pick(900), 1 + pick(4), {}}});
        break;
      case 4:
      case 9: {
        // Workflow steps: some acks produce into the other topic (same
        // core) and into "x" (another shard's: the outbox).
        ack_batch_cmd a{topic, group, owner, {}};
        for (int k = 0, count = 1 + pick(3); k < count; ++k) {
          ack_item item{static_cast<std::uint32_t>(pick(topic == "a" ? 3 : 1)),
                        static_cast<std::uint64_t>(pick(15)),
                        std::nullopt,
                        pick(2) ? R"({"ok":true})" : "",
                        {},
                        {}};
          for (int m = 0, count2 = pick(3); m < count2; ++m) {
            step_message sm;
            sm.topic = pick(3) == 0 ? "x" : (topic == "a" ? "b" : "a");
            sm.message.value = fmt::format("step{}", i);
            sm.message.key = fmt::format("c{}", pick(5));
            if (pick(3) == 0) sm.message.msg_id = fmt::format("s{}", pick(30));
            item.produce.push_back(std::move(sm));
          }
          a.acks.push_back(std::move(item));
        }
        log.push_back({now, a});
        break;
      }
      case 10: {
        // Another shard's outbox, sometimes resending what it sent before;
        // and this core's outbox taken by its target.
        outbox_append_cmd o{7, {}};
        std::uint64_t seq = pick(4) == 0 && outbox_in > 2 ? outbox_in - 2 : outbox_in;
        for (int k = 0, count = 1 + pick(3); k < count; ++k) {
          step_message sm;
          sm.topic = pick(2) ? "a" : "b";
          sm.message.value = fmt::format("in{}", i);
          o.entries.push_back(outbox_entry{++seq, sm, now});
        }
        outbox_in = std::max(outbox_in, seq);
        log.push_back({now, o});
        outbox_appended done;
        done.seq = 1 + static_cast<std::uint64_t>(pick(20));
        done.stored = true;
        done.offset = static_cast<std::uint64_t>(pick(100));
        log.push_back({now, outbox_done_cmd{{done}}});
        break;
      }
      case 5:
        log.push_back({now, nack_cmd{{topic, group, owner, 0, static_cast<std::uint64_t>(pick(15)),
                                      std::nullopt, std::nullopt},
                                     "boom",
                                     pick(2) ? std::optional<std::int64_t>(50) : std::nullopt}});
        break;
      case 6:
        log.push_back(
            {now,
             extend_cmd{{topic, group, owner, 0, static_cast<std::uint64_t>(pick(15)), std::nullopt,
                         pick(2) ? std::optional<std::uint64_t>(pick(30) + 1) : std::nullopt},
                        300}});
        break;
      case 7:
        log.push_back({now, key_query{topic, group, fmt::format("k{}", pick(20)), ""}});
        break;
      default:
        if (pick(10) == 0) log.push_back({now, redrive_cmd{"a", std::nullopt}});
        log.push_back({now, tick_cmd{}});
        break;
    }
  }
  return log;
}

std::string code_str(errc c) {
  return std::string(to_string(c));
}

// Applies the log and returns every answer as text.
std::string replay(broker& b, manual_clock& clock, const std::vector<entry>& log) {
  std::string answers;
  for (const auto& e : log) {
    clock.set(e.at);
    std::visit(
        [&](const auto& c) {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, create_topic_cmd>) {
            answers += code_str(b.create_topic(c).code());
          } else if constexpr (std::is_same_v<T, produce_cmd>) {
            auto r = b.produce(c);
            answers += code_str(r.code());
            if (r.ok())
              for (auto& p : r->results)
                answers += fmt::format(" {}/{}/{}", p.partition, p.offset, p.duplicate);
            if (r.ok()) answers += fmt::format(" committed={}", r->already_committed.size());
          } else if constexpr (std::is_same_v<T, consume_cmd>) {
            auto r = b.consume(c);
            answers += code_str(r.code());
            if (r.ok())
              for (auto& d : *r)
                answers += fmt::format(" {}/{}#{}@{}^{}", d.partition, d.offset, d.attempts,
                                       d.lease_expires_at_ms, d.fencing_token);
          } else if constexpr (std::is_same_v<T, ack_batch_cmd>) {
            auto r = b.ack_batch(c);
            answers += code_str(r.code());
            if (r.ok())
              for (auto& o : *r) {
                answers += " " + code_str(o.code);
                if (o.produced)
                  for (auto& p : *o.produced)
                    answers +=
                        fmt::format(" >{}/{}/{}/{}", p.topic, p.offset, p.pending, p.outbox_seq);
              }
          } else if constexpr (std::is_same_v<T, nack_cmd>) {
            answers += code_str(b.nack(c).code());
          } else if constexpr (std::is_same_v<T, extend_cmd>) {
            auto r = b.extend(c);
            answers += code_str(r.code());
            if (r.ok()) answers += fmt::format(" {}", *r);
          } else if constexpr (std::is_same_v<T, key_query>) {
            auto r = b.get_key(c);
            answers += code_str(r.code());
            if (r.ok())
              answers += fmt::format(" {} {} {}", static_cast<int>(r->st), r->owner, r->offset);
          } else if constexpr (std::is_same_v<T, redrive_cmd>) {
            auto r = b.redrive(c);
            answers += code_str(r.code());
            if (r.ok()) answers += fmt::format(" {}", *r);
          } else if constexpr (std::is_same_v<T, outbox_append_cmd>) {
            auto r = b.outbox_append(c);
            answers += code_str(r.code());
            if (r.ok())
              for (auto& a : *r)
                answers += fmt::format(" {}:{}/{}/{}", a.seq, code_str(a.code), a.stored, a.offset);
          } else if constexpr (std::is_same_v<T, outbox_done_cmd>) {
            answers += code_str(b.outbox_done(c).code());
          } else {
            b.tick();
            answers += "tick";
          }
        },
        e.cmd);
    answers += '\n';
  }
  return answers;
}

std::string dump(storage::memory_store& s) {
  std::string out;
  const std::string end(16, '\xff');
  for (int c = 0; c < storage::k_column_count; ++c) {
    auto r = s.scan(static_cast<storage::column>(c), "", end, [&](auto k, auto v) {
      out += fmt::format("{} {} {}\n", c, k.size(), v.size());
      out.append(k);
      out.append(v);
      return true;
    });
    EXPECT_TRUE(r.ok());
  }
  return out;
}

TEST(BrokerReplay, OneCommandLogGivesTheSameStateOnTwoCores) {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    auto log = record_log(seed, 1500);
    manual_clock c1, c2;
    storage::memory_store s1, s2;
    broker b1(s1, c1, nullptr), b2(s2, c2, nullptr);
    ASSERT_TRUE(b1.recover().ok());
    ASSERT_TRUE(b2.recover().ok());
    auto a1 = replay(b1, c1, log);
    auto a2 = replay(b2, c2, log);
    EXPECT_EQ(a1, a2) << "seed " << seed;
    EXPECT_EQ(b1.describe_state(), b2.describe_state()) << "seed " << seed;
    EXPECT_EQ(dump(s1), dump(s2)) << "seed " << seed;
    // The log did real work, so the comparison means something.
    EXPECT_NE(a1.find("OK 0/"), std::string::npos);
    // Steps were produced on this core and into the outbox, and taken in.
    EXPECT_NE(a1.find(" >a/"), std::string::npos);
    EXPECT_NE(a1.find(" >x/"), std::string::npos);
    EXPECT_NE(a1.find(":OK/true/"), std::string::npos);
    // Steps were produced on this core and into the outbox, and taken in.
    EXPECT_NE(a1.find(" >a/"), std::string::npos);
    EXPECT_NE(a1.find(" >x/"), std::string::npos);
    EXPECT_NE(a1.find(":OK/true/"), std::string::npos);
    EXPECT_GT(s1.count(storage::column::keys), 0u);
    EXPECT_GT(s1.count(storage::column::deliveries), 0u);
  }
}

// A log_reply as text, for comparing replicas.
std::string render(const result<log_reply>& r) {
  if (!r.ok()) return code_str(r.code());
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        std::string out = "OK";
        if constexpr (std::is_same_v<T, produce_reply>) {
          for (auto& p : v.results)
            out += fmt::format(" {}/{}/{}", p.partition, p.offset, p.duplicate);
          out += fmt::format(" committed={}", v.already_committed.size());
        } else if constexpr (std::is_same_v<T, std::vector<delivery>>) {
          for (auto& d : v)
            out += fmt::format(" {}/{}#{}@{}^{}", d.partition, d.offset, d.attempts,
                               d.lease_expires_at_ms, d.fencing_token);
        } else if constexpr (std::is_same_v<T, std::vector<ack_outcome>>) {
          for (auto& o : v) {
            out += " " + code_str(o.code);
            if (o.produced)
              for (auto& p : *o.produced)
                out += fmt::format(" >{}/{}/{}/{}", p.topic, p.offset, p.pending, p.outbox_seq);
          }
        } else if constexpr (std::is_same_v<T, std::vector<outbox_appended>>) {
          for (auto& a : v)
            out += fmt::format(" {}:{}/{}/{}", a.seq, code_str(a.code), a.stored, a.offset);
        } else if constexpr (std::is_same_v<T, lease_extended>) {
          out += fmt::format(" {}", v.lease_expires_at_ms);
        } else if constexpr (std::is_same_v<T, redriven>) {
          out += fmt::format(" {}", v.moved);
        }
        return out;
      },
      *r);
}

// The recorded log as replicated entries: each command stamped with the
// reading it ran at; reads (key_query) are not entries and are left out.
// skew: every seventh entry is stamped up to that much earlier than the one
// before it, as by a new leader whose clock is behind.
std::vector<std::string> as_entries(const std::vector<entry>& log, millis skew) {
  std::vector<std::string> out;
  std::size_t i = 0;
  for (const auto& e : log) {
    if (std::holds_alternative<key_query>(e.cmd)) continue;
    const millis at = skew > 0 && ++i % 7 == 0 ? e.at - skew : e.at;
    log_command cmd = std::visit(
        [](const auto& c) -> log_command {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, key_query>) {
            return onceq::tick_cmd{};  // unreachable: skipped above
          } else {
            return c;
          }
        },
        e.cmd);
    out.push_back(encode_entry(log_entry{at, std::move(cmd)}));
  }
  return out;
}

// What a replica does: decode each entry and apply it at its stamp.
std::string apply_all(broker& b, log_clock& time, const std::vector<std::string>& entries) {
  std::string answers;
  millis last = 0;
  for (const auto& bytes : entries) {
    auto e = decode_entry(bytes);
    EXPECT_TRUE(e.ok()) << e.err().message;
    if (!e.ok()) break;
    answers += render(apply_entry(b, time, *e));
    answers += fmt::format(" t={}\n", time.now_ms());
    EXPECT_GE(time.now_ms(), last);  // time never runs backwards
    last = time.now_ms();
  }
  return answers;
}

// The replicated path: the log encoded as entries with stamped time and
// ticks, decoded and applied on two replicas, gives the same answers, the
// same state and the same stored bytes, also when stamps go backwards
// (a leader change to a node whose clock is behind).
TEST(BrokerReplay, ReplicatedEntriesWithStampedTimeGiveTheSameStateOnTwoReplicas) {
  for (millis skew : {millis{0}, millis{700}}) {
    for (std::uint32_t seed : {4u, 5u}) {
      const auto entries = as_entries(record_log(seed, 1200), skew);
      log_clock c1, c2;
      storage::memory_store s1, s2;
      broker b1(s1, c1, nullptr), b2(s2, c2, nullptr);
      ASSERT_TRUE(b1.recover().ok());
      ASSERT_TRUE(b2.recover().ok());
      const auto a1 = apply_all(b1, c1, entries);
      const auto a2 = apply_all(b2, c2, entries);
      EXPECT_EQ(a1, a2) << "seed " << seed << " skew " << skew;
      EXPECT_EQ(b1.describe_state(), b2.describe_state()) << "seed " << seed;
      EXPECT_EQ(dump(s1), dump(s2)) << "seed " << seed;
      EXPECT_NE(a1.find("OK 0/"), std::string::npos);
      // Steps were produced on this core and into the outbox, and taken in.
      EXPECT_NE(a1.find(" >a/"), std::string::npos);
      EXPECT_NE(a1.find(" >x/"), std::string::npos);
      EXPECT_NE(a1.find(":OK/true/"), std::string::npos);
      EXPECT_GT(s1.count(storage::column::deliveries), 0u);
    }
  }
}

// Applying entries is running the broker's own calls: the same log run
// directly (at the same readings) and through apply_entry ends in the same
// state.
TEST(BrokerReplay, ApplyingEntriesIsRunningTheBrokersCalls) {
  auto log = record_log(6, 800);
  std::erase_if(log, [](const entry& e) { return std::holds_alternative<key_query>(e.cmd); });
  manual_clock direct_clock;
  log_clock replica_clock;
  storage::memory_store s1, s2;
  broker direct(s1, direct_clock, nullptr), replica(s2, replica_clock, nullptr);
  ASSERT_TRUE(direct.recover().ok());
  ASSERT_TRUE(replica.recover().ok());
  replay(direct, direct_clock, log);
  apply_all(replica, replica_clock, as_entries(log, 0));
  EXPECT_EQ(direct.describe_state(), replica.describe_state());
  EXPECT_EQ(dump(s1), dump(s2));
}

TEST(BrokerReplay, ConsumeAfterAcksAcksFirstAndARefusedBatchConsumesNothing) {
  log_clock time(1'700'000'000'000);
  storage::memory_store s;
  broker b(s, time, nullptr);
  ASSERT_TRUE(b.recover().ok());
  auto apply = [&](log_command c) { return apply_entry(b, time, log_entry{time.now_ms() + 1, c}); };
  ASSERT_TRUE(apply(create_topic_cmd{"t", 1, {}}).ok());
  produce_cmd p{"t", {}, {}, {}};
  p.messages.resize(2);
  p.messages[0].value = "one";
  p.messages[1].value = "two";
  ASSERT_TRUE(apply(p).ok());
  auto first = apply(consume_cmd{"t", "g", "w", 1000, 1, {}});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(std::get<std::vector<delivery>>(*first).size(), 1u);
  // The ack of the first and the consume of the second, in one entry.
  auto both = apply(consume_after_acks_cmd{ack_batch_cmd{"t", "g", "w", {{0, 0, {}, "", {}, {}}}},
                                           consume_cmd{"t", "g", "w", 1000, 5, {}}});
  ASSERT_TRUE(both.ok()) << both.err().message;
  const auto& r = std::get<consume_after_acks_reply>(*both);
  ASSERT_EQ(r.acks.size(), 1u);
  EXPECT_EQ(r.acks[0].code, errc::ok);
  ASSERT_EQ(r.deliveries.size(), 1u);
  EXPECT_EQ(r.deliveries[0].offset, 1u);
  // Acks for a topic that does not exist: refused whole, nothing leased.
  auto refused =
      apply(consume_after_acks_cmd{ack_batch_cmd{"nope", "g", "w", {{0, 1, {}, "", {}, {}}}},
                                   consume_cmd{"t", "g", "w2", 1000, 5, {}}});
  ASSERT_FALSE(refused.ok());
  auto still = apply(consume_cmd{"t", "g", "w3", 1000, 5, {}});
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(std::get<std::vector<delivery>>(*still).empty());  // offset 1 is still w's
}

// What a replica does across a crash: its store records the position of
// every entry that wrote; after a restart it resumes its clock from there,
// skips the entries its store holds and applies the rest (as raft replays
// its log from the last snapshot). It ends where a replica that never
// stopped ends, stamps going backwards included.
TEST(BrokerReplay, ARestartedReplicaSkipsWhatItsStoreHoldsAndAppliesTheRest) {
  const auto entries = as_entries(record_log(7, 900), 700);
  auto apply_range = [&](broker& b, log_clock& time, storage::applied_index_store& s,
                         std::size_t from, std::size_t to) {
    std::size_t skipped = 0;
    for (std::size_t i = from; i < to; ++i) {
      auto e = decode_entry(entries[i]);
      EXPECT_TRUE(e.ok());
      auto r = apply_at(b, time, s, i + 1, *e);  // raft's indexes start at 1
      if (r.ok() && !r->has_value()) ++skipped;
    }
    return skipped;
  };

  storage::memory_store ref_mem;
  storage::applied_index_store ref_store(ref_mem);
  log_clock ref_time;
  broker ref(ref_store, ref_time, nullptr);
  ASSERT_TRUE(ref.recover().ok());
  ASSERT_TRUE(ref_store.load().ok());
  EXPECT_EQ(apply_range(ref, ref_time, ref_store, 0, entries.size()), 0u);
  // Counters since start (a group's stats line, a topic's produced, dups
  // and committed) are not state: a restart resets them.
  auto state_of = [](const broker& b) {
    static const std::regex counters(R"( produced=\d+ dups=\d+ committed=\d+)");
    std::string out;
    std::istringstream in(b.describe_state());
    for (std::string line; std::getline(in, line);) {
      if (line.find("stats ") == std::string::npos) {
        out += std::regex_replace(line, counters, "") + "\n";
      }
    }
    return out;
  };

  for (std::size_t crash_at : {std::size_t{1}, entries.size() / 3, entries.size() * 2 / 3}) {
    storage::memory_store mem;  // survives the crash: what the disk holds
    {
      storage::applied_index_store s(mem);
      log_clock time;
      broker b(s, time, nullptr);
      ASSERT_TRUE(b.recover().ok());
      ASSERT_TRUE(s.load().ok());
      apply_range(b, time, s, 0, crash_at);
    }  // the process dies; raft's log still has every entry
    storage::applied_index_store s(mem);
    log_clock time;
    broker b(s, time, nullptr);
    ASSERT_TRUE(b.recover().ok());
    auto at = s.load();
    ASSERT_TRUE(at.ok()) << at.err().message;
    EXPECT_GT(at->index, 0u);
    EXPECT_LE(at->index, crash_at);
    resume_clock(time, s);
    const std::size_t skipped = apply_range(b, time, s, 0, entries.size());
    EXPECT_EQ(skipped, at->index) << "crash at " << crash_at;
    EXPECT_EQ(state_of(b), state_of(ref)) << "crash at " << crash_at;
    EXPECT_EQ(dump(mem), dump(ref_mem)) << "crash at " << crash_at;
    EXPECT_EQ(s.applied(), ref_store.applied());
  }
}

TEST(BrokerReplay, ACorruptAppliedPositionIsRefused) {
  storage::memory_store mem;
  storage::batch b;
  b.put(storage::column::meta, storage::keys::applied(), "\x09garbage");
  ASSERT_TRUE(mem.write(b).ok());
  storage::applied_index_store s(mem);
  auto r = s.load();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::internal);
}

}  // namespace
}  // namespace onceq::testing
