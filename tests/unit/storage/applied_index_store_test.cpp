// applied_index_store: what one log entry writes reaches the wrapped store
// as one batch with the entry's position; reads inside the entry see its
// writes; nothing writes outside an entry.

#include "storage/applied_index_store.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "storage/memory_store.hpp"
#include "storage/schema.hpp"

namespace onceq::storage {
namespace {

constexpr column k_col = column::deliveries;

batch put(std::string k, std::string v) {
  batch b;
  b.put(k_col, std::move(k), std::move(v));
  return b;
}

std::vector<std::pair<std::string, std::string>> scan_all(store& s, std::string_view begin = "",
                                                          std::string_view end = "~") {
  std::vector<std::pair<std::string, std::string>> out;
  EXPECT_TRUE(s.scan(k_col, begin, end, [&](std::string_view k, std::string_view v) {
                 out.emplace_back(k, v);
                 return true;
               }).ok());
  return out;
}

class AppliedIndexStoreTest : public ::testing::Test {
 protected:
  AppliedIndexStoreTest() {
    // What the store held before the entry: b, d, f, h.
    batch b;
    for (const char* k : {"b", "d", "f", "h"}) b.put(k_col, k, std::string("old-") + k);
    EXPECT_TRUE(inner_.write(b).ok());
  }
  memory_store inner_;
  applied_index_store s_{inner_};
};

TEST_F(AppliedIndexStoreTest, AnEntrysWritesReachTheStoreAsOneBatchWithItsPosition) {
  const std::size_t before = inner_.writes();
  s_.begin({7, 1'000});
  ASSERT_TRUE(s_.write(put("a", "1")).ok());
  ASSERT_TRUE(s_.write(put("c", "2")).ok());
  batch del;
  del.del(k_col, "d");
  ASSERT_TRUE(s_.write(del).ok());
  // Nothing reached the store yet, and the position has not moved.
  EXPECT_EQ(inner_.writes(), before);
  EXPECT_EQ(s_.applied().index, 0u);
  EXPECT_FALSE(inner_.get(k_col, "a").ok());
  ASSERT_TRUE(s_.finish().ok());
  EXPECT_EQ(inner_.writes(), before + 1);
  EXPECT_EQ(s_.applied(), (applied_position{7, 1'000}));
  EXPECT_EQ(*inner_.get(k_col, "a"), "1");
  EXPECT_EQ(*inner_.get(k_col, "c"), "2");
  EXPECT_EQ(inner_.get(k_col, "d").code(), errc::not_found);
  auto stored = inner_.get(column::meta, keys::applied());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(*decode_applied_position(*stored), (applied_position{7, 1'000}));
  applied_index_store reopened(inner_);
  EXPECT_EQ(*reopened.load(), (applied_position{7, 1'000}));
}

TEST_F(AppliedIndexStoreTest, AnEntryThatWritesNothingMovesNothing) {
  const std::size_t before = inner_.writes();
  s_.begin({3, 10});
  ASSERT_TRUE(s_.finish().ok());
  EXPECT_EQ(inner_.writes(), before);
  EXPECT_EQ(s_.applied().index, 0u);
}

// The digest of what an entry wrote (the apply trace's): equal for equal
// writes at the same position, different for any other value or position.
TEST_F(AppliedIndexStoreTest, AnEntrysDigestNamesWhatItWrote) {
  auto digest_of = [](std::uint64_t index, const std::string& value) {
    memory_store inner;
    applied_index_store s(inner);
    s.keep_digests(true);
    s.begin({index, 1'000});
    EXPECT_TRUE(s.write(put("a", value)).ok());
    EXPECT_TRUE(s.finish().ok());
    return s.last_digest();
  };
  EXPECT_NE(digest_of(7, "1"), 0u);
  EXPECT_EQ(digest_of(7, "1"), digest_of(7, "1"));
  EXPECT_NE(digest_of(7, "1"), digest_of(7, "2"));
  EXPECT_NE(digest_of(7, "1"), digest_of(8, "1"));
  s_.begin({3, 10});
  ASSERT_TRUE(s_.write(put("a", "1")).ok());
  ASSERT_TRUE(s_.finish().ok());
  EXPECT_EQ(s_.last_digest(), 0u) << "digests are off unless kept";
  s_.keep_digests(true);
  s_.begin({4, 10});
  ASSERT_TRUE(s_.finish().ok());
  EXPECT_EQ(s_.last_digest(), 0u) << "an entry that wrote nothing";
}

TEST_F(AppliedIndexStoreTest, ReadsInsideAnEntrySeeItsWritesInOrder) {
  s_.begin({1, 1});
  ASSERT_TRUE(s_.write(put("e", "new-e")).ok());
  ASSERT_TRUE(s_.write(put("b", "new-b")).ok());
  batch b;
  b.del(k_col, "f");
  b.del_range(k_col, "g", "z");  // h, and the i put below, which comes after it
  b.put(k_col, "i", "new-i");
  b.put(k_col, "j", "new-j");
  b.del(k_col, "j");
  ASSERT_TRUE(s_.write(b).ok());

  EXPECT_EQ(*s_.get(k_col, "b"), "new-b");
  EXPECT_EQ(*s_.get(k_col, "d"), "old-d");
  EXPECT_EQ(*s_.get(k_col, "e"), "new-e");
  EXPECT_EQ(s_.get(k_col, "f").code(), errc::not_found);
  EXPECT_EQ(s_.get(k_col, "h").code(), errc::not_found);
  EXPECT_EQ(*s_.get(k_col, "i"), "new-i");
  EXPECT_EQ(s_.get(k_col, "j").code(), errc::not_found);

  auto many = s_.multi_get(k_col, {"b", "d", "h", "i", "x"});
  ASSERT_EQ(many.size(), 5u);
  EXPECT_EQ(*many[0], "new-b");
  EXPECT_EQ(*many[1], "old-d");
  EXPECT_EQ(many[2].code(), errc::not_found);
  EXPECT_EQ(*many[3], "new-i");
  EXPECT_EQ(many[4].code(), errc::not_found);

  using kv = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(scan_all(s_), (kv{{"b", "new-b"}, {"d", "old-d"}, {"e", "new-e"}, {"i", "new-i"}}));
  EXPECT_EQ(scan_all(s_, "c", "i"), (kv{{"d", "old-d"}, {"e", "new-e"}}));
  // A visitor that stops stops the merge too.
  kv first_two;
  ASSERT_TRUE(s_.scan(k_col, "", "~", [&](std::string_view k, std::string_view v) {
                  first_two.emplace_back(k, v);
                  return first_two.size() < 2;
                }).ok());
  EXPECT_EQ(first_two, (kv{{"b", "new-b"}, {"d", "old-d"}}));

  EXPECT_EQ(*s_.last_key(k_col, "", "~"), "i");
  EXPECT_EQ(*s_.last_key(k_col, "", "i"), "e");  // h deleted by the range, f by a del
  EXPECT_EQ(s_.last_key(k_col, "f", "i").code(), errc::not_found);  // nothing live in [f, i)
}

TEST_F(AppliedIndexStoreTest, NothingWritesOutsideAnEntry) {
  const std::size_t before = inner_.writes();
  auto r = s_.write(put("a", "1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::failed_precondition);
  EXPECT_EQ(inner_.writes(), before);
  EXPECT_EQ(s_.get(k_col, "a").code(), errc::not_found);
  // After an entry, too.
  s_.begin({1, 1});
  ASSERT_TRUE(s_.finish().ok());
  EXPECT_FALSE(s_.write(put("a", "1")).ok());
}

TEST_F(AppliedIndexStoreTest, ARefusedEntryWritesNothingAndKeepsThePosition) {
  s_.begin({1, 1});
  ASSERT_TRUE(s_.write(put("a", "1")).ok());
  ASSERT_TRUE(s_.finish().ok());
  inner_.fail_writes(true);
  s_.begin({2, 2});
  ASSERT_TRUE(s_.write(put("c", "2")).ok());
  EXPECT_FALSE(s_.finish().ok());
  inner_.fail_writes(false);
  ASSERT_TRUE(inner_.resume().ok());
  EXPECT_EQ(s_.applied(), (applied_position{1, 1}));
  EXPECT_EQ(inner_.get(k_col, "c").code(), errc::not_found);
  // And the next entry does not carry the refused one's writes.
  s_.begin({3, 3});
  ASSERT_TRUE(s_.write(put("e", "3")).ok());
  ASSERT_TRUE(s_.finish().ok());
  EXPECT_EQ(inner_.get(k_col, "c").code(), errc::not_found);
  EXPECT_EQ(*inner_.get(k_col, "e"), "3");
}

}  // namespace
}  // namespace onceq::storage
