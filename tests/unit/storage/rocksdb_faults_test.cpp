// rocksdb_store under a real full disk: its data dir on a small tmpfs that
// the test mounts, fills, and then grows. Needs root (mount); skipped
// otherwise.

#include <sys/mount.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "storage/rocksdb/rocksdb_store.hpp"

namespace onceq::storage {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::size_t k_value_bytes = 4096;

std::string key_of(std::uint64_t n) {
  std::string s("m");
  s.append(std::to_string(1'000'000 + n));  // fixed width: keys sort like n
  return s;
}

std::string value_of(std::uint64_t n) {
  std::string v(k_value_bytes, static_cast<char>('a' + n % 26));
  v.append(std::to_string(n));
  return v;
}

// Waits for the store's when_durable answer (the syncer runs it).
result<void> durable(store& s) {
  std::promise<result<void>> p;
  auto f = p.get_future();
  s.when_durable([&p](result<void> r) { p.set_value(std::move(r)); });
  if (f.wait_for(30s) != std::future_status::ready) {
    return make_error(errc::internal, "when_durable did not answer in 30 s");
  }
  return f.get();
}

class rocksdb_faults_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "needs root to mount a small tmpfs for the data dir (run as root, e.g. in "
                      "the dev container)";
    }
    std::string tmpl = (fs::temp_directory_path() / "onceq-faults-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    mnt_ = tmpl;
    ASSERT_EQ(::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=8M"), 0) << std::strerror(errno);
    mounted_ = true;
  }
  void TearDown() override {
    store_.reset();
    if (mounted_) {
      EXPECT_EQ(::umount(mnt_.c_str()), 0) << std::strerror(errno);
    }
    if (!mnt_.empty()) {
      std::error_code ec;
      fs::remove_all(mnt_, ec);
    }
  }

  void grow(std::string_view size) {
    const std::string data = "size=" + std::string(size);
    ASSERT_EQ(::mount("tmpfs", mnt_.c_str(), "tmpfs", MS_REMOUNT, data.c_str()), 0)
        << std::strerror(errno);
  }

  // write_buffer_bytes: 1 MiB makes a flush hit the full disk first; 16 MiB
  // (more than the disk) a WAL append.
  void open(std::size_t write_buffer_bytes = 1u << 20) {
    storage_options o;
    o.data_dir = mnt_ + "/db";
    o.fsync = fsync_policy{};  // always: when_durable waits for SyncWAL
    o.write_buffer_bytes = write_buffer_bytes;
    auto s = rocksdb_store::open(o);
    ASSERT_TRUE(s.ok()) << s.err().message;
    store_ = std::move(*s);
  }

  result<void> put(std::uint64_t n) {
    batch b;
    b.put(column::messages, key_of(n), value_of(n));
    return store_->write(b);
  }

  // Calls resume() every 100 ms (the runner does every 500 ms) until it
  // succeeds or 30 s pass.
  result<resume_outcome> resume_eventually() {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (true) {
      auto r = store_->resume();
      if (r.ok() || std::chrono::steady_clock::now() > deadline) return r;
      EXPECT_EQ(r.code(), errc::unavailable) << r.err().message;
      std::this_thread::sleep_for(100ms);
    }
  }

  std::string mnt_;
  bool mounted_ = false;
  std::unique_ptr<rocksdb_store> store_;
};

class rocksdb_faults_param_test : public rocksdb_faults_test,
                                  public ::testing::WithParamInterface<std::size_t> {};

INSTANTIATE_TEST_SUITE_P(flush_or_wal, rocksdb_faults_param_test,
                         ::testing::Values(std::size_t{1} << 20, std::size_t{16} << 20));

TEST_P(rocksdb_faults_param_test, a_full_disk_stops_writes_and_growing_it_resumes_them) {
  ASSERT_NO_FATAL_FAILURE(open(GetParam()));
  ASSERT_TRUE(store_->health().writable);
  EXPECT_EQ(store_->health().reason, "");

  // Fill the disk. acked: write and sync both answered ok (what a client was
  // told); written: write() returned ok (visible to get/scan).
  std::vector<std::uint64_t> acked;
  std::uint64_t written = 0;
  error fault;
  for (std::uint64_t n = 0; n < 100'000; ++n) {
    auto w = put(n);
    if (!w.ok()) {
      fault = w.err();
      break;
    }
    written = n + 1;
    auto d = durable(*store_);
    if (!d.ok()) {
      fault = d.err();
      break;
    }
    acked.push_back(n);
  }
  ASSERT_EQ(fault.code, errc::unavailable) << fault.message;
  ASSERT_GT(acked.size(), 100u) << "8 MiB should hold far more than 100 values of 4 KiB";
  std::cerr << "full after " << acked.size() << " acked writes (" << written
            << " written): " << fault.message << "\n";

  const store_health down = store_->health();
  EXPECT_FALSE(down.writable);
  EXPECT_NE(down.reason, "");

  // Fails fast now, with a retry hint, and changes nothing.
  auto refused = put(999'999);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), errc::unavailable);
  EXPECT_GT(refused.err().retry_after_ms, 0);
  // A read's durability barrier: when the fault came from a write itself
  // (the refused write applied nothing) nothing written is left unsynced
  // and it passes: reads are answered. When a write had returned into the
  // WAL's buffer and the buffer could not be written (the WAL is buffered
  // and written once per round), that write may be lost: the barrier
  // refuses, so that no read shows it, until resume() makes it durable.
  auto barrier = durable(*store_);
  if (written == acked.size()) {
    EXPECT_TRUE(barrier.ok()) << barrier.err().message;
  } else {
    ASSERT_FALSE(barrier.ok());
    EXPECT_EQ(barrier.code(), errc::unavailable);
  }

  // Reads still work.
  auto first = store_->get(column::messages, key_of(acked.front()));
  ASSERT_TRUE(first.ok()) << first.err().message;
  EXPECT_EQ(*first, value_of(acked.front()));

  // Still full: resume cannot succeed.
  auto early = store_->resume();
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.code(), errc::unavailable);
  EXPECT_FALSE(store_->health().writable);

  ASSERT_NO_FATAL_FAILURE(grow("64M"));
  const auto grown = std::chrono::steady_clock::now();
  auto resumed = resume_eventually();
  ASSERT_TRUE(resumed.ok()) << resumed.err().message;
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - grown);
  std::cerr << "writable again " << took.count() << " ms after the disk grew ("
            << (*resumed == resume_outcome::resumed ? "resumed in place" : "reopened") << ")\n";
  EXPECT_TRUE(store_->health().writable);
  EXPECT_EQ(store_->health().reason, "");
  EXPECT_EQ(store_->get(column::messages, key_of(999'999)).code(), errc::not_found);

  // Everything acked is there; in place, so is everything written.
  const std::uint64_t must_have = *resumed == resume_outcome::resumed ? written : acked.back() + 1;
  for (std::uint64_t n = 0; n < must_have; ++n) {
    auto v = store_->get(column::messages, key_of(n));
    ASSERT_TRUE(v.ok()) << n << ": " << v.err().message;
    ASSERT_EQ(*v, value_of(n)) << n;
  }

  // Writes work again, durably.
  for (std::uint64_t n = 200'000; n < 200'100; ++n) {
    auto w = put(n);
    ASSERT_TRUE(w.ok()) << w.err().message;
  }
  auto d = durable(*store_);
  ASSERT_TRUE(d.ok()) << d.err().message;

  // And all of it survives a restart.
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(open(GetParam()));
  for (std::uint64_t n = 0; n < must_have; ++n) {
    ASSERT_TRUE(store_->get(column::messages, key_of(n)).ok()) << n;
  }
  for (std::uint64_t n = 200'000; n < 200'100; ++n) {
    ASSERT_TRUE(store_->get(column::messages, key_of(n)).ok()) << n;
  }
}

TEST_F(rocksdb_faults_test, resume_while_writable_is_a_no_op) {
  ASSERT_NO_FATAL_FAILURE(open());
  ASSERT_TRUE(put(1).ok());
  auto r = store_->resume();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, resume_outcome::resumed);
  EXPECT_TRUE(store_->get(column::messages, key_of(1)).ok());
}

}  // namespace
}  // namespace onceq::storage
