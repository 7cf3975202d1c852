// onceqd's log lines (cmd/log.cpp) and the access log's redaction
// (http/access_log.cpp): what an operator's log pipeline reads.
#include "cmd/log.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "http/access_log.hpp"

namespace onceq::cmd {
namespace {

const auto k_ts =
    std::chrono::system_clock::time_point(std::chrono::milliseconds(1'714'564'800'123));

TEST(log_test, json_line_has_ts_level_msg_and_fields) {
  const log_field fields[] = {
      {"request_id", "abc-1"}, log_number("status", 200), {"path", "/v1/x \"q\"\n"}};
  const std::string line =
      format_log_line(log_format::json, k_ts, log_level::warn, "http", "slow", fields);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line, newlines escaped
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], "2024-05-01T12:00:00.123Z");
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["component"], "http");
  EXPECT_EQ(j["msg"], "slow");
  EXPECT_EQ(j["request_id"], "abc-1");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["path"], "/v1/x \"q\"\n");
  EXPECT_LT(line.find("\"ts\""), line.find("\"level\""));
  EXPECT_LT(line.find("\"level\""), line.find("\"msg\""));
}

TEST(log_test, json_line_survives_invalid_utf8) {
  const std::string line =
      format_log_line(log_format::json, k_ts, log_level::error, "storage", "bad \xff byte", {});
  auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << line;
  EXPECT_EQ(j["level"], "error");
}

TEST(log_test, text_line_quotes_values_that_need_it) {
  const log_field fields[] = {{"file", "/etc/a b.json"}, log_number("tokens", 3)};
  EXPECT_EQ(format_log_line(log_format::text, k_ts, log_level::info, "onceqd", "auth on", fields),
            "2024-05-01T12:00:00.123Z INFO onceqd: auth on file=\"/etc/a b.json\" tokens=3\n");
}

TEST(log_test, levels_and_formats_parse) {
  EXPECT_EQ(parse_log_level("debug"), log_level::debug);
  EXPECT_EQ(parse_log_level("error"), log_level::error);
  EXPECT_FALSE(parse_log_level("INFO"));
  EXPECT_EQ(parse_log_format("text"), log_format::text);
  EXPECT_FALSE(parse_log_format("xml"));
}

TEST(access_log_test, query_values_never_reach_the_log) {
  EXPECT_EQ(http::redact_target("/v1/topics/a/messages"), "/v1/topics/a/messages");
  EXPECT_EQ(http::redact_target("/v1/consume?topic=t&token=s3cret&max=5"),
            "/v1/consume?topic&token&max");
  EXPECT_EQ(http::redact_target("/x?&a=1&&b"), "/x?a&b");
  EXPECT_EQ(http::redact_target("/x?"), "/x?");
}

}  // namespace
}  // namespace onceq::cmd
