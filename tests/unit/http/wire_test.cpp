#include "http/wire.hpp"

#include <gtest/gtest.h>

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

namespace onceq::http {
namespace {

namespace beast = boost::beast;
using status = bhttp::status;

// What Beast's serializer puts on the wire for res.
std::string beast_bytes(response res) {
  bhttp::response_serializer<bhttp::string_body> sr{res};
  std::string out;
  beast::error_code ec;
  while (!sr.is_done()) {
    sr.next(ec, [&](beast::error_code&, const auto& buffers) {
      const std::string part = beast::buffers_to_string(buffers);
      out += part;
      sr.consume(part.size());
    });
    if (ec) break;
  }
  return out;
}

std::string rendered(const response& res) {
  std::string head = "left over from the last answer";
  render_head(res, head);
  return head + res.body();
}

TEST(WireTest, JsonAnswerIsByteForByteBeasts) {
  response res{status::ok, 11};
  res.set(bhttp::field::content_type, "application/json");
  res.set("X-Request-Id", "req-1");
  res.body() = R"({"status":"produced"})";
  res.prepare_payload();
  res.keep_alive(true);
  EXPECT_EQ(rendered(res), beast_bytes(res));
}

TEST(WireTest, NoContentAndClose) {
  response res{status::no_content, 11};
  res.set("X-Request-Id", "req-2");
  res.keep_alive(false);
  EXPECT_EQ(rendered(res), beast_bytes(res));
  EXPECT_NE(rendered(res).find("Connection: close\r\n"), std::string::npos);
}

TEST(WireTest, Http10KeepAliveAndErrorHeaders) {
  response res{status::service_unavailable, 10};
  res.set(bhttp::field::content_type, "application/json");
  res.set(bhttp::field::retry_after, "1");
  res.set("X-Custom", "a: b");
  res.body() = R"({"error":"UNAVAILABLE"})";
  res.prepare_payload();
  res.keep_alive(true);
  const std::string bytes = rendered(res);
  EXPECT_EQ(bytes, beast_bytes(res));
  EXPECT_EQ(bytes.rfind("HTTP/1.0 503 Service Unavailable\r\n", 0), 0u);
}

TEST(WireTest, ReasonSetByHandIsKept) {
  response res{status::ok, 11};
  res.reason("Fine");
  res.prepare_payload();
  EXPECT_EQ(rendered(res), beast_bytes(res));
  EXPECT_EQ(rendered(res).rfind("HTTP/1.1 200 Fine\r\n", 0), 0u);
}

}  // namespace
}  // namespace onceq::http
