#include "http/server.hpp"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "router_test_support.hpp"

namespace onceq::http {
namespace {

using namespace test;
using tcp = asio::ip::tcp;
namespace beast = boost::beast;
using bhttp::verb;

// A real server on 127.0.0.1:<ephemeral> with two I/O threads.
class ServerTest : public ::testing::Test {
 protected:
  static http_options options() {
    http_options o = test_options();
    o.port = 0;
    o.max_body_bytes = 4096;
    o.idle_timeout_ms = 5000;
    return o;
  }

  explicit ServerTest(const http_options& o = options()) : h_(o), srv_(ioc_, h_.routes(), o) {
    auto ep = srv_.listen();
    EXPECT_TRUE(ep.ok());
    port_ = ep->port();
    srv_.start();
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  ~ServerTest() override {
    srv_.stop();
    h_.core().stop();
    for (int i = 0; i < 500 && srv_.session_count() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(srv_.session_count(), 0u);
    work_.reset();
    ioc_.stop();
    for (auto& t : threads_) t.join();
  }

  tcp::socket connect() {
    tcp::socket s(client_ioc_);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
    return s;
  }

  static response roundtrip(tcp::socket& s, verb method, std::string_view target,
                            std::string body = {}) {
    request req{method, target, 11};
    req.set(bhttp::field::host, "127.0.0.1");
    req.body() = std::move(body);
    req.prepare_payload();
    bhttp::write(s, req);
    return read_response(s);
  }

  static response read_response(tcp::socket& s) {
    static thread_local beast::flat_buffer buf;
    buf.clear();
    response res;
    bhttp::read(s, buf, res);
    return res;
  }

  // Reads until the server closes; true if it did (EOF or reset).
  static bool closed_by_server(tcp::socket& s) {
    char c;
    beast::error_code ec;
    s.read_some(asio::buffer(&c, 1), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  }

  std::string raw_exchange(std::string_view bytes) {
    tcp::socket s = connect();
    asio::write(s, asio::buffer(bytes));
    std::string out;
    beast::error_code ec;
    std::array<char, 4096> buf;
    while (true) {
      auto n = s.read_some(asio::buffer(buf), ec);
      out.append(buf.data(), n);
      if (ec) break;
    }
    return out;
  }

  router_harness h_;
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(ioc_);
  server srv_;
  std::uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  asio::io_context client_ioc_;
};

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  auto s = connect();
  for (int i = 0; i < 3; ++i) {
    auto res = roundtrip(s, verb::get, "/v1/healthz");
    EXPECT_EQ(res.result_int(), 200);
    EXPECT_EQ(res.body(), R"({"status":"ok"})");
    EXPECT_TRUE(res.keep_alive());
    EXPECT_FALSE(res["X-Request-Id"].empty());
  }
  EXPECT_EQ(srv_.session_count(), 1u);
}

TEST_F(ServerTest, NoContentKeepsTheConnectionUsable) {
  h_.post("/v1/topics", {{"name", "t"}});
  auto s = connect();
  auto del = roundtrip(s, verb::delete_, "/v1/topics/t");
  EXPECT_EQ(del.result_int(), 204);
  EXPECT_EQ(del.count(bhttp::field::content_length), 0u);
  // The next answer on the same connection parses: 204 had no body.
  EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
}

TEST_F(ServerTest, ConnectionCloseIsHonoured) {
  auto s = connect();
  request req{verb::get, "/v1/healthz", 11};
  req.keep_alive(false);
  bhttp::write(s, req);
  auto res = read_response(s);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_FALSE(res.keep_alive());
  EXPECT_TRUE(closed_by_server(s));
}

TEST_F(ServerTest, OversizedBodyGets413AndClose) {
  auto s = connect();
  request req{verb::post, "/v1/produce", 11};
  req.set("X-Request-Id", "big-1");
  req.body() = std::string(5000, 'x');
  req.prepare_payload();
  bhttp::write(s, req);
  auto res = read_response(s);
  EXPECT_TRUE(is_error(res, 413, "PAYLOAD_TOO_LARGE"));
  EXPECT_EQ(res["X-Request-Id"], "big-1");
  EXPECT_FALSE(res.keep_alive());
  EXPECT_TRUE(closed_by_server(s));
}

TEST_F(ServerTest, BodyAtTheLimitIsRead) {
  h_.post("/v1/topics", {{"name", "t"}});
  auto s = connect();
  std::string value(4096 - 40, 'v');
  std::string body = json{{"topic", "t"}, {"value", value}}.dump();
  ASSERT_LE(body.size(), 4096u);
  auto res = roundtrip(s, verb::post, "/v1/produce", body);
  EXPECT_EQ(res.result_int(), 200) << res.body();
}

TEST_F(ServerTest, MalformedRequestGets400AndClose) {
  std::string out = raw_exchange("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
  EXPECT_NE(out.find("\"error\":\"INVALID_ARGUMENT\""), std::string::npos) << out;
  EXPECT_NE(out.find("X-Request-Id"), std::string::npos);
}

TEST_F(ServerTest, BadChunkedBodyGets400) {
  std::string out = raw_exchange(
      "POST /v1/produce HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
}

TEST_F(ServerTest, HugeHeaderGets400) {
  std::string req =
      "GET /v1/healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  std::string out = raw_exchange(req);
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out.substr(0, 200);
}

TEST_F(ServerTest, ExpectContinueIsAnswered) {
  h_.post("/v1/topics", {{"name", "t"}});
  auto s = connect();
  std::string body = R"({"topic":"t","value":"v"})";
  std::string head =
      "POST /v1/produce HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  asio::write(s, asio::buffer(head));
  asio::streambuf sb;
  asio::read_until(s, sb, "\r\n\r\n");
  std::string interim(asio::buffers_begin(sb.data()), asio::buffers_end(sb.data()));
  EXPECT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << interim;
  sb.consume(std::string_view("HTTP/1.1 100 Continue\r\n\r\n").size());
  asio::write(s, asio::buffer(body));
  beast::flat_buffer buf;
  auto leftover = sb.data();
  buf.commit(asio::buffer_copy(buf.prepare(leftover.size()), leftover));
  response res;
  bhttp::read(s, buf, res);
  EXPECT_EQ(res.result_int(), 200) << res.body();
}

TEST_F(ServerTest, PipelinedRequestsAnswerInOrder) {
  std::string two =
      "GET /v1/version HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /v1/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string out = raw_exchange(two);
  auto v = out.find("\"wal_enabled\":true");
  auto h = out.find("{\"status\":\"ok\"}");
  ASSERT_NE(v, std::string::npos) << out;
  ASSERT_NE(h, std::string::npos) << out;
  EXPECT_LT(v, h);
}

TEST_F(ServerTest, StreamConsumeSendsChunkedLines) {
  h_.post("/v1/topics", {{"name", "t"}});
  h_.post("/v1/produce", {{"topic", "t"}, {"value", "first"}});
  auto s = connect();
  std::string req = "GET /v1/consume?topic=t&group=g&owner=s HTTP/1.1\r\nHost: x\r\n\r\n";
  asio::write(s, asio::buffer(req));

  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::string_body> parser;
  bhttp::read_header(s, buf, parser);
  EXPECT_EQ(parser.get().result_int(), 200);
  EXPECT_TRUE(parser.get().chunked());
  EXPECT_EQ(parser.get()[bhttp::field::content_type], "application/x-ndjson");

  // Collect chunk bodies until two lines arrived.
  std::string lines;
  auto on_body = [&](std::uint64_t, std::string_view body, beast::error_code& ec) {
    lines.append(body);
    ec = {};
    return body.size();
  };
  parser.on_chunk_body(on_body);
  h_.post("/v1/produce", {{"topic", "t"}, {"value", "second"}});
  while (std::count(lines.begin(), lines.end(), '\n') < 2) {
    beast::error_code ec;
    bhttp::read_some(s, buf, parser, ec);
    ASSERT_FALSE(ec) << ec.message();
  }
  auto got = lines_of(lines);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]["value"], "first");
  EXPECT_EQ(got[1]["value"], "second");

  // The client leaves; the session ends on its own.
  s.close();
  for (int i = 0; i < 300 && srv_.session_count() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(srv_.session_count(), 0u);
}

TEST_F(ServerTest, ClosedStreamTakesNoMoreMessages) {
  h_.post("/v1/topics", {{"name", "t"}});
  {
    auto s = connect();
    std::string req = "GET /v1/consume?topic=t&group=g&owner=gone HTTP/1.1\r\nHost: x\r\n\r\n";
    asio::write(s, asio::buffer(req));
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
    bhttp::read_header(s, buf, parser);
    ASSERT_EQ(parser.get().result_int(), 200);
  }  // the client leaves while its poll is parked in the core
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int i = 0; i < 3; ++i) h_.post("/v1/produce", {{"topic", "t"}, {"value", "m"}});
  std::size_t got = 0;
  for (int i = 0; i < 200 && got < 3; ++i) {
    h_.clock().advance(2);  // lets cut leases expire on the manual clock
    auto res = h_.post("/v1/consume",
                       {{"topic", "t"}, {"group", "g"}, {"owner", "alive"}, {"max_messages", 10}});
    got += lines_of(res.body()).size();
    if (got < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(got, 3u);
}

TEST_F(ServerTest, StopClosesIdleConnections) {
  auto s = connect();
  EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
  srv_.stop();
  EXPECT_TRUE(closed_by_server(s));
  // No new connections are served.
  for (int i = 0; i < 100 && srv_.session_count() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(srv_.session_count(), 0u);
}

TEST_F(ServerTest, StopEndsStreams) {
  h_.post("/v1/topics", {{"name", "t"}});
  auto s = connect();
  std::string req = "GET /v1/consume?topic=t&group=g&owner=s HTTP/1.1\r\nHost: x\r\n\r\n";
  asio::write(s, asio::buffer(req));
  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::string_body> parser;
  bhttp::read_header(s, buf, parser);
  ASSERT_EQ(parser.get().result_int(), 200);
  srv_.stop();
  h_.core().stop();
  // The stream ends with the last chunk (a complete message), then the close.
  beast::error_code ec;
  bhttp::read(s, buf, parser, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.is_done());
  EXPECT_TRUE(closed_by_server(s));
}

TEST_F(ServerTest, Http10StreamIsNotChunked) {
  h_.post("/v1/topics", {{"name", "t"}});
  h_.post("/v1/produce", {{"topic", "t"}, {"value", "old-client"}});
  auto s = connect();
  std::string req = "GET /v1/consume?topic=t&group=g&owner=s HTTP/1.0\r\n\r\n";
  asio::write(s, asio::buffer(req));
  asio::streambuf sb;
  asio::read_until(s, sb, "\n{");  // the head, then the first line starts
  srv_.stop();
  h_.core().stop();
  beast::error_code ec;
  asio::read(s, sb, ec);  // to the close
  std::string out(asio::buffers_begin(sb.data()), asio::buffers_end(sb.data()));
  EXPECT_EQ(out.rfind("HTTP/1.0 200", 0), 0u) << out;
  EXPECT_EQ(out.find("chunked"), std::string::npos) << out;
  auto body = out.substr(out.find("\r\n\r\n") + 4);
  auto lines = lines_of(body);
  ASSERT_EQ(lines.size(), 1u) << body;
  EXPECT_EQ(lines[0]["value"], "old-client");
}

// Timeouts are deadlines swept once per period on each loop (plain
// sessions: http/plain_session.cpp), not a timer per read: a connection
// still closes when its deadline passes, and not before.
class ServerTimeoutTest : public ServerTest {
 protected:
  static http_options short_timeouts() {
    http_options o = options();
    // Long enough that a loaded machine (sanitizers, CI) does not stretch
    // a 150 ms pause between requests past it.
    o.idle_timeout_ms = 600;
    o.header_timeout_ms = 600;
    return o;
  }
  ServerTimeoutTest() : ServerTest(short_timeouts()) {}

  static std::chrono::milliseconds since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t);
  }
};

TEST_F(ServerTimeoutTest, AnIdleKeptAliveConnectionClosesAfterTheIdleTimeoutNotBefore) {
  auto s = connect();
  EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
  // Each request moves the deadline: five requests 150 ms apart span
  // more than one idle timeout on a connection that stays open.
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
  }
  const auto idle_since = std::chrono::steady_clock::now();
  EXPECT_TRUE(closed_by_server(s));
  EXPECT_GE(since(idle_since).count(), 550);
  EXPECT_LT(since(idle_since).count(), 5000);
}

TEST_F(ServerTimeoutTest, AStalledBodyIsCut) {
  auto s = connect();
  const auto started = std::chrono::steady_clock::now();
  std::string head =
      "POST /v1/produce HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"topic\"";
  asio::write(s, asio::buffer(head));
  EXPECT_TRUE(closed_by_server(s));
  EXPECT_GE(since(started).count(), 550);
  EXPECT_LT(since(started).count(), 5000);
}

TEST_F(ServerTimeoutTest, AStalledHeaderIsCutAndCounted) {
  auto s = connect();
  const auto started = std::chrono::steady_clock::now();
  asio::write(s, asio::buffer(std::string_view("GET /v1/healthz HTTP/1.1\r\nHost: x\r\n")));
  EXPECT_TRUE(closed_by_server(s));
  EXPECT_GE(since(started).count(), 550);
  EXPECT_LT(since(started).count(), 5000);
  EXPECT_EQ(h_.routes().metrics().connections().header_timeouts.load(), 1u);
}

}  // namespace
}  // namespace onceq::http
