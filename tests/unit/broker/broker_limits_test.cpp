// Backpressure the topic sets: backlog caps refuse a produce whole with a
// retry hint; max_inflight stops handing out leases without an error.

#include <gtest/gtest.h>

#include "broker_test_support.hpp"

namespace onceq::testing {
namespace {

TEST_F(BrokerTest, BacklogMessageCapRefusesAWholeBatchWithARetryHint) {
  topic_settings s;
  s.max_backlog_messages = 3;
  create("t", 1, s);
  produce("t", "a");
  produce("t", "b");
  produce_cmd two{"t", {msg("c"), msg("d")}, {}, {}};
  auto r = b().produce(two);
  ASSERT_EQ(r.code(), errc::resource_exhausted);
  EXPECT_GT(r.err().retry_after_ms, 0);
  EXPECT_NE(r.err().message.find("max_backlog_messages"), std::string::npos);
  EXPECT_EQ(b().get_topic("t")->produced, 2u) << "nothing of the batch was stored";
  produce("t", "c");  // one more still fits
  EXPECT_EQ(b().produce(produce_cmd{"t", {msg("e")}, {}, {}}).code(), errc::resource_exhausted);
}

TEST_F(BrokerTest, BacklogFreesUpAsConsumersAckAndRetentionRuns) {
  topic_settings s;
  s.max_backlog_messages = 2;
  create("t", 1, s);
  produce("t", "a");
  produce("t", "b");
  EXPECT_EQ(b().produce(produce_cmd{"t", {msg("c")}, {}, {}}).code(), errc::resource_exhausted);
  for (const auto& d : consume("t", "g", "w")) ASSERT_TRUE(ack(d, "g", "w").ok());
  advance(1000);  // a retention run deletes what every group acked
  EXPECT_TRUE(b().produce(produce_cmd{"t", {msg("c")}, {}, {}}).ok());
}

TEST_F(BrokerTest, BacklogByteCapCountsValueAndEnvelopeBytesAndSurvivesRestart) {
  topic_settings s;
  s.max_backlog_bytes = 100;
  create("t", 1, s);
  produce("t", std::string(60, 'x'));
  EXPECT_EQ(b().produce(produce_cmd{"t", {msg(std::string(41, 'y'))}, {}, {}}).code(),
            errc::resource_exhausted);
  restart();  // the byte count is rebuilt from the stored messages
  EXPECT_EQ(b().produce(produce_cmd{"t", {msg(std::string(41, 'y'))}, {}, {}}).code(),
            errc::resource_exhausted);
  produce("t", std::string(40, 'z'));
  for (const auto& d : consume("t", "g", "w")) ASSERT_TRUE(ack(d, "g", "w").ok());
  advance(1000);
  EXPECT_TRUE(b().produce(produce_cmd{"t", {msg(std::string(100, 'w'))}, {}, {}}).ok());
}

TEST_F(BrokerTest, DuplicatesDoNotCountAgainstTheBacklogCap) {
  topic_settings s;
  s.max_backlog_messages = 1;
  create("t", 1, s);
  auto m = msg("a");
  m.msg_id = "once";
  produce("t", m);
  auto again = b().produce(produce_cmd{"t", {m}, {}, {}});
  ASSERT_TRUE(again.ok()) << again.err().message;
  EXPECT_TRUE(again->results[0].duplicate);
}

TEST_F(BrokerTest, MaxInflightStopsLeasesUntilOneEnds) {
  topic_settings s;
  s.max_inflight = 2;
  create("t", 1, s);
  for (int i = 0; i < 5; ++i) produce("t", "v" + std::to_string(i));
  auto first = consume("t", "g", "a", 10);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_TRUE(consume("t", "g", "b", 10).empty()) << "no error, just nothing";
  EXPECT_EQ(consume("t", "other", "c", 10).size(), 2u) << "the cap is per group";
  ASSERT_TRUE(ack(first[0], "g", "a").ok());
  EXPECT_EQ(consume("t", "g", "b", 10).size(), 1u);
}

TEST_F(BrokerTest, LimitsAreValidatedAndPartOfTheTopicIdentity) {
  topic_settings bad;
  bad.max_inflight = -1;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, bad}).code(), errc::invalid_argument);
  topic_settings s;
  s.max_backlog_messages = 10;
  create("t", 1, s);
  EXPECT_FALSE(b().create_topic(create_topic_cmd{"t", 1, s})->created);
  s.max_backlog_messages = 11;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, s}).code(), errc::already_exists);
}

}  // namespace
}  // namespace onceq::testing
