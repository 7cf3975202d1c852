// onceqd's flags: values land in the option structs, bad values are
// errc::invalid_argument naming the flag.
#include "cmd/config.hpp"

#include <gtest/gtest.h>

namespace onceq::cmd {
namespace {

result<config> parse(std::vector<std::string_view> args) {
  return parse_args(args);
}

TEST(config_test, wal_prezero_defaults_to_256_kib) {
  auto c = parse({});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->storage.wal_prezero_bytes, 256u << 10);
  EXPECT_NE(usage().find("--wal-prezero-kb"), std::string::npos);
}

TEST(config_test, wal_prezero_takes_kib_and_zero_turns_it_off) {
  auto c = parse({"--wal-prezero-kb", "1024"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->storage.wal_prezero_bytes, 1u << 20);
  c = parse({"--wal-prezero-kb=0"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->storage.wal_prezero_bytes, 0u);
}

TEST(config_test, wal_prezero_rejects_bad_values) {
  for (std::string_view bad : {"-1", "x", "", "1.5", "1048577"}) {
    auto c = parse({"--wal-prezero-kb", bad});
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.code(), errc::invalid_argument);
    EXPECT_NE(c.err().message.find("--wal-prezero-kb"), std::string::npos) << c.err().message;
  }
  auto missing = parse({"--wal-prezero-kb"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.err().message.find("needs a value"), std::string::npos);
}

TEST(config_test, topic_limit_defaults_fill_create_topic_defaults) {
  auto c = parse({});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->http.topic_defaults.max_backlog_messages, 0);
  EXPECT_EQ(c->http.topic_defaults.max_backlog_bytes, 0);
  EXPECT_EQ(c->http.topic_defaults.max_inflight, 0);
  c = parse(
      {"--max-backlog-messages", "1000", "--max-backlog-bytes=1048576", "--max-inflight", "50"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->http.topic_defaults.max_backlog_messages, 1000);
  EXPECT_EQ(c->http.topic_defaults.max_backlog_bytes, 1 << 20);
  EXPECT_EQ(c->http.topic_defaults.max_inflight, 50);
  for (std::string_view flag :
       {"--max-backlog-messages", "--max-backlog-bytes", "--max-inflight"}) {
    auto bad = parse({flag, "-1"});
    ASSERT_FALSE(bad.ok()) << flag;
    EXPECT_NE(bad.err().message.find(flag), std::string::npos) << bad.err().message;
    EXPECT_NE(usage().find(flag), std::string::npos) << flag;
  }
}

TEST(config_test, auth_file_is_off_by_default_and_needs_a_path) {
  auto c = parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->auth_file.empty());
  c = parse({"--auth-file", "/etc/onceq/auth.json"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->auth_file, "/etc/onceq/auth.json");
  EXPECT_FALSE(parse({"--auth-file"}).ok());
  EXPECT_FALSE(parse({"--auth-file="}).ok());
  EXPECT_NE(usage().find("--auth-file"), std::string::npos);
}

}  // namespace
}  // namespace onceq::cmd
