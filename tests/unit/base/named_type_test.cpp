#include "base/named_type.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_set>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace onceq {
namespace {

using partition_id = named_type<std::uint32_t, struct partition_id_tag>;
using topic_number = named_type<std::uint32_t, struct topic_number_tag>;
using name = named_type<std::string, struct name_tag>;

// The mix-ups the type exists to stop do not compile.
static_assert(!std::is_convertible_v<std::uint32_t, partition_id>, "construction is explicit");
static_assert(!std::is_convertible_v<partition_id, std::uint32_t>, "so is reading the value");
static_assert(!std::is_convertible_v<topic_number, partition_id>, "two tags never convert");
static_assert(!std::is_constructible_v<partition_id, topic_number>);
static_assert(!std::equality_comparable_with<partition_id, topic_number>);
static_assert(!std::equality_comparable_with<partition_id, std::uint32_t>);
template <typename A, typename B>
concept addable = requires(A a, B b) {
  a + b;
};
static_assert(!addable<partition_id, partition_id>, "two ids are never added");
static_assert(addable<partition_id, std::uint32_t>, "an id plus a count is an id");
static_assert(!addable<name, std::string>, "arithmetic only for arithmetic types");
static_assert(std::is_trivially_copyable_v<partition_id>);
static_assert(sizeof(partition_id) == sizeof(std::uint32_t));

TEST(named_type_test, holds_and_gives_back_its_value) {
  constexpr partition_id p{7};
  static_assert(p() == 7);
  EXPECT_EQ(partition_id{}(), 0u);
  name n{std::string("orders")};
  EXPECT_EQ(n(), "orders");
  n() += "-dlq";
  EXPECT_EQ(n(), "orders-dlq");
  EXPECT_EQ(std::move(n)(), "orders-dlq");
}

TEST(named_type_test, compares_as_its_value) {
  EXPECT_EQ(partition_id{3}, partition_id{3});
  EXPECT_NE(partition_id{3}, partition_id{4});
  EXPECT_LT(partition_id{3}, partition_id{4});
  EXPECT_GT(name{"b"}, name{"a"});
  const std::set<partition_id> sorted{partition_id{2}, partition_id{1}, partition_id{3}};
  EXPECT_EQ(sorted.begin()->operator()(), 1u);
  EXPECT_EQ(sorted.rbegin()->operator()(), 3u);
}

TEST(named_type_test, counts_with_plain_numbers) {
  partition_id p{1};
  EXPECT_EQ((p++)(), 1u);
  EXPECT_EQ((++p)(), 3u);
  EXPECT_EQ((p--)(), 3u);
  EXPECT_EQ((--p)(), 1u);
  p += 10;
  EXPECT_EQ(p(), 11u);
  p -= 1;
  EXPECT_EQ(p, partition_id{10});
  EXPECT_EQ(p + 5u, partition_id{15});
  EXPECT_EQ(p - 5u, partition_id{5});
}

TEST(named_type_test, hashes_as_its_value) {
  EXPECT_EQ(std::hash<partition_id>{}(partition_id{42}), std::hash<std::uint32_t>{}(42));
  std::unordered_set<name> names{name{"a"}, name{"b"}, name{"a"}};
  EXPECT_EQ(names.size(), 2u);
  EXPECT_TRUE(names.contains(name{"b"}));
}

TEST(named_type_test, formats_as_its_value) {
  EXPECT_EQ(fmt::format("{}", partition_id{12}), "12");
  EXPECT_EQ(fmt::format("{:>4}", partition_id{12}), "  12");
  EXPECT_EQ(fmt::format("{:x}", partition_id{255}), "ff");
  EXPECT_EQ(fmt::format("topic {}", name{"orders"}), "topic orders");
}

}  // namespace
}  // namespace onceq
