// onceqd's flags and --config files: values land in the option structs,
// bad values are errc::invalid_argument naming the flag or the file's key.
#include "cmd/config.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace onceq::cmd {
namespace {

result<config> parse(std::vector<std::string_view> args) {
  return parse_args(args);
}

// The parse failed with a message that contains part.
::testing::AssertionResult fails_with(const result<config>& c, std::string_view part) {
  if (c.ok()) return ::testing::AssertionFailure() << "parsed";
  if (c.err().message.find(part) == std::string::npos) {
    return ::testing::AssertionFailure() << "no '" << part << "' in: " << c.err().message;
  }
  return ::testing::AssertionSuccess();
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
    EXPECT_TRUE(fails_with(c, "--wal-prezero-kb")) << bad;
    EXPECT_EQ(c.code(), errc::invalid_argument);
  }
  auto missing = parse({"--wal-prezero-kb"});
  EXPECT_TRUE(fails_with(missing, "needs a value"));
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
    EXPECT_TRUE(fails_with(bad, flag)) << flag;
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

TEST(config_test, every_flag_keeps_its_help_line) {
  const std::string help = usage();
  for (std::string_view line :
       {"  --listen HOST:PORT       address to serve on; port 0 picks a free one (default "
        "127.0.0.1:8080)",
        "  --shards N               shards, each with its own event-loop thread and store,",
        "  --max-backlog-messages N max_backlog_messages of topics created without one;\n"
        "                           0 is unlimited (default 0)",
        "  --tls-key FILE           PEM private key of --tls-cert",
        "  --help                   print this and exit"}) {
    EXPECT_NE(help.find(line), std::string::npos) << line << "\nin:\n" << help;
  }
  for (const auto& key : config_keys()) {
    EXPECT_NE(help.find("  --" + key + " "), std::string::npos) << key;
  }
}

TEST(config_test, help_and_version_and_unknown_flags) {
  EXPECT_TRUE(parse({"--help"})->show_help);
  EXPECT_TRUE(parse({"-h"})->show_help);
  EXPECT_TRUE(parse({"--version"})->show_version);
  auto c = parse({"--no-such-flag", "1"});
  EXPECT_TRUE(fails_with(c, "--no-such-flag"));
  EXPECT_FALSE(parse({"stray"}).ok());
}

TEST(config_test, ranges_are_checked_per_flag) {
  EXPECT_FALSE(parse({"--threads", "0"}).ok());
  EXPECT_FALSE(parse({"--threads", "257"}).ok());
  EXPECT_TRUE(parse({"--threads", "256"}).ok());
  EXPECT_FALSE(parse({"--max-header-bytes", "1023"}).ok());
  EXPECT_FALSE(parse({"--default-lease-ms", "3600001"}).ok());
  EXPECT_FALSE(parse({"--listen", "nohost"}).ok());
  EXPECT_FALSE(parse({"--listen", "h:65536"}).ok());
  EXPECT_FALSE(parse({"--fsync", "sometimes"}).ok());
  auto tls = parse({"--tls-cert", "c.pem"});
  EXPECT_TRUE(fails_with(tls, "--tls-key"));
  auto c = parse({"--listen", "[::1]:0", "--fsync", "interval:5", "--max-queue=10"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->http.host, "::1");
  EXPECT_EQ(c->http.port, 0);
  EXPECT_EQ(c->http.max_queue_depth, 10u);
  EXPECT_EQ(c->shard.max_queue, 20u);
}

TEST(config_test, raft_segments_default_to_64_mib_and_are_checked) {
  auto c = parse({});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->raft_segment_mib, 64u);
  c = parse({"--raft-segment-mib", "16"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->raft_segment_mib, 16u);
  // From raft's own default, 8 MiB, to 1 GiB.
  for (std::string_view bad : {"0", "7", "1025", "x"}) {
    EXPECT_TRUE(fails_with(parse({"--raft-segment-mib", bad}), "--raft-segment-mib")) << bad;
  }
}

TEST(config_test, shards_default_to_the_cores_and_are_checked) {
  auto c = parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->shards, default_shards());
  EXPECT_GE(c->shards, 1u);
  EXPECT_FALSE(parse({"--shards", "0"}).ok());
  EXPECT_FALSE(parse({"--shards", "257"}).ok());
  c = parse({"--shards", "3"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->shards, 3u);
  EXPECT_FALSE(parse({"--wal-sync", "sometimes"}).ok());
  c = parse({"--wal-sync", "syncer"});
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->storage.sync_on_caller);
  c = parse({"--wal-sync", "loop"});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->storage.sync_on_caller);
}

TEST(config_test, connections_migrate_unless_told_not_to) {
  auto c = parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->http.migrate_connections);
  c = parse({"--no-migrate-connections"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_FALSE(c->http.migrate_connections);
}

TEST(config_test, apply_trace_is_off_unless_asked) {
  auto c = parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->apply_trace);
  c = parse({"--apply-trace"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_TRUE(c->apply_trace);
}

TEST(config_test, connections_spread_unless_told_not_to) {
  auto c = parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->http.spread_connections);
  c = parse({"--no-spread-connections"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_FALSE(c->http.spread_connections);
  EXPECT_TRUE(c->http.migrate_connections);
}

TEST(config_test, log_flags_and_access_log) {
  auto c = parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->log.level, log_level::info);
  EXPECT_EQ(c->log.format, log_format::json);
  EXPECT_FALSE(c->http.access_log);
  c = parse({"--log-level", "debug", "--log-format=text", "--access-log"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->log.level, log_level::debug);
  EXPECT_EQ(c->log.format, log_format::text);
  EXPECT_TRUE(c->http.access_log);
  auto bad = parse({"--log-level", "loud"});
  EXPECT_TRUE(fails_with(bad, "--log-level"));
}

// A --config file in a fresh temp directory.
class config_file_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("onceq-config-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "onceqd.toml").string();
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  result<config> with_file(std::string_view text, std::vector<std::string_view> more = {}) {
    std::ofstream(path_) << text;
    std::vector<std::string_view> args{"--config", path_};
    args.insert(args.end(), more.begin(), more.end());
    return parse_args(args);
  }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(config_file_test, file_settings_apply_and_flags_override_them) {
  auto c = with_file(R"(
# onceqd.toml
listen = "0.0.0.0:9000"
data-dir = "/var/lib/onceq"
fsync = "interval:10"
threads = 4
max-inflight = 7
access-log = true
log-format = "text"
)",
                     {"--threads", "8"});
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->http.host, "0.0.0.0");
  EXPECT_EQ(c->http.port, 9000);
  EXPECT_EQ(c->storage.data_dir, "/var/lib/onceq");
  EXPECT_EQ(c->storage.fsync.to_string(), "interval:10");
  EXPECT_EQ(c->http.threads, 8u);  // the flag wins
  EXPECT_EQ(c->http.topic_defaults.max_inflight, 7);
  EXPECT_TRUE(c->http.access_log);
  EXPECT_EQ(c->log.format, log_format::text);
}

TEST_F(config_file_test, no_migrate_connections_from_the_file) {
  auto c = with_file("no-migrate-connections = true\n");
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_FALSE(c->http.migrate_connections);
  c = with_file("no-migrate-connections = false\n");
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_TRUE(c->http.migrate_connections);
}

TEST_F(config_file_test, every_flag_is_a_key) {
  // A valid value for each key: the file takes every flag but --config.
  std::string text;
  for (const auto& key : config_keys()) {
    if (key == "tls-cert" || key == "tls-key" || key == "auth-file") {
      text += key + " = \"x\"\n";
    } else if (key == "access-log" || key == "no-migrate-connections" ||
               key == "no-spread-connections") {
      text += key + " = false\n";
    } else if (key == "listen") {
      text += key + " = \"127.0.0.1:0\"\n";
    } else if (key == "data-dir") {
      text += key + " = \"d\"\n";
    } else if (key == "fsync") {
      text += key + " = \"always\"\n";
    } else if (key == "log-level") {
      text += key + " = \"warn\"\n";
    } else if (key == "log-format") {
      text += key + " = \"json\"\n";
    } else if (key == "threads" || key == "shards") {
      text += key + " = 4\n";
    } else if (key == "wal-sync") {
      text += key + " = \"syncer\"\n";
    } else {
      text += key + " = 1024\n";
    }
  }
  auto c = with_file(text);
  ASSERT_TRUE(c.ok()) << c.err().message << "\n" << text;
  EXPECT_EQ(c->http.threads, 4u);
  EXPECT_EQ(c->shards, 4u);
  EXPECT_FALSE(c->storage.sync_on_caller);
  EXPECT_EQ(c->storage.block_cache_bytes, std::size_t{1024} << 20);
  EXPECT_EQ(c->log.level, log_level::warn);
  EXPECT_EQ(c->http.tls_key_file, "x");
}

TEST_F(config_file_test, unknown_keys_and_bad_values_name_the_key) {
  auto c = with_file("threads = 2\nthreadz = 3\n");
  EXPECT_TRUE(fails_with(c, path_ + ": threadz: unknown key"));
  EXPECT_EQ(c.code(), errc::invalid_argument);
  EXPECT_TRUE(fails_with(with_file("wal-prezero-kb = 1048577\n"),
                         ": wal-prezero-kb: expected an integer 0..1048576"));
  EXPECT_TRUE(fails_with(with_file("threads = \"four\"\n"), ": threads: "));
  EXPECT_TRUE(fails_with(with_file("listen = [\"a\", \"b\"]\n"), ": listen: expected a string"));
  EXPECT_TRUE(fails_with(with_file("config = \"other.toml\"\n"), ": config: unknown key"));
  EXPECT_TRUE(fails_with(with_file("threads = \n"), path_ + ":1:"));

  auto missing = parse({"--config", "/nonexistent/onceqd.toml"});
  EXPECT_TRUE(fails_with(missing, "/nonexistent/onceqd.toml"));
}

}  // namespace
}  // namespace onceq::cmd
