#include "broker/validation.hpp"

#include <gtest/gtest.h>

namespace onceq {
namespace {

TEST(Validation, TopicNames) {
  EXPECT_TRUE(validate_topic_name("a.b_c-D9").ok());
  EXPECT_TRUE(validate_topic_name(std::string(200, 'x')).ok());
  EXPECT_FALSE(validate_topic_name(std::string(201, 'x')).ok());
  EXPECT_FALSE(validate_topic_name("").ok());
  EXPECT_FALSE(validate_topic_name("a/b").ok());
  EXPECT_FALSE(validate_topic_name("ä").ok());
}

TEST(Validation, RetryDelayDoublesAndCaps) {
  EXPECT_EQ(retry_delay(1, 100, 0), 100);
  EXPECT_EQ(retry_delay(2, 100, 0), 200);
  EXPECT_EQ(retry_delay(4, 100, 0), 800);
  EXPECT_EQ(retry_delay(4, 100, 500), 500);
  EXPECT_EQ(retry_delay(3, 0, 500), 0);
  EXPECT_GT(retry_delay(1000, 100, 0), 0) << "saturates instead of overflowing";
}

TEST(Validation, PartitionHashIsStable) {
  // FNV-1a 64 of "a": a fixed value, so partitions never move between builds.
  EXPECT_EQ(partition_hash("a"), 0xaf63dc4c8601ec8cull);
}

}  // namespace
}  // namespace onceq
