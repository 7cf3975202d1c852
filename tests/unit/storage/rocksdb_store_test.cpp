#include "storage/rocksdb/rocksdb_store.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/comparator.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "storage/memory_store.hpp"
#include "storage/rocksdb/wal_prezero.hpp"
#include "storage/rocksdb/write_batch_rep.hpp"
#include "storage/schema.hpp"

namespace onceq::storage {
namespace {

namespace fs = std::filesystem;
using pairs = std::vector<std::pair<std::string, std::string>>;

// Polls cond for up to 30 s; for waiting on the syncer thread, never for time
// itself.
template <class Cond>
bool eventually(Cond cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// prefix + decimal n. (Not `"k" + std::to_string(n)`: GCC 12 at -O3 reports a
// false -Wrestrict on it.)
std::string numbered(std::string_view prefix, std::uint64_t n) {
  std::string s(prefix);
  s.append(std::to_string(n));
  return s;
}

pairs scan_all(store& s, column c, std::string_view begin = "",
               std::string_view end = "\xff\xff\xff\xff") {
  pairs out;
  auto r = s.scan(c, begin, end, [&](std::string_view k, std::string_view v) {
    out.emplace_back(k, v);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.err().message;
  return out;
}

// Sizes of the WAL files in dir.
std::vector<std::uintmax_t> wal_sizes(const std::string& dir) {
  std::vector<std::uintmax_t> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (prezeroed_wal_file_system::is_wal_name(e.path().string())) out.push_back(e.file_size());
  }
  return out;
}

class rocksdb_store_test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "onceq-storage-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  storage_options options(fsync_policy f = {}) {
    storage_options o;
    o.data_dir = (fs::path(dir_) / "data").string();
    o.fsync = f;
    o.block_cache_bytes = 8 << 20;
    o.write_buffer_bytes = 4 << 20;
    o.time = &clock_;
    return o;
  }
  void open(fsync_policy f = {}) {
    policy_of_last_open_ = f;
    open_with(options(f));
  }
  void open_with(const storage_options& o) {
    store_.reset();
    auto r = rocksdb_store::open(o);
    ASSERT_TRUE(r.ok()) << r.err().message;
    store_ = std::move(r).value();
  }
  void reopen() { open(policy_of_last_open_); }

  // The store's round: the WAL's buffer is written (and synced under
  // always) before when_durable answers.
  void wait_durable() {
    std::promise<result<void>> p;
    auto f = p.get_future();
    store_->when_durable([&p](result<void> r) { p.set_value(std::move(r)); });
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.err().message;
  }

  void put(column c, std::string k, std::string v) {
    batch b;
    b.put(c, std::move(k), std::move(v));
    auto r = store_->write(b);
    ASSERT_TRUE(r.ok()) << r.err().message;
  }

  // wal_sync_stats(): count timed syncs (their time adds up to more than 0
  // exactly when there were any) and waiters callbacks released.
  void expect_sync_stats(std::uint64_t count, std::uint64_t waiters) {
    const auto s = store_->wal_sync_stats();
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->count, count);
    if (count == 0) {
      EXPECT_EQ(s->sum_ns, 0u);
    } else {
      EXPECT_GT(s->sum_ns, 0u);
    }
    EXPECT_EQ(s->waiters, waiters);
  }

  std::string dir_;
  manual_clock clock_;
  fsync_policy policy_of_last_open_;
  std::unique_ptr<rocksdb_store> store_;
};

// ---- the store contract (same as memory_store) --------------------------

TEST_F(rocksdb_store_test, get_of_a_missing_key_is_not_found) {
  open();
  EXPECT_EQ(store_->get(column::meta, "nope").code(), errc::not_found);
}

TEST_F(rocksdb_store_test, put_overwrite_and_delete) {
  open();
  put(column::meta, "k", "v1");
  EXPECT_EQ(*store_->get(column::meta, "k"), "v1");
  put(column::meta, "k", "v2");
  EXPECT_EQ(*store_->get(column::meta, "k"), "v2");
  batch b;
  b.del(column::meta, "k");
  b.del(column::meta, "never-existed");
  ASSERT_TRUE(store_->write(b).ok());
  EXPECT_EQ(store_->get(column::meta, "k").code(), errc::not_found);
}

TEST_F(rocksdb_store_test, columns_are_separate_key_spaces) {
  open();
  for (int c = 0; c < k_column_count; ++c) {
    put(static_cast<column>(c), "k", numbered("col", c));
  }
  for (int c = 0; c < k_column_count; ++c) {
    EXPECT_EQ(*store_->get(static_cast<column>(c), "k"), numbered("col", c));
  }
}

TEST_F(rocksdb_store_test, a_batch_applies_in_order_and_atomically_visible) {
  open();
  batch b;
  b.put(column::meta, "a", "1");
  b.del(column::meta, "a");
  b.put(column::meta, "b", "1");
  b.put(column::meta, "b", "2");
  b.put(column::deliveries, "d", "x");
  ASSERT_TRUE(store_->write(b).ok());
  EXPECT_EQ(store_->get(column::meta, "a").code(), errc::not_found);
  EXPECT_EQ(*store_->get(column::meta, "b"), "2");
  EXPECT_EQ(*store_->get(column::deliveries, "d"), "x");
}

// The store applies a batch's ops sorted by key (for the memtable's
// sake); ops on the same key, interleaved with others, keep their order.
TEST_F(rocksdb_store_test, ops_on_one_key_keep_their_order_among_others) {
  open();
  put(column::messages, "z", "old");
  batch b;
  b.put(column::messages, "m", "1");
  b.put(column::messages, "c", "x");
  b.del(column::messages, "m");
  b.put(column::meta, "m", "meta");
  b.put(column::messages, "a", "y");
  b.put(column::messages, "m", "2");
  b.del(column::messages, "z");
  b.put(column::messages, "b", "first");
  b.put(column::messages, "b", "second");
  b.put(column::messages, "z", "new");
  b.del(column::messages, "b");
  ASSERT_TRUE(store_->write(b).ok());
  EXPECT_EQ(scan_all(*store_, column::messages),
            (pairs{{"a", "y"}, {"c", "x"}, {"m", "2"}, {"z", "new"}}));
  EXPECT_EQ(*store_->get(column::meta, "m"), "meta");
}

TEST_F(rocksdb_store_test, a_put_after_a_range_delete_in_one_batch_survives) {
  open();
  for (auto k : {"a", "b", "c"}) put(column::messages, k, "v");
  batch b;
  b.put(column::messages, "b", "before");
  b.del_range(column::messages, "a", "c");
  b.put(column::messages, "b", "after");
  ASSERT_TRUE(store_->write(b).ok());
  EXPECT_EQ(scan_all(*store_, column::messages), (pairs{{"b", "after"}, {"c", "v"}}));
}

// write_batch_rep makes, in one pass, the bytes that WriteBatch's own Put,
// Delete and DeleteRange make one op at a time, in apply_order: families
// with id 0 (tags without a family) and others (one-byte and two-byte
// varint ids), keys and values of 0, 127, 128 and 300 bytes, empty ranges
// left out.
class fake_family : public rocksdb::ColumnFamilyHandle {
 public:
  explicit fake_family(std::uint32_t id) : id_(id) {}
  const std::string& GetName() const override { return name_; }
  std::uint32_t GetID() const override { return id_; }
  rocksdb::Status GetDescriptor(rocksdb::ColumnFamilyDescriptor*) override {
    return rocksdb::Status::NotSupported();
  }
  const rocksdb::Comparator* GetComparator() const override {
    return rocksdb::BytewiseComparator();
  }

 private:
  std::uint32_t id_;
  std::string name_ = "fake";
};

std::string reference_rep(const batch& b, const column_family_ids& ids) {
  std::vector<std::unique_ptr<fake_family>> fams;
  for (auto id : ids) fams.push_back(std::make_unique<fake_family>(id));
  rocksdb::WriteBatch wb;
  for (const batch::op* op : apply_order(b)) {
    auto* h = fams[static_cast<std::size_t>(op->col)].get();
    rocksdb::Status s;
    switch (op->k) {
      case batch::kind::put:
        s = wb.Put(h, op->key, op->value);
        break;
      case batch::kind::del:
        s = wb.Delete(h, op->key);
        break;
      case batch::kind::del_range:
        if (op->key < op->value) s = wb.DeleteRange(h, op->key, op->value);
        break;
    }
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return wb.Data();
}

TEST(write_batch_rep, the_same_bytes_as_write_batch_makes) {
  const std::string k127(127, 'k'), k128(128, 'l'), v300(300, 'v');
  for (const column_family_ids ids :
       {column_family_ids{0, 1, 2, 3, 4}, column_family_ids{4, 3, 0, 2, 1},
        column_family_ids{200, 127, 128, 300, 0}}) {
    batch sorted;  // no range delete: sorted by (family, key), stably
    sorted.put(column::messages, "m", "1");
    sorted.put(column::meta, k128, v300);
    sorted.del(column::messages, "m");
    sorted.put(column::keys, "", "");
    sorted.put(column::dedup, k127, k128);
    sorted.del(column::meta, "a");
    sorted.put(column::messages, "m", "2");
    sorted.put(column::deliveries, "d", k127);
    sorted.put(column::messages, "a", v300);
    ASSERT_EQ(*write_batch_rep(sorted, ids), reference_rep(sorted, ids));
    batch ranged = sorted;  // a range delete: in the order given
    ranged.del_range(column::messages, "a", "n");
    ranged.del_range(column::deliveries, "z", "a");  // empty: left out
    ranged.del_range(column::meta, "x", "x");        // empty: left out
    ranged.put(column::meta, "b", "after");
    ASSERT_EQ(*write_batch_rep(ranged, ids), reference_rep(ranged, ids));
    batch two;  // one or two ops: in the order given
    two.put(column::messages, "z", "1");
    two.put(column::messages, "a", "2");
    ASSERT_EQ(*write_batch_rep(two, ids), reference_rep(two, ids));
    batch none;  // only empty ranges: a batch of no records
    none.del_range(column::messages, "b", "a");
    ASSERT_EQ(*write_batch_rep(none, ids), reference_rep(none, ids));
  }
}

// apply_order sorts by (family, key) and keeps the ops on one key in the
// order they were added: the last one is the one that counts.
TEST(write_batch_rep, apply_order_keeps_the_ops_on_a_key_in_their_order) {
  batch b;
  std::uint32_t seed = 7;
  for (int i = 0; i < 300; ++i) {
    seed = seed * 1103515245u + 12345u;
    const auto col = static_cast<column>((seed >> 16) % k_column_count);
    const std::string key(1 + (seed >> 20) % 3, static_cast<char>('a' + (seed >> 24) % 4));
    b.put(col, key, std::to_string(i));
  }
  const auto order = apply_order(b);
  ASSERT_EQ(order.size(), b.size());
  for (std::size_t i = 1; i < order.size(); ++i) {
    const auto& x = *order[i - 1];
    const auto& y = *order[i];
    ASSERT_LE(x.col, y.col) << i;
    if (x.col != y.col) continue;
    ASSERT_LE(x.key, y.key) << i;
    if (x.key == y.key) {
      EXPECT_LT(std::stoi(x.value), std::stoi(y.value)) << i;
    }
  }
}

TEST_F(rocksdb_store_test, multi_get_answers_each_key_in_order) {
  open();
  put(column::dedup, "a", "1");
  put(column::dedup, "c", "3");
  put(column::keys, "b", "other family");
  auto got = store_->multi_get(column::dedup, {"c", "b", "a", "c", "zz"});
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(*got[0], "3");
  EXPECT_EQ(got[1].code(), errc::not_found);
  EXPECT_EQ(*got[2], "1");
  EXPECT_EQ(*got[3], "3");
  EXPECT_EQ(got[4].code(), errc::not_found);
  EXPECT_TRUE(store_->multi_get(column::dedup, {}).empty());
  // Sees the memtable and SST files alike.
  ASSERT_TRUE(store_->compact_all().ok());
  put(column::dedup, "b", "2");
  got = store_->multi_get(column::dedup, {"a", "b"});
  EXPECT_EQ(*got[0], "1");
  EXPECT_EQ(*got[1], "2");
}

// Flushes and compactions write back their files a MiB at a time, waiting
// for the last MiB first, so that WAL syncs never queue behind a whole SST
// (db_open.cpp; docs/BENCHMARKS.md, "The aged tail"). Read back from the
// OPTIONS file RocksDB writes for the database it opened.
TEST_F(rocksdb_store_test, flushes_write_back_their_files_a_mib_at_a_time) {
  open();
  std::string text;
  for (const auto& e : fs::directory_iterator(options().data_dir)) {
    if (e.path().filename().string().rfind("OPTIONS-", 0) != 0) continue;
    std::ifstream in(e.path());
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.find("\n  bytes_per_sync=1048576\n"), std::string::npos);
  EXPECT_NE(text.find("\n  strict_bytes_per_sync=true\n"), std::string::npos);
}

TEST_F(rocksdb_store_test, an_empty_batch_is_fine) {
  open();
  EXPECT_TRUE(store_->write(batch{}).ok());
}

TEST_F(rocksdb_store_test, del_range_is_half_open) {
  open();
  for (auto k : {"a", "b", "c", "d"}) put(column::messages, k, "v");
  batch b;
  b.del_range(column::messages, "b", "d");
  b.del_range(column::messages, "c", "c");  // empty range: no-op, not an error
  ASSERT_TRUE(store_->write(b).ok());
  EXPECT_EQ(scan_all(*store_, column::messages), (pairs{{"a", "v"}, {"d", "v"}}));
  EXPECT_EQ(store_->get(column::messages, "b").code(), errc::not_found);
  // A put after the range delete is visible again.
  put(column::messages, "b", "again");
  EXPECT_EQ(*store_->get(column::messages, "b"), "again");
}

TEST_F(rocksdb_store_test, del_range_over_real_message_keys) {
  open();
  batch b;
  for (std::uint64_t off = 0; off < 600; ++off) {
    b.put(column::messages, keys::message(1, 0, off), "m");
    b.put(column::messages, keys::message(2, 0, off), "m");
  }
  ASSERT_TRUE(store_->write(b).ok());
  batch d;
  d.del_range(column::messages, keys::message(1, 0, 0), keys::message(1, 0, 256));
  ASSERT_TRUE(store_->write(d).ok());
  auto left = scan_all(*store_, column::messages, keys::topic_begin(1), keys::topic_end(1));
  ASSERT_EQ(left.size(), 344u);
  EXPECT_EQ(*keys::parse_message_offset(left.front().first), 256u);
  EXPECT_EQ(scan_all(*store_, column::messages, keys::topic_begin(2), keys::topic_end(2)).size(),
            600u);
  EXPECT_EQ(*keys::parse_message_offset(
                *store_->last_key(column::messages, keys::topic_begin(1), keys::topic_end(1))),
            599u);
}

// Retention's shape on the hinted families (storage/rocksdb/insert_hint.hpp):
// in-order puts per partition, acks' deletes, and range deletes whose begin
// keys are real message and delivery keys, all in one memtable. RocksDB
// 7.8 would insert those range tombstones with the point keys' splice and
// stop taking writes; every write must succeed and leave what the memory
// store leaves.
TEST_F(rocksdb_store_test, range_deletes_between_hinted_inserts_keep_every_key_right) {
  open();
  memory_store mem;
  std::uint64_t start[2] = {0, 0};
  for (std::uint64_t round = 0; round < 60; ++round) {
    batch b;
    for (std::uint32_t p = 0; p < 2; ++p) {
      for (std::uint64_t off = round * 20; off < round * 20 + 20; ++off) {
        b.put(column::messages, keys::message(1, p, off), "m");
        b.put(column::deliveries, keys::delivery(1, 1, p, off), "d");
      }
      for (std::uint64_t off = round * 20 >= 10 ? round * 20 - 10 : 0; off < round * 20; ++off) {
        b.del(column::deliveries, keys::delivery(1, 1, p, off));
      }
      const std::uint64_t upto = round * 20 >= 5 ? round * 20 - 5 : 0;
      b.del_range(column::messages, keys::message(1, p, start[p]), keys::message(1, p, upto));
      b.del_range(column::deliveries, keys::delivery(1, 1, p, start[p]),
                  keys::delivery(1, 1, p, upto));
      // A lease run (a delivery key and one byte) right below where the
      // next round's range delete begins, after this one's: in neither.
      if (upto > 0) b.put(column::deliveries, keys::lease_run(1, 1, p, upto - 1), "r");
      start[p] = std::max(start[p], upto);
    }
    auto r = store_->write(b);
    ASSERT_TRUE(r.ok()) << "round " << round << ": " << r.err().message;
    ASSERT_TRUE(mem.write(b).ok());
    if (round % 10 == 9) {
      for (column c : {column::messages, column::deliveries}) {
        ASSERT_EQ(scan_all(*store_, c), scan_all(mem, c)) << "round " << round;
      }
    }
  }
  // An all-zero begin key (no smaller key of its size).
  batch z;
  for (std::uint64_t off = 0; off < 6; ++off)
    z.put(column::messages, keys::message(0, 0, off), "z");
  z.del_range(column::messages, keys::message(0, 0, 0), keys::message(0, 0, 3));
  ASSERT_TRUE(store_->write(z).ok());
  ASSERT_TRUE(mem.write(z).ok());
  EXPECT_EQ(scan_all(*store_, column::messages), scan_all(mem, column::messages));
  reopen();
  EXPECT_EQ(scan_all(*store_, column::messages), scan_all(mem, column::messages));
  EXPECT_EQ(scan_all(*store_, column::deliveries), scan_all(mem, column::deliveries));
}

// A WAL written before the insert hint, with a range delete whose begin key
// is a message key, as the retention of earlier builds wrote it: the store
// opens (replaying it without the hint first), reads it right, and takes
// more writes of the same shape.
TEST_F(rocksdb_store_test, a_wal_from_before_the_insert_hint_replays) {
  open();
  store_.reset();
  const std::string path = options().data_dir;
  {
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    for (const auto& n : names) descs.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), path, descs, &handles, &raw).ok());
    rocksdb::ColumnFamilyHandle* messages = nullptr;
    for (auto* h : handles) {
      if (h->GetName() == "messages") messages = h;
    }
    ASSERT_NE(messages, nullptr);
    rocksdb::WriteBatch wb;
    for (std::uint64_t off = 0; off < 10; ++off) {
      ASSERT_TRUE(wb.Put(messages, keys::message(1, 0, off), "m").ok());
    }
    ASSERT_TRUE(wb.DeleteRange(messages, keys::message(1, 0, 0), keys::message(1, 0, 4)).ok());
    ASSERT_TRUE(raw->Write(rocksdb::WriteOptions(), &wb).ok());
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    ASSERT_TRUE(raw->Close().ok());
    delete raw;
  }
  open();
  auto left = scan_all(*store_, column::messages);
  ASSERT_EQ(left.size(), 6u);
  EXPECT_EQ(*keys::parse_message_offset(left.front().first), 4u);
  batch b;
  for (std::uint64_t off = 10; off < 20; ++off)
    b.put(column::messages, keys::message(1, 0, off), "m");
  b.del_range(column::messages, keys::message(1, 0, 4), keys::message(1, 0, 12));
  auto r = store_->write(b);
  ASSERT_TRUE(r.ok()) << r.err().message;
  left = scan_all(*store_, column::messages);
  ASSERT_EQ(left.size(), 8u);
  EXPECT_EQ(*keys::parse_message_offset(left.front().first), 12u);
}

TEST_F(rocksdb_store_test, scan_is_ordered_half_open_and_bytewise) {
  open();
  put(column::meta, std::string("b\0", 2), "2");
  put(column::meta, "b", "1");
  put(column::meta, "\xff", "4");
  put(column::meta, "c", "3");
  put(column::meta, "a", "0");
  EXPECT_EQ(scan_all(*store_, column::meta, "b", "c"),
            (pairs{{"b", "1"}, {std::string("b\0", 2), "2"}}));
  EXPECT_EQ(scan_all(*store_, column::meta, "a", "\xff").size(), 4u);
  EXPECT_EQ(scan_all(*store_, column::meta).size(), 5u);
  EXPECT_TRUE(scan_all(*store_, column::meta, "c", "c").empty());
  EXPECT_TRUE(scan_all(*store_, column::meta, "d", "c").empty());
}

TEST_F(rocksdb_store_test, scan_stops_when_the_visitor_says_so) {
  open();
  for (auto k : {"a", "b", "c"}) put(column::meta, k, "v");
  std::vector<std::string> seen;
  auto r = store_->scan(column::meta, "a", "z", [&](std::string_view k, std::string_view) {
    seen.emplace_back(k);
    return seen.size() < 2;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
}

TEST_F(rocksdb_store_test, last_key_respects_both_bounds) {
  open();
  for (auto k : {"b", "d", "f"}) put(column::messages, k, "v");
  EXPECT_EQ(*store_->last_key(column::messages, "a", "z"), "f");
  EXPECT_EQ(*store_->last_key(column::messages, "a", "f"), "d");  // end is exclusive
  EXPECT_EQ(*store_->last_key(column::messages, "d", "e"), "d");  // begin is inclusive
  EXPECT_EQ(*store_->last_key(column::messages, "a", std::string("d\0", 2)), "d");
  EXPECT_EQ(store_->last_key(column::messages, "e", "f").code(), errc::not_found);
  EXPECT_EQ(store_->last_key(column::messages, "g", "z").code(), errc::not_found);
  EXPECT_EQ(store_->last_key(column::messages, "", "b").code(), errc::not_found);
  EXPECT_EQ(store_->last_key(column::messages, "f", "a").code(), errc::not_found);
  EXPECT_EQ(store_->last_key(column::meta, "", "z").code(), errc::not_found);
}

TEST_F(rocksdb_store_test, last_key_skips_deleted_keys) {
  open();
  for (auto k : {"b", "d", "f"}) put(column::messages, k, "v");
  batch b;
  b.del(column::messages, "f");
  b.del_range(column::messages, "c", "e");
  ASSERT_TRUE(store_->write(b).ok());
  EXPECT_EQ(*store_->last_key(column::messages, "a", "z"), "b");
}

// Random batches applied to both stores must leave them identical: the
// memory store is the reference for the contract.
TEST_F(rocksdb_store_test, behaves_like_the_memory_store) {
  open();
  memory_store ref;
  std::mt19937 rng(20240601);
  const std::string alphabet("\0a\x7f\xff", 4);
  auto random_key = [&] {
    std::string k;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) k.push_back(alphabet[rng() % alphabet.size()]);
    return k;
  };
  auto ordered_pair = [&] {
    auto a = random_key(), b = random_key();
    if (b < a) std::swap(a, b);
    return std::pair{a, b};
  };
  const column cols[] = {column::meta, column::keys};

  for (int round = 0; round < 400; ++round) {
    batch b;
    const int ops = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < ops; ++i) {
      const column c = cols[rng() % 2];
      switch (rng() % 6) {
        case 0:
          b.del(c, random_key());
          break;
        case 1: {
          auto [lo, hi] = ordered_pair();
          b.del_range(c, lo, hi);
          break;
        }
        default:
          b.put(c, random_key(), numbered("v", rng() % 1000));
          break;
      }
    }
    ASSERT_TRUE(ref.write(b).ok());
    ASSERT_TRUE(store_->write(b).ok());
    if (round == 200) reopen();  // recovery from the WAL must not change anything

    for (column c : cols) {
      ASSERT_EQ(scan_all(*store_, c), scan_all(ref, c)) << "round " << round;
      auto [lo, hi] = ordered_pair();
      auto want = ref.last_key(c, lo, hi);
      auto got = store_->last_key(c, lo, hi);
      ASSERT_EQ(got.code(), want.code()) << "round " << round;
      if (want.ok()) {
        ASSERT_EQ(*got, *want);
      }
      const auto k = random_key();
      auto want_v = ref.get(c, k);
      auto got_v = store_->get(c, k);
      ASSERT_EQ(got_v.code(), want_v.code());
      if (want_v.ok()) {
        ASSERT_EQ(*got_v, *want_v);
      }
      ASSERT_EQ(scan_all(*store_, c, lo, hi), scan_all(ref, c, lo, hi));
    }
  }
}

// ---- persistence --------------------------------------------------------

TEST_F(rocksdb_store_test, data_survives_close_and_reopen) {
  open();
  batch b;
  for (int c = 0; c < k_column_count; ++c) {
    b.put(static_cast<column>(c), "k", std::to_string(c));
  }
  b.put(column::messages, "gone", "x");
  b.del_range(column::messages, "gone", "gone\x01");
  ASSERT_TRUE(store_->write(b).ok());
  reopen();
  for (int c = 0; c < k_column_count; ++c) {
    EXPECT_EQ(*store_->get(static_cast<column>(c), "k"), std::to_string(c));
  }
  EXPECT_EQ(store_->get(column::messages, "gone").code(), errc::not_found);

  put(column::meta, "after", "reopen");
  EXPECT_EQ(*store_->get(column::meta, "after"), "reopen");
  reopen();
  EXPECT_EQ(*store_->get(column::meta, "after"), "reopen");
}

constexpr const char* k_kill_dir_env = "ONCEQ_KILL_TEST_DIR";
constexpr std::uint64_t k_kill_writes = 1000;

// The victim of writes_survive_kill_9_without_fsync, run in a fresh process
// (a forked child of a process with RocksDB threads is not safe to use).
// Disabled so that it never runs on its own.
TEST(rocksdb_store_kill_child, DISABLED_write_then_die) {
  const char* dir = std::getenv(k_kill_dir_env);
  if (dir == nullptr) GTEST_SKIP() << "run only by writes_survive_kill_9_without_fsync";
  storage_options o;
  o.data_dir = dir;
  o.fsync = fsync_policy{fsync_policy::mode::none, {}};
  auto r = rocksdb_store::open(o);
  if (!r.ok()) ::_exit(2);
  auto& s = **r;
  for (std::uint64_t off = 0; off < k_kill_writes; ++off) {
    batch b;
    b.put(column::messages, keys::message(1, 0, off), "m");
    b.put(column::meta, "head", encode_u64(off));
    if (!s.write(b).ok()) ::_exit(3);
  }
  // What the shard's loop does before it answers a round: under none,
  // when_durable writes the WAL's buffer to its file and answers at once.
  bool answered = false;
  s.when_durable([&answered](result<void> r) { answered = r.ok(); });
  if (!answered) ::_exit(5);
  ::kill(::getpid(), SIGKILL);
  ::_exit(4);
}

// A process killed without closing the store (kill -9) loses nothing that
// when_durable() answered, even without any fsync: the WAL's buffer is
// written with write(2) before it answers (once for all the writes before
// it), and the OS page cache outlives the process.
TEST_F(rocksdb_store_test, writes_survive_kill_9_without_fsync) {
  const storage_options o = options(fsync_policy{fsync_policy::mode::none, {}});

  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls until exec.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(std::string(k_kill_dir_env) + "=" + o.data_dir);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=rocksdb_store_kill_child.DISABLED_write_then_die";
  std::string also_disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), also_disabled.data(), nullptr};

  const pid_t pid = ::fork();
  ASSERT_NE(pid, -1);
  if (pid == 0) {
    ::alarm(60);  // a hang fails the test (SIGALRM) instead of blocking it
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
    ::execve(self.c_str(), argv, envp.data());
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  // The dead store's WAL ends in zeros (written ahead, never trimmed by a
  // close): recovery must read past them.
  std::uintmax_t wal_bytes = 0;
  for (auto n : wal_sizes(o.data_dir)) wal_bytes += n;
  EXPECT_GE(wal_bytes, o.wal_prezero_bytes);

  auto r = rocksdb_store::open(o);
  ASSERT_TRUE(r.ok()) << r.err().message;
  store_ = std::move(r).value();
  EXPECT_EQ(scan_all(*store_, column::messages).size(), k_kill_writes);
  auto head = store_->get(column::meta, "head");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(*decode_u64(*head), k_kill_writes - 1);
}

TEST_F(rocksdb_store_test, data_survives_reopen_after_compaction) {
  open();
  for (int i = 0; i < 100; ++i) put(column::deliveries, keys::delivery(1, 1, 0, i), "d");
  ASSERT_TRUE(store_->compact_all().ok());
  reopen();
  EXPECT_EQ(scan_all(*store_, column::deliveries).size(), 100u);
}

// ---- reads from memory only (a shard's loop never waits for the disk) ---

TEST_F(rocksdb_store_test, memory_reads_answer_would_block_until_the_misses_are_warmed) {
  open();
  for (int i = 0; i < 200; ++i) put(column::messages, keys::message(1, 0, i), numbered("v", i));
  // In SST files now, and a new store's block cache is empty.
  ASSERT_TRUE(store_->compact_all().ok());
  reopen();
  put(column::messages, keys::message(1, 0, 500), "in the memtable");

  store_->memory_reads(true);
  // The memtable answers without the disk; what is only on disk does not,
  // and nothing waits.
  auto many =
      store_->multi_get(column::messages, {keys::message(1, 0, 500), keys::message(1, 0, 9)});
  ASSERT_EQ(many.size(), 2u);
  EXPECT_EQ(*many[0], "in the memtable");
  EXPECT_EQ(many[1].code(), errc::would_block);
  EXPECT_EQ(store_->get(column::messages, keys::message(1, 0, 7)).code(), errc::would_block);
  std::size_t seen = 0;
  auto scanned = store_->scan(column::messages, keys::message(1, 0, 100), keys::message(1, 0, 150),
                              [&](std::string_view, std::string_view) { return ++seen, true; });
  EXPECT_EQ(scanned.code(), errc::would_block);
  EXPECT_EQ(
      store_->last_key(column::messages, keys::message(1, 0, 0), keys::message(1, 0, 199)).code(),
      errc::would_block);
  const read_misses misses = store_->take_read_misses();
  EXPECT_EQ(misses.keys.size(), 2u);
  EXPECT_EQ(misses.ranges.size(), 2u);
  EXPECT_TRUE(store_->take_read_misses().empty());  // taken

  // Warmed on another thread (the shard's reader), the same reads succeed
  // from memory.
  std::thread([&] { store_->warm(misses); }).join();
  EXPECT_EQ(*store_->get(column::messages, keys::message(1, 0, 7)), "v7");
  EXPECT_EQ(*store_->multi_get(column::messages, {keys::message(1, 0, 9)})[0], "v9");
  seen = 0;
  ASSERT_TRUE(store_
                  ->scan(column::messages, keys::message(1, 0, 100), keys::message(1, 0, 150),
                         [&](std::string_view, std::string_view) { return ++seen, true; })
                  .ok());
  EXPECT_EQ(seen, 50u);
  EXPECT_EQ(*store_->last_key(column::messages, keys::message(1, 0, 0), keys::message(1, 0, 199)),
            keys::message(1, 0, 198));
  EXPECT_TRUE(store_->take_read_misses().empty());

  // Off again: reads wait for the disk as before, and nothing is a miss.
  store_->memory_reads(false);
  EXPECT_EQ(*store_->get(column::messages, keys::message(1, 0, 3)), "v3");
  EXPECT_TRUE(store_->take_read_misses().empty());
}

// A range named by read_soon is warmed with the misses, up to its byte
// bound; it is kept only while reads come from memory.
TEST_F(rocksdb_store_test, read_soon_is_warmed_with_the_misses_up_to_its_bytes) {
  open();
  const std::string value(100, 'v');
  for (int i = 0; i < 2000; ++i) put(column::messages, keys::message(1, 0, i), value);
  ASSERT_TRUE(store_->compact_all().ok());
  reopen();
  auto scan_from_memory = [&](int from, int upto) {
    std::size_t seen = 0;
    auto r = store_->scan(column::messages, keys::message(1, 0, from), keys::message(1, 0, upto),
                          [&](std::string_view, std::string_view) { return ++seen, true; });
    return r.ok() ? result<std::size_t>(seen) : result<std::size_t>(std::move(r).err());
  };

  // Reads that may wait for the disk keep nothing.
  store_->read_soon(column::messages, keys::message(1, 0, 0), keys::message(1, 0, 10), 1000);
  EXPECT_TRUE(store_->take_read_misses().empty());

  store_->memory_reads(true);
  EXPECT_EQ(scan_from_memory(0, 10).code(), errc::would_block);
  // An empty range is nothing to read.
  store_->read_soon(column::messages, keys::message(1, 0, 10), keys::message(1, 0, 10), 1000);
  store_->read_soon(column::messages, keys::message(1, 0, 10), keys::message(1, 0, 2000), 5000);
  const read_misses misses = store_->take_read_misses();
  ASSERT_EQ(misses.ranges.size(), 2u);
  EXPECT_EQ(misses.ranges[1].begin, keys::message(1, 0, 10));
  EXPECT_EQ(misses.ranges[1].end, keys::message(1, 0, 2000));
  EXPECT_EQ(misses.ranges[1].max_bytes, 5000u);
  EXPECT_EQ(scan_from_memory(10, 11).code(), errc::would_block);  // not read yet
  store_->take_read_misses();  // that scan's own miss: not warmed

  std::thread([&] { store_->warm(misses); }).join();
  // The missed range and the first 5000 bytes after it come from memory.
  EXPECT_EQ(*scan_from_memory(0, 10), 10u);
  EXPECT_EQ(*scan_from_memory(10, 60), 50u);
  // The rest of the named range was not read: 190 KB at 100 bytes a value.
  EXPECT_EQ(scan_from_memory(1900, 2000).code(), errc::would_block);
  store_->memory_reads(false);
}

TEST_F(rocksdb_store_test, a_second_open_of_the_same_dir_is_refused) {
  open();
  auto second = rocksdb_store::open(options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.code(), errc::unavailable);
  EXPECT_FALSE(second.err().message.empty());
}

TEST_F(rocksdb_store_test, open_rejects_bad_options) {
  storage_options o = options();
  o.data_dir = "";
  EXPECT_EQ(rocksdb_store::open(o).code(), errc::invalid_argument);

  o = options(fsync_policy{fsync_policy::mode::interval, std::chrono::milliseconds{0}});
  EXPECT_EQ(rocksdb_store::open(o).code(), errc::invalid_argument);

  // A regular file where the data dir should be.
  const auto file = fs::path(dir_) / "file";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  o = options();
  o.data_dir = file.string();
  auto r = rocksdb_store::open(o);
  EXPECT_FALSE(r.ok());
}

TEST_F(rocksdb_store_test, disk_bytes_counts_wal_and_sst_files) {
  open();
  const auto before = store_->disk_bytes();
  batch b;
  b.put(column::messages, "big", std::string(100'000, 'x'));
  ASSERT_TRUE(store_->write(b).ok());
  wait_durable();  // the WAL's buffer reaches its file
  const auto with_wal = store_->disk_bytes();
  EXPECT_GE(with_wal, before + 1'000);  // the WAL holds it (LZ4 may shrink it in SSTs only)
  ASSERT_TRUE(store_->compact_all().ok());
  EXPECT_GT(store_->disk_bytes(), 0u);
}

// ---- WAL zeros ahead ------------------------------------------------------

TEST(prezeroed_wal_file_system_test, wraps_only_wal_file_names) {
  using f = prezeroed_wal_file_system;
  EXPECT_TRUE(f::is_wal_name("000004.log"));
  EXPECT_TRUE(f::is_wal_name("/var/lib/onceq/000123.log"));
  EXPECT_FALSE(f::is_wal_name("LOG"));
  EXPECT_FALSE(f::is_wal_name("/d/LOG.old.1795259262345917"));
  EXPECT_FALSE(f::is_wal_name("MANIFEST-000005"));
  EXPECT_FALSE(f::is_wal_name("000007.sst"));
  EXPECT_FALSE(f::is_wal_name(".log"));
  EXPECT_FALSE(f::is_wal_name("/d/.log"));
  EXPECT_FALSE(f::is_wal_name("a1.log"));
  EXPECT_FALSE(f::is_wal_name("000004.log.tmp"));
}

TEST_F(rocksdb_store_test, the_open_wal_has_zeros_ahead_and_a_clean_close_trims_them) {
  auto o = options();
  o.wal_prezero_bytes = 1u << 20;
  open_with(o);
  put(column::messages, "m", std::string(1000, 'x'));
  wait_durable();
  auto open_sizes = wal_sizes(o.data_dir);
  ASSERT_EQ(open_sizes.size(), 1u);
  EXPECT_GE(open_sizes[0], 1u << 20);  // one write of ~1 KB, at least a chunk of zeros

  store_.reset();
  auto closed = wal_sizes(o.data_dir);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_GT(closed[0], 1000u);
  EXPECT_LT(closed[0], 4096u);  // what RocksDB wrote, no zeros

  open();
  EXPECT_EQ(store_->get(column::messages, "m")->size(), 1000u);
}

TEST_F(rocksdb_store_test, zeros_ahead_can_be_turned_off) {
  auto o = options();
  o.wal_prezero_bytes = 0;
  open_with(o);
  put(column::messages, "m", std::string(1000, 'x'));
  auto sizes = wal_sizes(o.data_dir);
  ASSERT_EQ(sizes.size(), 1u);
  EXPECT_LT(sizes[0], 4096u);
}

// Zeros are written a chunk at a time as the WAL grows, never over data: a
// WAL many chunks long reads back whole after a reopen.
TEST_F(rocksdb_store_test, a_wal_longer_than_many_chunks_reads_back_whole) {
  auto o = options(fsync_policy{fsync_policy::mode::none, {}});
  o.wal_prezero_bytes = 64u << 10;   // the smallest chunk: many refills
  o.write_buffer_bytes = 64u << 20;  // everything stays in the WAL
  open_with(o);
  const std::string value(700, 'v');
  for (std::uint64_t i = 0; i < 2000; ++i) {
    batch b;
    b.put(column::messages, keys::message(1, 0, i), value + std::to_string(i));
    ASSERT_TRUE(store_->write(b).ok());
  }
  open_with(o);
  auto all = scan_all(*store_, column::messages);
  ASSERT_EQ(all.size(), 2000u);
  for (std::uint64_t i = 0; i < 2000; ++i) EXPECT_EQ(all[i].second, value + std::to_string(i));
}

// ---- durability callbacks and group commit ------------------------------

TEST_F(rocksdb_store_test, when_durable_callbacks_all_run_in_order) {
  open();
  std::mutex mu;
  std::vector<int> order;
  constexpr int n = 1000;
  for (int i = 0; i < n; ++i) {
    put(column::messages, keys::message(1, 0, i), "m");
    store_->when_durable([&, i](result<void> r) {
      EXPECT_TRUE(r.ok());
      std::lock_guard lk(mu);
      order.push_back(i);
    });
  }
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return order.size() == n;
  }));
  std::vector<int> want(n);
  for (int i = 0; i < n; ++i) want[i] = i;
  std::lock_guard lk(mu);
  EXPECT_EQ(order, want);
  EXPECT_GE(store_->syncs(), 1u);
  EXPECT_LE(store_->syncs(), static_cast<std::uint64_t>(n));
}

// GET /metrics' onceq_wal_sync_*: every sync that ran is timed, and every
// callback it released is counted.
TEST_F(rocksdb_store_test, sync_stats_time_the_syncs_and_count_their_waiters) {
  open();
  std::atomic<int> ran{0};
  constexpr int n = 200;
  for (int i = 0; i < n; ++i) {
    put(column::messages, keys::message(1, 0, i), "m");
    store_->when_durable([&](result<void> r) {
      EXPECT_TRUE(r.ok());
      ran.fetch_add(1);
    });
  }
  ASSERT_TRUE(eventually([&] { return ran.load() == n; }));
  const std::optional<sync_stats> s = store_->wal_sync_stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_GE(s->count, 1u);
  EXPECT_LE(s->count, static_cast<std::uint64_t>(n));
  EXPECT_EQ(s->count, store_->syncs());
  EXPECT_GT(s->sum_ns, 0u);
  EXPECT_EQ(s->waiters, static_cast<std::uint64_t>(n));
}

// While one sync is in progress, every callback registered meanwhile must
// share the next sync. The first callback stands in for a slow fsync: it
// holds the syncer until all the others have been registered.
TEST_F(rocksdb_store_test, callbacks_that_queue_during_a_sync_share_the_next_one) {
  open();
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> ran{0};
  std::vector<int> order;  // touched on the syncer thread only until ran == n + 1

  put(column::meta, "first", "x");
  store_->when_durable([&](result<void> r) {
    EXPECT_TRUE(r.ok());
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return release; });
    order.push_back(0);
    ran.fetch_add(1);
  });
  constexpr int n = 1000;
  for (int i = 1; i <= n; ++i) {
    put(column::messages, keys::message(1, 0, i), "m");
    store_->when_durable([&, i](result<void> r) {
      EXPECT_TRUE(r.ok());
      order.push_back(i);
      ran.fetch_add(1);
    });
  }
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(eventually([&] { return ran.load() == n + 1; }));

  std::vector<int> want(n + 1);
  for (int i = 0; i <= n; ++i) want[i] = i;
  EXPECT_EQ(order, want);
  // One sync for the first batch, one for everything that queued behind it.
  EXPECT_GE(store_->syncs(), 1u);
  EXPECT_LE(store_->syncs(), 2u);
}

// sync_here on an idle syncer: the sync runs on the caller, the callback
// before it returns, and the store is idle again after. Behind a round the
// syncer still holds, the callback joins the syncer's next round, after
// that round's callbacks.
TEST_F(rocksdb_store_test, sync_here_syncs_on_the_caller_when_idle_and_queues_behind_a_round) {
  open();
  ASSERT_TRUE(eventually([&] { return store_->sync_idle(); }));
  put(column::messages, keys::message(1, 0, 1), "m");
  const std::uint64_t syncs = store_->syncs();
  const auto caller = std::this_thread::get_id();
  bool ran_here = false;
  store_->sync_here([&](result<void> r) {
    EXPECT_TRUE(r.ok());
    ran_here = std::this_thread::get_id() == caller;
  });
  EXPECT_TRUE(ran_here);
  EXPECT_EQ(store_->syncs(), syncs + 1);
  EXPECT_TRUE(store_->sync_idle());

  // A round held on the syncer (its callback blocks it), then sync_here.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<int> order;
  std::atomic<int> ran{0};
  put(column::messages, keys::message(1, 0, 2), "m");
  store_->when_durable([&](result<void>) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return release; });
    order.push_back(1);
    ran.fetch_add(1);
  });
  EXPECT_FALSE(store_->sync_idle());
  put(column::messages, keys::message(1, 0, 3), "m");
  store_->sync_here([&](result<void> r) {
    EXPECT_TRUE(r.ok());
    EXPECT_NE(std::this_thread::get_id(), caller);
    order.push_back(2);
    ran.fetch_add(1);
  });
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(eventually([&] { return ran.load() == 2; }));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(eventually([&] { return store_->sync_idle(); }));
}

// Many concurrent requests (writes serialized as the core thread would, each
// request waiting for its own durability) share syncs.
TEST_F(rocksdb_store_test, concurrent_waiters_share_syncs) {
  open();
  constexpr int threads = 8;
  constexpr int per_thread = 100;
  std::mutex core;  // write() is called by one thread at a time
  std::vector<std::thread> pool;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        // Shared: the syncer may still be inside set_value when get() returns.
        auto durable = std::make_shared<std::promise<result<void>>>();
        auto f = durable->get_future();
        {
          std::lock_guard lk(core);
          batch b;
          b.put(column::deliveries, keys::delivery(1, t, 0, i), "d");
          if (!store_->write(b).ok()) failures.fetch_add(1);
          store_->when_durable([durable](result<void> r) { durable->set_value(std::move(r)); });
        }
        if (!f.get().ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(scan_all(*store_, column::deliveries).size(),
            static_cast<std::size_t>(threads * per_thread));
  const auto syncs = store_->syncs();
  RecordProperty("syncs", static_cast<int>(syncs));
  EXPECT_GE(syncs, 1u);
  // With 8 requests in flight, a sync almost always covers several of them.
  EXPECT_LT(syncs, static_cast<std::uint64_t>(threads * per_thread / 2)) << syncs << " syncs";
}

TEST_F(rocksdb_store_test, no_sync_when_nothing_was_written) {
  open();
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) store_->when_durable([&](result<void>) { ran.fetch_add(1); });
  ASSERT_TRUE(eventually([&] { return ran.load() == 10; }));
  EXPECT_EQ(store_->syncs(), 0u);
  // The skipped syncs are not timed; their callbacks still waited for the syncer.
  expect_sync_stats(0, 10);
}

TEST_F(rocksdb_store_test, close_runs_every_pending_callback) {
  open();
  std::atomic<int> ok{0};
  constexpr int n = 500;
  for (int i = 0; i < n; ++i) {
    put(column::meta, numbered("k", i), "v");
    store_->when_durable([&](result<void> r) {
      if (r.ok()) ok.fetch_add(1);
    });
  }
  store_.reset();  // no waiting: the destructor must drain
  EXPECT_EQ(ok.load(), n);
}

TEST_F(rocksdb_store_test, interval_policy_answers_at_once_and_syncs_in_the_background) {
  open(fsync_policy{fsync_policy::mode::interval, std::chrono::milliseconds{5}});
  put(column::meta, "k", "v");
  bool ran = false;
  store_->when_durable([&](result<void> r) {
    EXPECT_TRUE(r.ok());
    ran = true;
  });
  EXPECT_TRUE(ran);  // inline, on this thread
  EXPECT_TRUE(eventually([&] { return store_->syncs() >= 1; }));
}

// One timed sync per interval that has new writes to cover; answers are
// inline, so nobody waits for the syncer.
TEST_F(rocksdb_store_test, interval_policy_times_the_syncs_that_cover_new_writes) {
  open(fsync_policy{fsync_policy::mode::interval, std::chrono::milliseconds{1}});
  auto syncs = [&] { return store_->wal_sync_stats().value_or(sync_stats{}).count; };
  put(column::meta, "k1", "v");
  ASSERT_TRUE(eventually([&] { return syncs() >= 1; }));
  put(column::meta, "k2", "v");
  store_->when_durable([](result<void> r) { EXPECT_TRUE(r.ok()); });
  ASSERT_TRUE(eventually([&] { return syncs() >= 2; }));
  // One sync per write: each was synced before the next was made.
  expect_sync_stats(2, 0);
}

TEST_F(rocksdb_store_test, none_policy_answers_at_once_and_never_syncs) {
  open(fsync_policy{fsync_policy::mode::none, {}});
  int ran = 0;
  for (int i = 0; i < 100; ++i) {
    put(column::meta, numbered("k", i), "v");
    store_->when_durable([&](result<void> r) {
      EXPECT_TRUE(r.ok());
      ++ran;
    });
  }
  EXPECT_EQ(ran, 100);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(store_->syncs(), 0u);
  // Still reported (the store has a WAL), as zeros.
  const auto s = store_->wal_sync_stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->waiters, 0u);
  reopen();  // a clean close still leaves everything readable
  EXPECT_EQ(scan_all(*store_, column::meta).size(), 100u);
}

// ---- compaction filter --------------------------------------------------

TEST_F(rocksdb_store_test, compaction_drops_expired_keys_and_dedup_entries_only) {
  open();
  const millis now = clock_.now_ms();
  auto key_with = [](millis exp) {
    key_record k;
    k.expires_at_ms = exp;
    k.owner = "w";
    return encode(k);
  };
  auto dedup_with = [](millis exp) {
    dedup_record d;
    d.expires_at_ms = exp;
    return encode(d);
  };
  batch b;
  b.put(column::keys, "expired", key_with(now - 1));
  b.put(column::keys, "future", key_with(now + 1'000));
  b.put(column::keys, "forever", key_with(0));
  b.put(column::dedup, "expired", dedup_with(now - 1));
  b.put(column::dedup, "future", dedup_with(now + 1'000));
  // Other families are never filtered, whatever their bytes look like.
  b.put(column::messages, "looks-expired", key_with(now - 1));
  b.put(column::deliveries, "looks-expired", key_with(now - 1));
  b.put(column::meta, "looks-expired", key_with(now - 1));
  ASSERT_TRUE(store_->write(b).ok());

  ASSERT_TRUE(store_->compact_all().ok());
  EXPECT_EQ(store_->get(column::keys, "expired").code(), errc::not_found);
  EXPECT_EQ(store_->get(column::dedup, "expired").code(), errc::not_found);
  EXPECT_TRUE(store_->get(column::keys, "future").ok());
  EXPECT_TRUE(store_->get(column::keys, "forever").ok());
  EXPECT_TRUE(store_->get(column::dedup, "future").ok());
  EXPECT_TRUE(store_->get(column::messages, "looks-expired").ok());
  EXPECT_TRUE(store_->get(column::deliveries, "looks-expired").ok());
  EXPECT_TRUE(store_->get(column::meta, "looks-expired").ok());

  // Time passes: the next compaction takes the rest, except "forever".
  clock_.advance(1'001);
  ASSERT_TRUE(store_->compact_all().ok());
  EXPECT_EQ(store_->get(column::keys, "future").code(), errc::not_found);
  EXPECT_EQ(store_->get(column::dedup, "future").code(), errc::not_found);
  EXPECT_TRUE(store_->get(column::keys, "forever").ok());

  reopen();  // dropped for good, not hidden
  EXPECT_EQ(store_->get(column::keys, "expired").code(), errc::not_found);
  EXPECT_EQ(scan_all(*store_, column::keys), (pairs{{"forever", key_with(0)}}));
}

TEST_F(rocksdb_store_test, an_expired_overwrite_does_not_resurrect_the_older_value) {
  open();
  const millis now = clock_.now_ms();
  key_record live;
  live.expires_at_ms = now + 1'000'000;
  put(column::keys, "k", encode(live));
  ASSERT_TRUE(store_->compact_all().ok());  // the old value sits in the last level
  key_record expired;
  expired.expires_at_ms = now + 10;
  put(column::keys, "k", encode(expired));
  clock_.advance(11);
  ASSERT_TRUE(store_->compact_all().ok());
  EXPECT_EQ(store_->get(column::keys, "k").code(), errc::not_found);
}

// ---- fsync policy -------------------------------------------------------

TEST(fsync_policy_test, parses_the_three_forms) {
  auto a = fsync_policy::parse("always");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, fsync_policy::mode::always);
  auto n = fsync_policy::parse("none");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->kind, fsync_policy::mode::none);
  auto i = fsync_policy::parse("interval:250");
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->kind, fsync_policy::mode::interval);
  EXPECT_EQ(i->interval, std::chrono::milliseconds{250});
  EXPECT_EQ(fsync_policy::parse("interval:1")->interval, std::chrono::milliseconds{1});
  EXPECT_EQ(fsync_policy::parse("interval:60000")->interval, std::chrono::milliseconds{60'000});
}

TEST(fsync_policy_test, rejects_everything_else) {
  for (const char* bad : {"", "Always", "always ", "never", "interval", "interval:", "interval:0",
                          "interval:60001", "interval:-5", "interval:+5", "interval:10ms",
                          "interval: 10", "interval:99999999999999999999"}) {
    auto r = fsync_policy::parse(bad);
    EXPECT_EQ(r.code(), errc::invalid_argument) << '"' << bad << '"';
    if (!r.ok()) {
      EXPECT_NE(r.err().message.find("interval:<ms>"), std::string::npos);
    }
  }
}

TEST(fsync_policy_test, to_string_round_trips) {
  for (const char* text : {"always", "none", "interval:10", "interval:60000"}) {
    auto p = fsync_policy::parse(text);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->to_string(), text);
  }
  EXPECT_EQ(fsync_policy{}.to_string(), "always");
}

// ---- --wal-sync loop: the writer syncs, at the end of its iteration -----

TEST_F(rocksdb_store_test,
       with_sync_on_caller_one_sync_pending_answers_every_waiter_on_the_caller) {
  auto o = options();  // fsync always
  o.sync_on_caller = true;
  open_with(o);
  const auto before = store_->syncs();
  std::vector<int> answered;
  for (int i = 0; i < 3; ++i) {
    put(column::messages, "k" + std::to_string(i), "v");
    store_->when_durable([&answered, i](result<void> r) {
      EXPECT_TRUE(r.ok());
      answered.push_back(i);  // on this thread: no lock needed
    });
  }
  // No syncer thread: nothing is answered until the caller syncs.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(answered.empty());
  store_->sync_pending();
  EXPECT_EQ(answered, (std::vector<int>{0, 1, 2}));  // in order, by one sync
  EXPECT_EQ(store_->syncs(), before + 1);
  store_->sync_pending();  // nothing pending: no sync
  EXPECT_EQ(store_->syncs(), before + 1);
}

// sync_idle(): a syncer thread with nothing to do. It is not idle from a
// when_durable until that callback ran; a store without a syncer thread
// (sync_on_caller, interval) never is.
TEST_F(rocksdb_store_test, sync_idle_while_the_syncer_thread_waits_for_work) {
  const auto eventually_idle = [this] {
    for (int i = 0; i < 500 && !store_->sync_idle(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return store_->sync_idle();
  };
  open();  // fsync always, on the syncer thread
  ASSERT_TRUE(eventually_idle());
  put(column::messages, "k", "v");
  std::promise<void> entered, go_on;
  auto go = go_on.get_future();
  store_->when_durable([&](result<void> r) {
    EXPECT_TRUE(r.ok());
    entered.set_value();
    go.wait();  // the syncer runs this callback: it is busy until it returns
  });
  entered.get_future().wait();
  EXPECT_FALSE(store_->sync_idle());
  go_on.set_value();
  EXPECT_TRUE(eventually_idle());

  auto o = options();
  o.sync_on_caller = true;
  open_with(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(store_->sync_idle());
  open(fsync_policy{fsync_policy::mode::interval, std::chrono::milliseconds{5}});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(store_->sync_idle());
}

// ---- write stalls: counted, then waited for -----------------------------

TEST_F(rocksdb_store_test, a_stalled_write_is_counted_waits_for_the_flush_and_loses_nothing) {
  auto o = options();
  o.write_buffer_bytes = 256 << 10;  // memtables fill after a few hundred writes
  open_with(o);
  store_->watch_write_stalls();
  // No flush can run: once the memtables are full, RocksDB stalls writes.
  store_->pause_background_work_for_test();
  const std::string value(4096, 'v');
  std::atomic<int> written{0};
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    for (int i = 0; i < 2'000; ++i) {
      batch b;
      b.put(column::messages, "k" + std::to_string(i), value);
      if (!store_->write(b).ok()) failed = true;
      written.fetch_add(1);
    }
  });
  // The writer stalls (counted) and stays stalled while flushes are paused.
  for (int i = 0; i < 10'000 && store_->write_stalls() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(store_->write_stalls(), 1u) << "no stall after " << written.load() << " writes";
  const int at_stall = written.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(written.load(), at_stall);  // waiting, not failing
  EXPECT_TRUE(store_->health().writable);
  // Flushes run again: the stalled write goes in, then the rest.
  store_->continue_background_work_for_test();
  writer.join();
  EXPECT_FALSE(failed.load());
  for (int i = 0; i < 2'000; ++i) {
    ASSERT_TRUE(store_->get(column::messages, "k" + std::to_string(i)).ok()) << i;
  }
}

TEST_F(rocksdb_store_test, without_watch_write_stalls_nothing_is_counted) {
  open();
  put(column::messages, "k", "v");
  EXPECT_EQ(store_->write_stalls(), 0u);
}

}  // namespace
}  // namespace onceq::storage
