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

TEST(Validation, TheEdgeAsksTheSameTopicNameRule) {
  // http/ calls valid_topic_name (codec, auth patterns): it must agree with
  // what the core enforces, including the bounds.
  for (const std::string& name :
       {std::string("a.b_c-D9"), std::string(200, 'x'), std::string(201, 'x'), std::string(),
        std::string("a/b"), std::string("dlq.orders"), std::string("a b")})
    EXPECT_EQ(valid_topic_name(name), validate_topic_name(name).ok()) << name;
  EXPECT_TRUE(valid_label(std::string(200, 'g')));
  EXPECT_FALSE(valid_label(std::string(201, 'g')));
  EXPECT_FALSE(valid_label(""));
}

TEST(Validation, DeadLettersGoToTheDlqPrefixedTopic) {
  EXPECT_EQ(dlq_topic_of("orders"), "dlq.orders");
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
