#include "http/error_table.hpp"

#include "base/result.hpp"

#include <map>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace onceq::http {
namespace {

using bhttp::status;

TEST(ErrorTableTest, EveryCodeMapsToTheSpecStatus) {
  // docs/API.md's view: each status and the codes that answer it (written
  // from the spec, not copied from the table it checks).
  const std::map<status, std::vector<errc>> expected = {
      {status::ok, {errc::ok}},
      {status::bad_request, {errc::invalid_argument}},
      {status::unauthorized, {errc::unauthenticated}},
      {status::forbidden, {errc::permission_denied}},
      {status::not_found, {errc::not_found}},
      {status::method_not_allowed, {errc::method_not_allowed}},
      {status::conflict, {errc::already_exists, errc::failed_precondition}},
      {status::payload_too_large, {errc::payload_too_large}},
      {status::too_many_requests, {errc::resource_exhausted}},
      {status::service_unavailable, {errc::unavailable, errc::would_block}},
      {status::internal_server_error, {errc::internal}},
  };
  std::size_t codes = 0;
  for (const auto& [st, all] : expected) {
    for (errc code : all) {
      EXPECT_EQ(status_of(code), st) << to_string(code);
      ++codes;
    }
  }
  ASSERT_EQ(error_table().size(), codes);
}

TEST(ErrorTableTest, RowsSitAtTheirCodesIndex) {
  auto table = error_table();
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(table[i].code), i);
  }
}

TEST(ErrorTableTest, UnknownCodeIsInternal) {
  EXPECT_EQ(status_of(static_cast<errc>(999)), status::internal_server_error);
}

TEST(ErrorTableTest, ErrorBodyHasCodeAndMessage) {
  for (const auto& row : error_table()) {
    if (row.code == errc::ok) continue;
    response res = make_error_response(make_error(row.code, "why"), 11);
    EXPECT_EQ(res.result(), row.status);
    EXPECT_EQ(res[bhttp::field::content_type], "application/json");
    auto body = nlohmann::json::parse(res.body());
    EXPECT_EQ(body["error"], std::string(to_string(row.code)));
    EXPECT_EQ(body["message"], "why");
    EXPECT_EQ(res[bhttp::field::content_length], std::to_string(res.body().size()));
  }
}

TEST(ErrorTableTest, TooManyRequestsCarriesRetryAfter) {
  response res = make_error_response(make_error(errc::resource_exhausted, "busy"), 11,
                                     {.retry_after_ms = 1500, .allow = {}});
  EXPECT_EQ(res.result(), status::too_many_requests);
  EXPECT_EQ(res[bhttp::field::retry_after], "2");  // rounded up to whole seconds
  auto body = nlohmann::json::parse(res.body());
  EXPECT_EQ(body["error"], "RESOURCE_EXHAUSTED");
  EXPECT_EQ(body["retry_after_ms"], 1500);
}

TEST(ErrorTableTest, UnavailableCarriesRetryAfterFromTheErrorElseOneSecond) {
  response plain = make_error_response(make_error(errc::unavailable, "down"), 11);
  EXPECT_EQ(plain.result(), status::service_unavailable);
  EXPECT_EQ(plain[bhttp::field::retry_after], "1");
  EXPECT_EQ(nlohmann::json::parse(plain.body())["retry_after_ms"], 1000);

  error hinted = make_error(errc::unavailable, "disk full");
  hinted.retry_after_ms = 2500;
  response res = make_error_response(hinted, 11);
  EXPECT_EQ(res[bhttp::field::retry_after], "3");  // rounded up
  EXPECT_EQ(nlohmann::json::parse(res.body())["retry_after_ms"], 2500);
}

TEST(ErrorTableTest, TheErrorsOwnRetryHintWins) {
  error e = make_error(errc::resource_exhausted, "topic full");
  e.retry_after_ms = 250;
  response res = make_error_response(e, 11, {.retry_after_ms = 1000, .allow = {}});
  EXPECT_EQ(res[bhttp::field::retry_after], "1");
  EXPECT_EQ(nlohmann::json::parse(res.body())["retry_after_ms"], 250);
  // The caller's 429 default does not apply to a 503.
  error down = make_error(errc::unavailable, "stopping");
  down.retry_after_ms = 3000;
  res = make_error_response(down, 11, {.retry_after_ms = 1000, .allow = {}});
  EXPECT_EQ(res[bhttp::field::retry_after], "3");
  EXPECT_EQ(nlohmann::json::parse(res.body())["retry_after_ms"], 3000);
}

TEST(ErrorTableTest, UnauthenticatedChallengesForBearer) {
  response res = make_error_response(make_error(errc::unauthenticated, "who"), 11);
  EXPECT_EQ(res.result(), status::unauthorized);
  EXPECT_EQ(res[bhttp::field::www_authenticate], "Bearer");
  res = make_error_response(make_error(errc::permission_denied, "no"), 11);
  EXPECT_EQ(res.count(bhttp::field::www_authenticate), 0u);
}

TEST(ErrorTableTest, RetryAfterOnlyOn429And503) {
  response res = make_error_response(make_error(errc::invalid_argument, "x"), 11,
                                     {.retry_after_ms = 1000, .allow = "GET"});
  EXPECT_EQ(res.count(bhttp::field::retry_after), 0u);
  EXPECT_EQ(res.count(bhttp::field::allow), 0u);
  EXPECT_FALSE(nlohmann::json::parse(res.body()).contains("retry_after_ms"));
}

TEST(ErrorTableTest, MethodNotAllowedCarriesAllow) {
  response res = make_error_response(make_error(errc::method_not_allowed, "no"), 11,
                                     {.retry_after_ms = 0, .allow = "GET, POST"});
  EXPECT_EQ(res.result(), status::method_not_allowed);
  EXPECT_EQ(res[bhttp::field::allow], "GET, POST");
}

TEST(ErrorTableTest, InvalidUtf8InMessageDoesNotThrow) {
  std::string bad = "bad \xff\xfe bytes";
  std::string body;
  ASSERT_NO_THROW(body = error_body(make_error(errc::invalid_argument, bad)));
  EXPECT_TRUE(nlohmann::json::accept(body));
}

}  // namespace
}  // namespace onceq::http
