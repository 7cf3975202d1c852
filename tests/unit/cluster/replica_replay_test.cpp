// Replicas agree however often they restart (cluster/replica.hpp,
// docs/REPLICATION.md, section 2). One replica applies a log of entries
// straight through; another applies the same log but "crashes" now and
// then: its store falls back to what an earlier point had made durable (a
// kill -9 loses the store's unsynced tail, which a cluster never syncs), a
// new replica opens that store, and the entries after its applied position
// are applied again, as raft replays them after a restart. Every few
// entries both replicas' whole states (replica::snapshot: every column)
// must be equal, byte for byte (docs/RELIABILITY.md, "Replicas that
// parted").
//
// The log is the crash loop's workload (tests/integration/crash_loop.cpp),
// made here from the first replica's answers: producers with two messages
// per idempotency key (some as a batch of two, some retried), consumers
// that ack, batch-ack, nack with a delay, ack late, extend, or drop what
// they got, consumes that carry acks, and the leader's ticks, with the
// stamped clock moving 0..40 ms per entry.

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/bytes.hpp"
#include "broker/apply.hpp"
#include "broker/log_entry.hpp"
#include "cluster/replica.hpp"
#include "storage/memory_store.hpp"

namespace onceq::cluster {
namespace {

constexpr millis k_start_ms = 1'795'000'000'000;
constexpr const char* k_topic = "crash";
constexpr const char* k_group = "g";

// An in-memory store that keeps every batch written to it, in order: what a
// kill -9 leaves of a store whose writes reach its WAL file in order is the
// first k of them, for some k (not always a whole entry's).
class recording_store final : public storage::memory_store {
 public:
  result<void> write(const storage::batch& b) override {
    auto r = memory_store::write(b);
    if (r.ok()) written_.push_back(b);
    return r;
  }
  const std::vector<storage::batch>& written() const noexcept { return written_; }

 private:
  std::vector<storage::batch> written_;
};

// A replica over its own recording store. restart_after(k) replaces both
// with a store that holds the first k batches written and a replica opened
// over it, as a process restarted after a kill -9 finds them.
struct node {
  std::unique_ptr<recording_store> store = std::make_unique<recording_store>();
  std::unique_ptr<replica> r;

  node() { open(); }

  void open() {
    r = std::make_unique<replica>(*store, nullptr, broker_options{});
    auto o = r->open();
    ASSERT_TRUE(o.ok()) << o.err().message;
  }

  void restart_after(std::size_t k) {
    r.reset();
    auto fresh = std::make_unique<recording_store>();
    for (std::size_t i = 0; i < k; ++i) ASSERT_TRUE(fresh->write(store->written()[i]).ok());
    store = std::move(fresh);
    open();
  }
};

// Makes the next entry from what the reference replica answered so far.
class workload {
 public:
  // wide: consumes of up to 100 messages and batch acks of up to 100 (the
  // bench's), else the crash loop's 1..4.
  explicit workload(std::uint64_t seed, bool wide = false) : rng_(seed), wide_(wide) {}

  log_entry next() {
    // Some stretches as dense as a loaded leader's (entries a millisecond
    // apart, so that a nack's short delay spans several), some sparse.
    now_ += dense_ ? pick(3) : pick(41);
    if (pick(200) == 0) dense_ = !dense_;
    if (!created_) {
      created_ = true;
      topic_settings s;
      s.lease_ms = 300;
      // The crash loop's topics back off too: a lapsed lease's message
      // waits before it is ready again, and its owner may still settle it.
      s.backoff_ms = 200;
      s.dedup_window_ms = 3'600'000;
      return {now_, create_topic_cmd{k_topic, 4, s}};
    }
    const int roll = pick(100);
    if (roll < 12) return {now_, tick_cmd{}};
    if (roll < 40) return {now_, produce()};
    if (roll < 62 || held_.empty()) return {now_, consume(false)};
    if (roll < 67) return {now_, consume(true)};
    return {now_, settle()};
  }

  // The reference's answer to the entry just made.
  void answered(const result<log_reply>& r) {
    if (!r.ok()) return;
    if (const auto* got = std::get_if<std::vector<delivery>>(&*r)) {
      hold(*got);
    } else if (const auto* both = std::get_if<consume_after_acks_reply>(&*r)) {
      hold(both->deliveries);
    }
  }

 private:
  struct held {
    std::string owner;
    delivery d;
  };

  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
  std::size_t max_acks() const { return wide_ ? 100 : 4; }

  std::string owner() {
    const int c = pick(3);
    return "c" + std::to_string(c) + "." + std::to_string(incarnation_[c]);
  }

  static message_in message(const std::string& key, const std::string& id) {
    message_in m;
    m.key = id;
    m.value = id;
    m.idempotency_key = key;
    m.envelope_json = R"({"idempotency_key":")" + key + "\"}";
    return m;
  }

  produce_cmd produce() {
    // A retry of an earlier produce now and then: stored once.
    if (!sent_.empty() && pick(10) == 0)
      return sent_[static_cast<std::size_t>(pick(static_cast<int>(sent_.size())))];
    produce_cmd cmd;
    cmd.topic = k_topic;
    if (!pending_b_.empty() && pick(2) == 0) {
      const std::string key = pending_b_.front();
      pending_b_.erase(pending_b_.begin());
      cmd.messages = {message(key, key + ".b")};
      cmd.idempotency_header = key + ".b";
    } else {
      const std::string key = "p" + std::to_string(pick(2)) + "-" + std::to_string(keys_++);
      if (pick(10) < 3) {
        cmd.messages = {message(key, key + ".batch#0"), message(key, key + ".batch#1")};
        cmd.idempotency_header = key + ".batch";
      } else {
        cmd.messages = {message(key, key + ".a")};
        cmd.idempotency_header = key + ".a";
        pending_b_.push_back(key);
      }
    }
    sent_.push_back(cmd);
    if (sent_.size() > 50) sent_.erase(sent_.begin());
    return cmd;
  }

  consume_cmd consume_only(const std::string& who) {
    return consume_cmd{k_topic,     k_group, who, 200 + pick(301), 1 + pick(wide_ ? 100 : 4),
                       std::nullopt};
  }

  log_command consume(bool with_acks) {
    if (!with_acks) return consume_only(owner());
    // The acks of one owner's deliveries, then its next consume.
    const held first = held_.front();
    ack_batch_cmd acks{k_topic, k_group, first.owner, {}};
    for (auto it = held_.begin(); it != held_.end();) {
      if (it->owner == first.owner && acks.acks.size() < max_acks()) {
        acks.acks.push_back(item(it->d, it->owner));
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    return consume_after_acks_cmd{std::move(acks), consume_only(first.owner)};
  }

  static ack_item item(const delivery& d, const std::string& owner) {
    ack_item a;
    a.partition = d.partition;
    a.offset = d.offset;
    a.attempts = d.attempts;
    a.result_json = R"({"by":")" + owner + "\"}";
    return a;
  }

  static delivery_ref ref(const delivery& d, const std::string& owner) {
    return delivery_ref{k_topic, k_group, owner, d.partition, d.offset, d.attempts, std::nullopt};
  }

  log_command settle() {
    // Oldest first, as a consumer works through its batch; a late one
    // (after its lease) comes about when the clock passed it meanwhile.
    const std::size_t at =
        pick(4) == 0 ? static_cast<std::size_t>(pick(static_cast<int>(held_.size()))) : 0;
    held h = held_[at];
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(at));
    const int roll = pick(100);
    if (roll < 7) {
      // The consumer crashes: the rest of its deliveries lapse, and it comes
      // back as another owner.
      const int c = h.owner[1] - '0';
      ++incarnation_[c];
      std::erase_if(held_, [&](const held& x) { return x.owner == h.owner; });
      return tick_cmd{};
    }
    if (roll < 15) {
      // Mostly short delays; now and then one longer than many entries, so
      // that a consume comes while it runs (even of a message whose lease
      // lapsed and which waited, ready, for its redelivery).
      return nack_cmd{ref(h.d, h.owner), "nack", pick(4) == 0 ? pick(3001) : pick(31)};
    }
    if (roll < 20) return extend_cmd{ref(h.d, h.owner), 200 + pick(301)};
    if (roll < 40) {
      // A batch ack of this and the owner's other deliveries.
      ack_batch_cmd b{k_topic, k_group, h.owner, {item(h.d, h.owner)}};
      for (auto it = held_.begin(); it != held_.end() && b.acks.size() < max_acks();) {
        if (it->owner == h.owner) {
          b.acks.push_back(item(it->d, it->owner));
          it = held_.erase(it);
        } else {
          ++it;
        }
      }
      return b;
    }
    return ack_cmd{ref(h.d, h.owner), R"({"by":")" + h.owner + "\"}", {}};
  }

  void hold(const std::vector<delivery>& got) {
    // The owner is not in a delivery: the last consume's owner was the one
    // drawn; find it from the entry made (kept by next()).
    for (const auto& d : got) held_.push_back({last_owner_, d});
  }

 public:
  // The owner of the consume just made (set by the caller from the entry).
  void consumed_by(std::string owner) { last_owner_ = std::move(owner); }

 private:
  std::mt19937_64 rng_;
  bool wide_ = false;
  bool dense_ = false;
  millis now_ = k_start_ms;
  bool created_ = false;
  long long keys_ = 0;
  int incarnation_[3] = {0, 0, 0};
  std::vector<std::string> pending_b_;
  std::vector<produce_cmd> sent_;
  std::vector<held> held_;
  std::string last_owner_;
};

// A snapshot's rows: (column + 1, key) -> value.
std::map<std::pair<int, std::string>, std::string> rows_of(const std::string& snap) {
  std::map<std::pair<int, std::string>, std::string> rows;
  byte_reader r(snap);
  std::uint8_t version = 0, tag = 0;
  if (!r.byte(version)) return rows;
  while (r.byte(tag) && tag != 0) {
    std::string k, v;
    if (!r.str(k) || !r.str(v)) break;
    rows[{tag, std::move(k)}] = std::move(v);
  }
  return rows;
}

std::string printable(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// The rows in which two snapshots differ (the first few), for a failure.
std::string differences(const std::string& a, const std::string& b) {
  const auto ra = rows_of(a), rb = rows_of(b);
  std::string out;
  int shown = 0;
  auto show = [&](const std::pair<int, std::string>& k, const std::string* va,
                  const std::string* vb) {
    if (++shown > 12) return;
    out += fmt::format("  column {} key {}: {} | {}\n", k.first - 1, printable(k.second),
                       va ? printable(*va) : "(none)", vb ? printable(*vb) : "(none)");
  };
  for (const auto& [k, v] : ra) {
    auto it = rb.find(k);
    if (it == rb.end() || it->second != v) show(k, &v, it == rb.end() ? nullptr : &it->second);
  }
  for (const auto& [k, v] : rb) {
    if (!ra.contains(k)) show(k, nullptr, &v);
  }
  return out;
}

std::string owner_of(const log_command& cmd) {
  if (const auto* c = std::get_if<consume_cmd>(&cmd)) return c->owner;
  if (const auto* c = std::get_if<consume_after_acks_cmd>(&cmd)) return c->consume.owner;
  return {};
}

// Applies `entries` entries of seed's workload to a reference replica and,
// crashing `crash_every` entries on average, to another; their states must
// agree at every checkpoint. Returns the first index where they did not
// (0: never).
std::uint64_t first_disagreement(std::uint64_t seed, int entries, int crash_every,
                                 std::string* why = nullptr) {
  std::mt19937_64 chaos(seed * 7919 + 1);
  workload w(seed);
  node ref, other;
  std::vector<std::string> log;  // log[i - 1]: the entry at index i
  for (std::uint64_t i = 1; i <= static_cast<std::uint64_t>(entries); ++i) {
    const log_entry e = w.next();
    w.consumed_by(owner_of(e.cmd));
    log.push_back(encode_entry(e));
    ref.r->apply(i, log.back());
    if (auto reply = ref.r->take_reply()) w.answered(*reply);
    other.r->apply(i, log.back());
    (void)other.r->take_reply();
    if (chaos() % static_cast<std::uint64_t>(crash_every) == 0) {
      // kill -9: the first k writes survive; raft then replays every entry
      // after the one the store's applied position names.
      const std::size_t n = other.store->written().size();
      const std::size_t k = n - std::min<std::size_t>(n, chaos() % 8);
      other.restart_after(k);
      for (std::uint64_t j = other.r->applied().index + 1; j <= i; ++j) {
        other.r->apply(j, log[j - 1]);
        (void)other.r->take_reply();
      }
    }
    if (i % 25 == 0 || i == static_cast<std::uint64_t>(entries)) {
      const std::string a = ref.r->snapshot(), b = other.r->snapshot();
      if (a != b) {
        if (why != nullptr) *why = differences(a, b);
        return i;
      }
    }
  }
  return 0;
}

// Sanitized builds (-O0) run a sixth of each log: the same seeds and
// crashes, about 12 s per test of ten seeds under ASan.
// ReplicaStore's comparison runs three seeds of its six there.
#if defined(ONCEQ_INSTRUMENTED_TESTS)
constexpr int k_entries = 1'000;
constexpr std::uint64_t k_store_seeds = 3;
#else
constexpr int k_entries = 6'000;
constexpr std::uint64_t k_store_seeds = 6;
#endif

// Forty seeds in four tests of ten, so that ctest runs them side by side.
class ReplicaReplay : public ::testing::TestWithParam<int> {};

TEST_P(ReplicaReplay, AReplicaThatRestartsAndReplaysAgreesWithOneThatDidNot) {
  for (int i = 1; i <= 10; ++i) {
    const auto seed = static_cast<std::uint64_t>(GetParam() * 10 + i);
    std::string why;
    EXPECT_EQ(first_disagreement(seed, k_entries, 100, &why), 0u)
        << "seed " << seed << ": rows (straight through | restarted)\n"
        << why;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, ReplicaReplay, ::testing::Range(0, 4));

// Every row of a store, as rows_of() gives a snapshot's, but the applied
// position (a plain broker has none).
std::map<std::pair<int, std::string>, std::string> rows_of_store(storage::store& st) {
  std::map<std::pair<int, std::string>, std::string> rows;
  for (int c = 0; c < storage::k_column_count; ++c) {
    EXPECT_TRUE(st.scan(static_cast<storage::column>(c), "", std::string(64, '\xff'),
                        [&](std::string_view k, std::string_view v) {
                          rows[{c + 1, std::string(k)}] = std::string(v);
                          return true;
                        })
                    .ok());
  }
  rows.erase({1, "a"});
  return rows;
}

// A replica's store gathers each entry's writes and serves the entry's
// reads from them: what the replica writes must be what a plain broker
// over a plain store writes for the same commands at the same times.
TEST(ReplicaStore, AReplicaWritesWhatAPlainBrokerWrites) {
  for (std::uint64_t seed = 1; seed <= k_store_seeds; ++seed) {
    workload w(seed, seed % 2 == 0);
    node rep;
    storage::memory_store plain_store;
    log_clock plain_time;
    broker plain(plain_store, plain_time, nullptr);
    ASSERT_TRUE(plain.recover().ok());
    const auto entries = static_cast<std::uint64_t>(k_entries / 4);
    for (std::uint64_t i = 1; i <= entries; ++i) {
      const log_entry e = w.next();
      w.consumed_by(owner_of(e.cmd));
      rep.r->apply(i, encode_entry(e));
      auto reply = rep.r->take_reply();
      if (reply) w.answered(*reply);
      auto direct = apply_entry(plain, plain_time, e);
      ASSERT_EQ(reply.has_value(), true);
      ASSERT_EQ(reply->ok(), direct.ok()) << "seed " << seed << " entry " << i;
      if (i % 10 != 0 && i != entries) continue;
      auto a = rows_of_store(*rep.store), b = rows_of_store(plain_store);
      if (a != b) {
        ADD_FAILURE() << "seed " << seed << " entry " << i << " tag "
                      << static_cast<int>(tag_of(e.cmd)) << ": rows differ";
        break;
      }
    }
  }
}

// A read on a replica may not end a lapsed lease (its store refuses writes
// outside an entry: the leader's tick ends it on every replica), and still
// does not show the key leased past the lease's deadline.
TEST(ReplicaStore, AKeyIsNotShownLeasedPastItsLeaseOnAReplica) {
  node rep;
  auto apply = [&, i = std::uint64_t{0}](millis at, log_command cmd) mutable {
    rep.r->apply(++i, encode_entry(log_entry{at, std::move(cmd)}));
    auto r = rep.r->take_reply();
    EXPECT_TRUE(r && r->ok());
  };
  topic_settings ts;
  ts.lease_ms = 300;
  apply(k_start_ms, create_topic_cmd{k_topic, 1, ts});
  message_in m;
  m.value = "v";
  m.idempotency_key = "k";
  apply(k_start_ms, produce_cmd{k_topic, {m}, "a", {}});
  apply(k_start_ms, consume_cmd{k_topic, k_group, "c", 300, 1, std::nullopt});
  const key_query q{k_topic, k_group, "k", ""};
  auto held = rep.r->core().get_key(q);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->st, key_info::state::leased);
  // An entry that moves the clock past the lease, and no tick yet.
  m.idempotency_key = "other";
  apply(k_start_ms + 301, produce_cmd{k_topic, {m}, "b", {}});
  auto after = rep.r->core().get_key(q);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->st, key_info::state::none);
  // The read wrote nothing: the next entry's tick still ends the lease.
  const auto position = rep.r->applied();
  apply(k_start_ms + 302, tick_cmd{});
  EXPECT_GT(rep.r->applied().index, position.index);
}

// The crash loop's parted replicas (docs/RELIABILITY.md), as the CI run's
// log had them: a lapsed lease's message waits, ready; a replica restarts
// from its store; the message's owner nacks it with a delay; a consume
// comes before the delay is over. The replica that never stopped kept the
// message ready and delivered it; the restarted one had rebuilt its ready
// set from the records (at a clock of 0, before it resumed it) and
// delivered the next message instead. Neither may deliver it early.
TEST(ReplicaReplay, ANackedMessageThatWaitedReadyIsHeldBackByEveryReplica) {
  node straight, restarted;
  std::uint64_t index = 0;
  auto apply = [&](millis at, log_command cmd) {
    const std::string e = encode_entry(log_entry{at, std::move(cmd)});
    ++index;
    straight.r->apply(index, e);
    auto a = straight.r->take_reply();
    restarted.r->apply(index, e);
    auto b = restarted.r->take_reply();
    EXPECT_TRUE(a && b && a->ok() == b->ok()) << "entry " << index;
    return a && a->ok() ? std::optional<log_reply>(**a) : std::nullopt;
  };
  auto delivered = [](const std::optional<log_reply>& r) {
    std::vector<std::uint64_t> out;
    if (const auto* ds = r ? std::get_if<std::vector<delivery>>(&*r) : nullptr) {
      for (const auto& d : *ds) out.push_back(d.offset);
    }
    return out;
  };
  topic_settings ts;
  ts.lease_ms = 300;
  ts.backoff_ms = 200;
  apply(k_start_ms, create_topic_cmd{k_topic, 1, ts});
  message_in m;
  m.value = "first";
  apply(k_start_ms, produce_cmd{k_topic, {m}, "a", {}});
  m.value = "second";
  apply(k_start_ms, produce_cmd{k_topic, {m}, "b", {}});
  const auto got = apply(k_start_ms, consume_cmd{k_topic, k_group, "c", 300, 1, std::nullopt});
  ASSERT_EQ(delivered(got), std::vector<std::uint64_t>{0});
  // The lease lapses (a 200 ms backoff starts), then the backoff ends: the
  // message waits, ready.
  apply(k_start_ms + 300, tick_cmd{});
  apply(k_start_ms + 500, tick_cmd{});
  restarted.restart_after(restarted.store->written().size());
  ASSERT_EQ(restarted.r->applied().index, straight.r->applied().index);
  // Its owner nacks it: nobody got it since, so the nack holds, delay 50 ms.
  apply(k_start_ms + 510,
        nack_cmd{delivery_ref{k_topic, k_group, "c", 0, 0, 1, std::nullopt}, "later", 50});
  const auto early =
      apply(k_start_ms + 520, consume_cmd{k_topic, k_group, "d", 300, 1, std::nullopt});
  EXPECT_EQ(delivered(early), std::vector<std::uint64_t>{1}) << "the nacked message went early";
  const auto due =
      apply(k_start_ms + 560, consume_cmd{k_topic, k_group, "d", 300, 1, std::nullopt});
  EXPECT_EQ(delivered(due), std::vector<std::uint64_t>{0});
  EXPECT_EQ(straight.r->snapshot(), restarted.r->snapshot())
      << differences(straight.r->snapshot(), restarted.r->snapshot());
}

// A snapshot carries the clock as of its last entry, not as of the last
// entry that wrote: a replica that restores it must apply the next entry,
// stamped earlier (a new leader's grace), at the time the others do.
TEST(ReplicaStore, ASnapshotCarriesTheClockOfItsLastEntry) {
  // restored: an empty replica; kept: one that applied the entries that
  // wrote, so its store holds the snapshot's position already.
  node straight, restored, kept;
  std::uint64_t index = 0;
  auto apply = [&](node& n, millis at, log_command cmd, std::uint64_t i) {
    n.r->apply(i, encode_entry(log_entry{at, std::move(cmd)}));
    auto r = n.r->take_reply();
    EXPECT_TRUE(r && r->ok()) << "entry " << i;
  };
  topic_settings ts;
  ts.lease_ms = 5000;
  message_in m;
  m.value = "v";
  for (node* n : {&straight, &kept}) {
    apply(*n, k_start_ms, create_topic_cmd{k_topic, 1, ts}, 1);
    apply(*n, k_start_ms, produce_cmd{k_topic, {m}, "a", {}}, 2);
    apply(*n, k_start_ms, consume_cmd{k_topic, k_group, "c", 5000, 1, std::nullopt}, 3);
  }
  index = 3;
  // Finds nothing, writes nothing, and moves the clock a second on.
  const auto position = straight.r->applied();
  apply(straight, k_start_ms + 1000, consume_cmd{k_topic, k_group, "c", 5000, 1, std::nullopt},
        ++index);
  ASSERT_EQ(straight.r->applied(), position) << "the empty consume wrote";
  restored.r->restore(straight.r->snapshot());
  kept.r->restore(straight.r->snapshot());
  // The next leader stamps 500 ms behind: all apply it at the later time.
  for (node* n : {&straight, &restored, &kept}) {
    apply(*n, k_start_ms + 500, produce_cmd{k_topic, {m}, "b", {}}, index + 1);
  }
  EXPECT_EQ(straight.r->snapshot(), restored.r->snapshot())
      << differences(straight.r->snapshot(), restored.r->snapshot());
  EXPECT_EQ(straight.r->snapshot(), kept.r->snapshot())
      << differences(straight.r->snapshot(), kept.r->snapshot());
}

}  // namespace
}  // namespace onceq::cluster
