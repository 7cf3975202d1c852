// A request's reads never wait for the disk on the shard's loop: the
// command reads from memory only, a miss goes to the reader thread, and the
// command runs again (shard::run_reading). A store stands in for RocksDB's
// block cache: a column is "on disk" (its reads from memory answer
// would_block) until warm() reads it.
#include "shard/shard.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "storage/memory_store.hpp"
#include "storage/rocksdb/rocksdb_store.hpp"

namespace onceq {
namespace {

namespace st = storage;

class cold_store final : public st::memory_store {
 public:
  // Columns whose reads need the disk; keep_cold: warm() does not help
  // (evicted again before the command runs again); scans_only: point
  // lookups find their keys in memory, a scan needs the disk (RocksDB: a
  // seek touches every file whose range overlaps, a lookup's bloom filters
  // skip them).
  void make_cold(st::column c, bool keep_cold = false, bool scans_only = false) {
    std::lock_guard lk(mu_);
    cold_.insert(c);
    keep_cold_ = keep_cold;
    scans_only_ = scans_only;
  }
  void memory_reads(bool on) override {
    if (on) misses_ = {};
    memory_ = on;
  }
  st::read_misses take_read_misses() override { return std::exchange(misses_, {}); }
  void warm(const st::read_misses& m) override {
    std::lock_guard lk(mu_);
    warm_threads_.insert(std::this_thread::get_id());
    ++warms_;
    if (keep_cold_) return;
    for (const auto& k : m.keys) cold_.erase(k.first);
    for (const auto& r : m.ranges) cold_.erase(r.col);
  }
  result<std::string> get(st::column c, std::string_view key) override {
    if (memory_) ++memory_gets_[c];
    if (blocked(c) && !scans_only()) {
      misses_.keys.emplace_back(c, std::string(key));
      return make_error(errc::would_block, "cold");
    }
    return memory_store::get(c, key);
  }
  result<void> scan(st::column c, std::string_view begin, std::string_view end,
                    const visitor& fn) override {
    if (blocked(c)) {
      misses_.ranges.push_back({c, std::string(begin), std::string(end), false});
      return make_error(errc::would_block, "cold");
    }
    return memory_store::scan(c, begin, end, fn);
  }
  // Point lookups made from memory (the loop's), by column.
  int memory_gets(st::column c) const { return memory_gets_.count(c) ? memory_gets_.at(c) : 0; }
  int warms() const {
    std::lock_guard lk(mu_);
    return warms_;
  }
  std::set<std::thread::id> warm_threads() const {
    std::lock_guard lk(mu_);
    return warm_threads_;
  }

 private:
  bool scans_only() const {
    std::lock_guard lk(mu_);
    return scans_only_;
  }
  bool blocked(st::column c) const {
    std::lock_guard lk(mu_);
    return memory_ && cold_.count(c) != 0;
  }
  mutable std::mutex mu_;
  std::set<st::column> cold_;               // mu_
  bool keep_cold_ = false;                  // mu_
  bool scans_only_ = false;                 // mu_
  std::map<st::column, int> memory_gets_;   // the loop's
  int warms_ = 0;                           // mu_
  std::set<std::thread::id> warm_threads_;  // mu_
  bool memory_ = false;                     // the loop's
  st::read_misses misses_;                  // the loop's
};

class ShardDiskReadsTest : public ::testing::Test {
 protected:
  ShardDiskReadsTest() {
    // Messages written by an earlier broker: the new one's partitions have
    // no cached tail, so a consume reads them from the store.
    {
      broker before(store_, clock_, nullptr);
      EXPECT_TRUE(before.recover().ok());
      EXPECT_TRUE(before.create_topic({"t", 1, {}}).ok());
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(before.produce(produce_of("old")).ok());
    }
    broker_ = std::make_unique<broker>(store_, clock_, nullptr);
    EXPECT_TRUE(broker_->recover().ok());
    shard_ = std::make_unique<shard>(0, *broker_, store_, clock_);
    shard_->start();
  }
  ~ShardDiskReadsTest() override { shard_->stop(); }

  static produce_cmd produce_of(std::string value, std::string idem = {}) {
    message_in m;
    m.value = std::move(value);
    m.idempotency_key = std::move(idem);
    return produce_cmd{"t", {m}, {}, {}};
  }

  result<produce_reply> produce(std::string value, std::string header) {
    std::promise<result<produce_reply>> p;
    auto cmd = produce_of(std::move(value));
    cmd.idempotency_header = std::move(header);
    shard_->execute<produce_reply>([cmd](broker& b) { return b.produce(cmd); },
                                   [&p](result<produce_reply> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }

  result<std::vector<delivery>> consume(std::int64_t max) {
    std::promise<result<std::vector<delivery>>> p;
    shard_->consume(consume_cmd{"t", "g", "o", {}, max, {}}, 0,
                    [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }

  system_clock clock_;
  cold_store store_;
  std::unique_ptr<broker> broker_;
  std::unique_ptr<shard> shard_;
};

TEST_F(ShardDiskReadsTest, AConsumeWhoseMessagesAreOnDiskIsReadOnTheReaderThenRunAgain) {
  store_.make_cold(st::column::messages);
  auto r = consume(10);
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].value, "old");
  // One trip to the reader, on its own thread; the loop never read the disk.
  EXPECT_EQ(shard_->disk_reads(), 1u);
  EXPECT_EQ(shard_->loop_disk_reads(), 0u);
  auto threads = store_.warm_threads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
  // The first run, dropped at the miss, leased nothing: each message was
  // delivered once, with attempt 1.
  for (const auto& d : *r) EXPECT_EQ(d.attempts, 1);
  auto again = consume(10);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
}

TEST_F(ShardDiskReadsTest, AReadAheadThatMissesGoesToTheReaderNotToOneLookupPerMessage) {
  // The drain's shape: the read-ahead's scan needs the disk while each
  // message alone is in memory. Falling back to a lookup per message on the
  // loop doubled a drain's CPU; the consume goes to the reader instead and
  // runs again with the range in memory.
  store_.make_cold(st::column::messages, /*keep_cold=*/false, /*scans_only=*/true);
  auto r = consume(10);
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ(shard_->disk_reads(), 1u);
  EXPECT_EQ(shard_->loop_disk_reads(), 0u);
  EXPECT_EQ(store_.memory_gets(st::column::messages), 0);
}

TEST_F(ShardDiskReadsTest, AProduceWhoseDedupRecordIsOnDiskIsStoredOnce) {
  ASSERT_TRUE(produce("first", "idem-1").ok());
  store_.make_cold(st::column::dedup);
  // The retry's dedup lookup misses memory; after the reader's read it finds
  // the first produce: a duplicate, not a second message.
  auto dup = produce("retry", "idem-1");
  ASSERT_TRUE(dup.ok()) << dup.err().message;
  ASSERT_EQ(dup->results.size(), 1u);
  EXPECT_TRUE(dup->results[0].duplicate);
  EXPECT_EQ(shard_->disk_reads(), 1u);
  auto r = consume(10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 4u);  // three old ones and "first"
}

TEST_F(ShardDiskReadsTest, ACommandEvictedAgainAndAgainReadsTheDiskOnTheLoopTheThirdTime) {
  store_.make_cold(st::column::messages, /*keep_cold=*/true);
  auto r = consume(10);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->size(), 3u);
  // Two runs from memory, each followed by a read on the reader; the third
  // reads from the disk where it runs.
  EXPECT_EQ(store_.warms(), 2);
  EXPECT_EQ(shard_->disk_reads(), 2u);
  EXPECT_EQ(shard_->loop_disk_reads(), 1u);
}

TEST_F(ShardDiskReadsTest, AConsumeCarryingAcksThatMissesMemoryGoesToTheReaderAndAnswersBoth) {
  // A delivery leased by an earlier broker: the restarted one holds it in
  // memory, but none of the messages (no cached tail).
  shard_->stop();
  shard_.reset();
  broker_.reset();
  std::vector<delivery> first;
  {
    broker before(store_, clock_, nullptr);
    ASSERT_TRUE(before.recover().ok());
    auto got = before.consume(consume_cmd{"t", "g", "o", {}, 1, {}});
    ASSERT_TRUE(got.ok()) << got.err().message;
    first = std::move(*got);
  }
  ASSERT_EQ(first.size(), 1u);
  broker_ = std::make_unique<broker>(store_, clock_, nullptr);
  ASSERT_TRUE(broker_->recover().ok());
  shard_ = std::make_unique<shard>(0, *broker_, store_, clock_);
  shard_->start();
  // The acks find their delivery in memory; the consume after them misses:
  // it runs again after the reader's read, the acks do not (they are
  // written), and the answer carries their outcome.
  store_.make_cold(st::column::messages);
  const auto& d = first[0];
  std::promise<result<consume_after_acks_reply>> p;
  shard_->consume_after_acks(
      ack_batch_cmd{"t", "g", "o", {ack_item{d.partition, d.offset, d.attempts, "", {}, {}}}},
      consume_cmd{"t", "g", "o", {}, 10, {}}, 0,
      [&p](result<consume_after_acks_reply> r) { p.set_value(std::move(r)); });
  auto r = p.get_future().get();
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->acks.size(), 1u);
  EXPECT_EQ(r->acks[0].code, errc::ok) << r->acks[0].message;
  EXPECT_EQ(r->deliveries.size(), 2u);
  EXPECT_EQ(shard_->disk_reads(), 1u);
  EXPECT_EQ(shard_->loop_disk_reads(), 0u);
}

TEST_F(ShardDiskReadsTest, ACommandWaitingOnTheReaderIsAnsweredWhenTheShardStops) {
  store_.make_cold(st::column::messages, /*keep_cold=*/true);
  std::promise<result<std::vector<delivery>>> p;
  shard_->consume(consume_cmd{"t", "g", "o", {}, 10, {}}, 0,
                  [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
  shard_->stop();
  auto r = p.get_future().get();
  // Answered either way: from the disk on the loop, or before the stop.
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->size(), 3u);
}

// The same with RocksDB, its block cache cold: a backlog in SST files,
// drained 100 at a time. Each read-ahead run (128 messages here) that needs
// the disk also has the reader read the messages after it, up to
// partition_log::k_warm_ahead from its first, so the drain goes to the
// reader once per 1024 messages, not once per run (30 trips here without
// it).
TEST(ShardDiskReadsRocksdbTest, ADrainFromTheDiskGoesToTheReaderOncePerThousandMessages) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "onceq-shard-reads-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  manual_clock clock;
  st::storage_options o;
  o.data_dir = (fs::path(dir) / "data").string();
  o.block_cache_bytes = 8 << 20;
  o.write_buffer_bytes = 4 << 20;
  o.time = &clock;
  constexpr int k_messages = 3000;
  {
    auto opened = st::rocksdb_store::open(o);
    ASSERT_TRUE(opened.ok()) << opened.err().message;
    auto& store = **opened;
    broker b(store, clock, nullptr);
    ASSERT_TRUE(b.recover().ok());
    ASSERT_TRUE(b.create_topic({"t", 1, {}}).ok());
    for (int i = 0; i < k_messages; i += 100) {
      produce_cmd cmd{"t", {}, {}, {}};
      for (int j = 0; j < 100; ++j) {
        message_in m;
        m.value = std::string(200, 'v') + std::to_string(i + j);
        cmd.messages.push_back(std::move(m));
      }
      ASSERT_TRUE(b.produce(cmd).ok());
    }
    ASSERT_TRUE(store.compact_all().ok());  // in SST files; the next open's cache is empty
  }
  {
    auto opened = st::rocksdb_store::open(o);
    ASSERT_TRUE(opened.ok()) << opened.err().message;
    auto& store = **opened;
    broker b(store, clock, nullptr);
    ASSERT_TRUE(b.recover().ok());
    shard sh(0, b, store, clock);
    sh.start();
    std::size_t drained = 0;
    for (;;) {
      std::promise<result<std::vector<delivery>>> p;
      sh.consume(consume_cmd{"t", "g", "o", {}, 100, {}}, 0,
                 [&p](result<std::vector<delivery>> r) { p.set_value(std::move(r)); });
      auto r = p.get_future().get();
      ASSERT_TRUE(r.ok()) << r.err().message;
      if (r->empty()) break;
      for (const auto& d : *r) {
        ASSERT_EQ(d.offset, drained);
        ASSERT_EQ(d.value, std::string(200, 'v') + std::to_string(drained));
        ++drained;
      }
    }
    EXPECT_EQ(drained, static_cast<std::size_t>(k_messages));
    EXPECT_GE(sh.disk_reads(), 3u);  // the backlog was on disk
    EXPECT_LE(sh.disk_reads(), 6u);
    EXPECT_EQ(sh.loop_disk_reads(), 0u);
    sh.stop();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace onceq
