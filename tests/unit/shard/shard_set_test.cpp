// Placement: where topics go when created, where they are found after a
// restart with another shard count, DLQs beside their topics, the data
// directory layout of the shards.
#include "shard/shard_set.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

#include <unistd.h>

#include "shard/layout.hpp"
#include "storage/memory_store.hpp"

namespace onceq {
namespace {

using store_list = std::vector<std::unique_ptr<storage::memory_store>>;

store_list make_stores(std::size_t n) {
  store_list out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(std::make_unique<storage::memory_store>());
  return out;
}

// n shards over in-memory stores, loops not started (placement needs none).
class shards_fixture {
 public:
  explicit shards_fixture(std::size_t n, store_list* stores = nullptr,
                          placement_rule rule = placement_rule::balanced) {
    if (stores == nullptr) {
      own_ = make_stores(n);
      stores = &own_;
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      auto& st = *(*stores)[i];
      brokers_.push_back(std::make_unique<broker>(st, clock_, nullptr));
      EXPECT_TRUE(brokers_.back()->recover().ok());
      shards_.push_back(std::make_unique<shard>(i, *brokers_.back(), st, clock_));
      ptrs_.push_back(shards_.back().get());
    }
    set_ = std::make_unique<shard_set>(ptrs_, rule);
  }
  shard_set& set() { return *set_; }
  broker& core(std::size_t i) { return *brokers_[i]; }
  shard& at(std::size_t i) { return *shards_[i]; }

  // Creates a topic the way the router does: place, create on that shard's
  // broker, settle.
  std::uint32_t create(const std::string& name) {
    shard& s = set_->place(name);
    auto r = brokers_[s.id()]->create_topic({name, 1, {}});
    set_->settle(name, s.id(), brokers_[s.id()]->get_topic(name).ok());
    EXPECT_TRUE(r.ok()) << r.err().message;
    return s.id();
  }

 private:
  manual_clock clock_;
  store_list own_;
  std::vector<std::unique_ptr<broker>> brokers_;
  std::vector<std::unique_ptr<shard>> shards_;
  std::vector<shard*> ptrs_;
  std::unique_ptr<shard_set> set_;
};

TEST(ShardSetTest, NewTopicsGoToTheLeastLoadedShard) {
  shards_fixture f(2);
  EXPECT_EQ(f.create("a"), 0u);
  EXPECT_EQ(f.create("b"), 1u);
  EXPECT_EQ(f.create("c"), 0u);
  EXPECT_EQ(f.set().of("a").id(), 0u);
  EXPECT_EQ(f.set().of("b").id(), 1u);
  EXPECT_EQ(f.set().of("c").id(), 0u);
  EXPECT_EQ(f.set().topic_counts(), (std::vector<std::size_t>{2, 1}));
}

TEST(ShardSetTest, ADlqLivesWithItsTopicWhicheverCameFirst) {
  shards_fixture f(2);
  EXPECT_EQ(f.create("x"), 0u);
  EXPECT_EQ(f.set().of("dlq.x").id(), 0u);  // auto-created later by a nack: same shard
  EXPECT_EQ(f.create("dlq.y"), 1u);
  EXPECT_EQ(f.create("y"), 1u);  // joins its DLQ
  // DLQs do not count as load: the next topic goes to the emptier shard.
  EXPECT_EQ(f.create("z"), 0u);
}

TEST(ShardSetTest, AFailedCreateGivesItsReservationBack) {
  shards_fixture f(2);
  shard& s = f.set().place("bad");
  EXPECT_TRUE(f.set().placed_on("bad").has_value());
  auto r = f.core(s.id()).create_topic({"bad", 0, {}});  // 0 partitions: refused
  ASSERT_FALSE(r.ok());
  f.set().settle("bad", s.id(), f.core(s.id()).get_topic("bad").ok());
  EXPECT_FALSE(f.set().placed_on("bad").has_value());
  EXPECT_EQ(f.set().topic_counts(), (std::vector<std::size_t>{0, 0}));
}

// A cluster's nodes route a name alike without sharing a table: its shard
// is a function of the name (FNV-1a, fixed values below), a DLQ's that of
// its base, and creating topics changes nothing.
// The router only places and submits: the shard's create and delete
// report to the set on its loop (shard::on_topic_change).
TEST(ShardSetTest, CreatesAndDeletesRunOnAShardSettleThePlacement) {
  shards_fixture f(2);
  f.at(0).start();
  f.at(1).start();
  auto run = [](shard& s, auto cmd) {
    using R = result<typename command_traits<decltype(cmd)>::reply>;
    std::promise<R> p;
    s.submit(std::move(cmd), [&p](R r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  };
  shard& a = f.set().place("a");
  ASSERT_TRUE(run(a, create_topic_cmd{"a", 1, {}}).ok());
  EXPECT_EQ(f.set().placed_on("a"), a.id());
  shard& b = f.set().place("b");
  EXPECT_NE(b.id(), a.id());
  // A failed create gives the reservation back.
  EXPECT_FALSE(run(b, create_topic_cmd{"b", 0, {}}).ok());
  EXPECT_EQ(f.set().placed_on("b"), std::nullopt);
  ASSERT_TRUE(run(a, delete_topic_cmd{"a"}).ok());
  EXPECT_EQ(f.set().placed_on("a"), std::nullopt);
  f.at(0).stop();
  f.at(1).stop();
}

TEST(ShardSetTest, HashedPlacementIsAFunctionOfTheNameTheSameOnEveryNode) {
  shards_fixture a(4, nullptr, placement_rule::hashed);
  shards_fixture b(4, nullptr, placement_rule::hashed);
  for (const char* name : {"orders", "payments", "emails", "t", "crash-1"}) {
    EXPECT_EQ(a.set().of(name).id(), b.set().of(name).id()) << name;
    EXPECT_EQ(a.set().place(name).id(), a.set().of(name).id()) << name;
    EXPECT_EQ(a.set().of(std::string("dlq.") + name).id(), a.set().of(name).id()) << name;
  }
  // Pinned: a build that hashed differently would strand topics.
  EXPECT_EQ(a.set().of("orders").id(), 0u);
  EXPECT_EQ(a.set().of("payments").id(), 2u);
  for (int i = 0; i < 8; ++i) a.create("topic-" + std::to_string(i));
  EXPECT_EQ(a.set().of("orders").id(), 0u);
}

TEST(ShardSetTest, AnUnknownTopicAlwaysGoesToTheSameShard) {
  shards_fixture f(4);
  const auto first = f.set().of("nobody").id();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(f.set().of("nobody").id(), first);
  EXPECT_FALSE(f.set().placed_on("nobody").has_value());
}

TEST(ShardSetTest, ARestartWithMoreShardsFindsEveryTopicWhereItWas) {
  auto stores = make_stores(3);
  {
    shards_fixture before(2, &stores);
    EXPECT_EQ(before.create("a"), 0u);
    EXPECT_EQ(before.create("b"), 1u);
    EXPECT_EQ(before.create("c"), 0u);
  }
  shards_fixture after(3, &stores);
  ASSERT_TRUE(after.set().load().ok());
  EXPECT_EQ(after.set().of("a").id(), 0u);
  EXPECT_EQ(after.set().of("b").id(), 1u);
  EXPECT_EQ(after.set().of("c").id(), 0u);
  EXPECT_EQ(after.create("d"), 2u);  // the new, empty shard
}

TEST(ShardSetTest, ATopicOnTwoShardsRefusesToLoad) {
  auto stores = make_stores(2);
  shards_fixture f(2, &stores);
  ASSERT_TRUE(f.core(0).create_topic({"twice", 1, {}}).ok());
  ASSERT_TRUE(f.core(1).create_topic({"twice", 1, {}}).ok());
  auto r = f.set().load();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::failed_precondition);
  EXPECT_NE(r.err().message.find("twice"), std::string::npos) << r.err().message;
}

TEST(ShardSetTest, ReadersOnOtherThreadsSeePlacementsAsTheyAreMade) {
  shards_fixture f(2);
  std::atomic<bool> done{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!done.load()) {
        auto id = f.set().placed_on("t0");
        if (id) {
          EXPECT_EQ(*id, 0u);
        }
        (void)f.set().of("t1");
      }
    });
  }
  for (int i = 0; i < 50; ++i) f.create("t" + std::to_string(i));
  done.store(true);
  for (auto& r : readers) r.join();
  EXPECT_EQ(f.set().topic_counts(), (std::vector<std::size_t>{25, 25}));
}

TEST(ShardLayoutTest, ShardZeroIsTheDataDirAndOthersAreInside) {
  EXPECT_EQ(shard_data_dir("/var/lib/onceq", 0), "/var/lib/onceq");
  EXPECT_EQ(shard_data_dir("/var/lib/onceq", 3), "/var/lib/onceq/shard-3");
  const auto dir =
      std::filesystem::temp_directory_path() / ("onceq-layout-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  for (const char* name : {"shard-1", "shard-2", "shard-x", "shard-4"}) {
    std::filesystem::create_directories(dir / name);
  }
  // Only directories holding a database count.
  std::ofstream(dir / "shard-1" / "CURRENT") << "MANIFEST-000001\n";
  std::ofstream(dir / "shard-4" / "CURRENT") << "MANIFEST-000001\n";
  std::ofstream(dir / "shard-x" / "CURRENT") << "MANIFEST-000001\n";
  EXPECT_EQ(shard_dirs_from(dir.string(), 1), (std::vector<std::uint32_t>{1, 4}));
  EXPECT_EQ(shard_dirs_from(dir.string(), 2), (std::vector<std::uint32_t>{4}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace onceq
