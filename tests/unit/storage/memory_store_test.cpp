#include "storage/memory_store.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace onceq::storage {
namespace {

using pairs = std::vector<std::pair<std::string, std::string>>;

class memory_store_test : public ::testing::Test {
 protected:
  void put(column c, std::string k, std::string v) {
    batch b;
    b.put(c, std::move(k), std::move(v));
    ASSERT_TRUE(s_.write(b).ok());
  }
  pairs scan(column c, std::string_view begin, std::string_view end) {
    pairs out;
    auto r = s_.scan(c, begin, end, [&](std::string_view k, std::string_view v) {
      out.emplace_back(k, v);
      return true;
    });
    EXPECT_TRUE(r.ok());
    return out;
  }

  memory_store s_;
};

TEST_F(memory_store_test, get_of_a_missing_key_is_not_found) {
  auto r = s_.get(column::meta, "nope");
  EXPECT_EQ(r.code(), errc::not_found);
}

TEST_F(memory_store_test, put_then_get_and_overwrite) {
  put(column::meta, "k", "v1");
  EXPECT_EQ(*s_.get(column::meta, "k"), "v1");
  put(column::meta, "k", "v2");
  EXPECT_EQ(*s_.get(column::meta, "k"), "v2");
  EXPECT_EQ(s_.count(column::meta), 1u);
}

TEST_F(memory_store_test, columns_are_separate_key_spaces) {
  put(column::keys, "k", "in keys");
  EXPECT_EQ(s_.get(column::dedup, "k").code(), errc::not_found);
  EXPECT_EQ(*s_.get(column::keys, "k"), "in keys");
}

TEST_F(memory_store_test, batch_applies_in_order) {
  batch b;
  b.put(column::meta, "a", "1");
  b.del(column::meta, "a");
  b.put(column::meta, "b", "1");
  b.put(column::meta, "b", "2");
  ASSERT_TRUE(s_.write(b).ok());
  EXPECT_EQ(s_.get(column::meta, "a").code(), errc::not_found);
  EXPECT_EQ(*s_.get(column::meta, "b"), "2");
  EXPECT_EQ(s_.writes(), 1u);
}

TEST_F(memory_store_test, del_of_a_missing_key_is_fine) {
  batch b;
  b.del(column::meta, "nope");
  EXPECT_TRUE(s_.write(b).ok());
}

TEST_F(memory_store_test, del_range_is_half_open) {
  for (auto k : {"a", "b", "c", "d"}) put(column::messages, k, "v");
  batch b;
  b.del_range(column::messages, "b", "d");
  ASSERT_TRUE(s_.write(b).ok());
  EXPECT_EQ(scan(column::messages, "", "\xff"), (pairs{{"a", "v"}, {"d", "v"}}));
}

TEST_F(memory_store_test, scan_is_ordered_half_open_and_bytewise) {
  put(column::meta, std::string("b\0", 2), "2");
  put(column::meta, "b", "1");
  put(column::meta, "\xff", "4");
  put(column::meta, "c", "3");
  put(column::meta, "a", "0");
  EXPECT_EQ(scan(column::meta, "b", "c"), (pairs{{"b", "1"}, {std::string("b\0", 2), "2"}}));
  EXPECT_EQ(scan(column::meta, "a", "\xff").size(), 4u);
  EXPECT_TRUE(scan(column::meta, "c", "c").empty());
}

TEST_F(memory_store_test, scan_stops_when_the_visitor_says_so) {
  for (auto k : {"a", "b", "c"}) put(column::meta, k, "v");
  std::vector<std::string> seen;
  auto r = s_.scan(column::meta, "a", "z", [&](std::string_view k, std::string_view) {
    seen.emplace_back(k);
    return seen.size() < 2;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
}

TEST_F(memory_store_test, last_key_respects_both_bounds) {
  for (auto k : {"b", "d", "f"}) put(column::messages, k, "v");
  EXPECT_EQ(*s_.last_key(column::messages, "a", "z"), "f");
  EXPECT_EQ(*s_.last_key(column::messages, "a", "f"), "d");  // end is exclusive
  EXPECT_EQ(*s_.last_key(column::messages, "d", "e"), "d");  // begin is inclusive
  EXPECT_EQ(s_.last_key(column::messages, "e", "f").code(), errc::not_found);
  EXPECT_EQ(s_.last_key(column::messages, "g", "z").code(), errc::not_found);
  EXPECT_EQ(s_.last_key(column::messages, "", "b").code(), errc::not_found);
}

TEST_F(memory_store_test, when_durable_runs_at_once) {
  bool ran = false;
  s_.when_durable([&](result<void> r) {
    EXPECT_TRUE(r.ok());
    ran = true;
  });
  EXPECT_TRUE(ran);
}

TEST_F(memory_store_test, failed_writes_apply_nothing) {
  s_.fail_writes(true);
  batch b;
  b.put(column::meta, "k", "v");
  EXPECT_EQ(s_.write(b).code(), errc::unavailable);
  EXPECT_EQ(s_.count(column::meta), 0u);
  EXPECT_FALSE(s_.health().writable);
  s_.fail_writes(false);
  // Like RocksDB after a background error: refused until resumed.
  EXPECT_EQ(s_.write(b).code(), errc::unavailable);
  ASSERT_TRUE(s_.resume().ok());
  EXPECT_TRUE(s_.health().writable);
  EXPECT_TRUE(s_.write(b).ok());
  EXPECT_EQ(*s_.get(column::meta, "k"), "v");
}

TEST_F(memory_store_test, resume_fails_while_the_fault_lasts) {
  s_.fail_writes(true);
  EXPECT_EQ(s_.resume().code(), errc::unavailable);
  EXPECT_FALSE(s_.health().writable);
}

TEST_F(memory_store_test, injected_write_failures_start_after_n_writes) {
  s_.fail_writes_after(1);
  put(column::meta, "a", "1");
  batch b;
  b.put(column::meta, "b", "2");
  EXPECT_EQ(s_.write(b).code(), errc::unavailable);
  EXPECT_FALSE(s_.health().writable);
  s_.fail_writes(false);
  ASSERT_TRUE(s_.resume().ok());
  EXPECT_TRUE(s_.write(b).ok()) << "only the one fault";
  EXPECT_EQ(s_.count(column::meta), 2u);
}

TEST_F(memory_store_test, injected_read_failures_start_after_n_reads) {
  batch b;
  b.put(column::meta, "k", "v");
  ASSERT_TRUE(s_.write(b).ok());
  s_.fail_reads_after(1);
  EXPECT_TRUE(s_.get(column::meta, "k").ok());
  EXPECT_EQ(s_.get(column::meta, "k").code(), errc::unavailable);
  EXPECT_EQ(s_.scan(column::meta, "", "z", [](auto, auto) { return true; }).code(),
            errc::unavailable);
  s_.fail_reads_after(memory_store::npos);
  EXPECT_TRUE(s_.get(column::meta, "k").ok());
}

}  // namespace
}  // namespace onceq::storage
