#include "http/server.hpp"

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "router_test_support.hpp"
#include "shard/loop_clients.hpp"

namespace onceq::http {
namespace {

using namespace test;
using tcp = asio::ip::tcp;
namespace beast = boost::beast;
using bhttp::verb;

// A self-signed P-256 certificate for 127.0.0.1, made in memory.
std::shared_ptr<asio::ssl::context> test_tls_context() {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509_sign(cert, key, EVP_sha256());
  EXPECT_EQ(SSL_CTX_use_certificate(ctx->native_handle(), cert), 1);
  EXPECT_EQ(SSL_CTX_use_PrivateKey(ctx->native_handle(), key), 1);
  X509_free(cert);
  EVP_PKEY_free(key);
  return ctx;
}

// A client connection, plain or TLS (handshake done), as a synchronous
// stream for Beast's and Asio's free functions.
class conn {
 public:
  // receive_buffer: the socket's SO_RCVBUF, set before it connects (0:
  // the system's).
  conn(asio::io_context& ioc, std::uint16_t port, asio::ssl::context* tls, int receive_buffer = 0) {
    tcp::socket s(ioc);
    s.open(tcp::v4());
    if (receive_buffer > 0) s.set_option(tcp::socket::receive_buffer_size(receive_buffer));
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    if (tls == nullptr) {
      plain_.emplace(std::move(s));
      return;
    }
    tls_.emplace(std::move(s), *tls);
    tls_->handshake(asio::ssl::stream_base::client);
  }

  template <class Buffers>
  std::size_t read_some(const Buffers& b, beast::error_code& ec) {
    return tls_ ? tls_->read_some(b, ec) : plain_->read_some(b, ec);
  }
  template <class Buffers>
  std::size_t read_some(const Buffers& b) {
    return tls_ ? tls_->read_some(b) : plain_->read_some(b);
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& b, beast::error_code& ec) {
    return tls_ ? tls_->write_some(b, ec) : plain_->write_some(b, ec);
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& b) {
    return tls_ ? tls_->write_some(b) : plain_->write_some(b);
  }
  void close() { tls_ ? tls_->next_layer().close() : plain_->close(); }

 private:
  std::optional<tcp::socket> plain_;
  std::optional<asio::ssl::stream<tcp::socket>> tls_;
};

// A real server on 127.0.0.1:<ephemeral> with two I/O threads, serving
// plain HTTP or HTTPS (the parameter): both run the one session
// (http/session.cpp), so every rule below holds for both.
class ServerTest : public ::testing::TestWithParam<bool> {
 protected:
  static http_options options() {
    http_options o = test_options();
    o.port = 0;
    o.max_body_bytes = 4096;
    o.idle_timeout_ms = 5000;
    return o;
  }

  static std::shared_ptr<asio::ssl::context> server_tls() {
    return GetParam() ? test_tls_context() : nullptr;
  }

  explicit ServerTest(const http_options& o = options())
      : h_(o), srv_(ioc_, h_.routes(), o, server_tls()) {
    client_tls_.set_verify_mode(asio::ssl::verify_none);
    auto ep = srv_.listen();
    EXPECT_TRUE(ep.ok());
    port_ = ep->port();
    srv_.start();
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  ~ServerTest() override {
    srv_.stop();
    h_.core().stop();
    expect_no_sessions_soon();
    work_.reset();
    ioc_.stop();
    for (auto& t : threads_) t.join();
  }

  // Every session ends within 5 s.
  void expect_no_sessions_soon() {
    for (int i = 0; i < 500 && srv_.session_count() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(srv_.session_count(), 0u);
  }

  // A streamed consume's answer, read as it comes.
  struct stream_head {
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
  };

  // Starts a streamed consume of topic t, group g, on s; reads its head
  // into st and answers its status.
  static unsigned open_stream(conn& s, std::string_view owner, stream_head& st) {
    const std::string req = "GET /v1/consume?topic=t&group=g&owner=" + std::string(owner) +
                            " HTTP/1.1\r\nHost: x\r\n\r\n";
    asio::write(s, asio::buffer(req));
    bhttp::read_header(s, st.buf, st.parser);
    return st.parser.get().result_int();
  }

  conn connect(int receive_buffer = 0) {
    return conn(client_ioc_, port_, GetParam() ? &client_tls_ : nullptr, receive_buffer);
  }

  tcp::socket connect_plain() {
    tcp::socket s(client_ioc_);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_));
    return s;
  }

  static response roundtrip(conn& s, verb method, std::string_view target, std::string body = {}) {
    request req{method, target, 11};
    req.set(bhttp::field::host, "127.0.0.1");
    req.body() = std::move(body);
    req.prepare_payload();
    bhttp::write(s, req);
    return read_response(s);
  }

  static response read_response(conn& s) {
    static thread_local beast::flat_buffer buf;
    buf.clear();
    response res;
    bhttp::read(s, buf, res);
    return res;
  }

  // Reads until the server closes; true if it did (EOF, reset, or under
  // TLS a close without close_notify).
  template <class Stream>
  static bool closed_by_server(Stream& s) {
    char c;
    beast::error_code ec;
    s.read_some(asio::buffer(&c, 1), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::ssl::error::stream_truncated;
  }

  template <class Stream>
  static std::string read_to_close(Stream& s) {
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

  std::string raw_exchange(std::string_view bytes) {
    conn s = connect();
    asio::write(s, asio::buffer(bytes));
    return read_to_close(s);
  }

  asio::ssl::context client_tls_{asio::ssl::context::tls_client};
  router_harness h_;
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(ioc_);
  server srv_;
  std::uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  asio::io_context client_ioc_;
};

TEST_P(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
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

TEST_P(ServerTest, NoContentKeepsTheConnectionUsable) {
  h_.post("/v1/topics", {{"name", "t"}});
  auto s = connect();
  auto del = roundtrip(s, verb::delete_, "/v1/topics/t");
  EXPECT_EQ(del.result_int(), 204);
  EXPECT_EQ(del.count(bhttp::field::content_length), 0u);
  // The next answer on the same connection parses: 204 had no body.
  EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
}

TEST_P(ServerTest, ConnectionCloseIsHonoured) {
  auto s = connect();
  request req{verb::get, "/v1/healthz", 11};
  req.keep_alive(false);
  bhttp::write(s, req);
  auto res = read_response(s);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_FALSE(res.keep_alive());
  EXPECT_TRUE(closed_by_server(s));
}

TEST_P(ServerTest, OversizedBodyGets413AndClose) {
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

TEST_P(ServerTest, BodyAtTheLimitIsRead) {
  h_.post("/v1/topics", {{"name", "t"}});
  auto s = connect();
  std::string value(4096 - 40, 'v');
  std::string body = json{{"topic", "t"}, {"value", value}}.dump();
  ASSERT_LE(body.size(), 4096u);
  auto res = roundtrip(s, verb::post, "/v1/produce", body);
  EXPECT_EQ(res.result_int(), 200) << res.body();
}

TEST_P(ServerTest, MalformedRequestGets400AndClose) {
  std::string out = raw_exchange("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
  EXPECT_NE(out.find("\"error\":\"INVALID_ARGUMENT\""), std::string::npos) << out;
  EXPECT_NE(out.find("X-Request-Id"), std::string::npos);
}

TEST_P(ServerTest, BadChunkedBodyGets400) {
  std::string out = raw_exchange(
      "POST /v1/produce HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
}

TEST_P(ServerTest, HugeHeaderGets400) {
  std::string req =
      "GET /v1/healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  std::string out = raw_exchange(req);
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out.substr(0, 200);
}

TEST_P(ServerTest, ExpectContinueIsAnswered) {
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

TEST_P(ServerTest, PipelinedRequestsAnswerInOrder) {
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

// Answers the socket cannot take at once go on where a send stopped:
// 60 pipelined requests for the 100 KB OpenAPI document (more than the
// socket's send buffer holds) between small ones, from a client with a
// 4 KiB receive buffer that reads only after a pause, all answer whole
// and in order.
TEST_P(ServerTest, LargePipelinedAnswersToASlowReaderArriveWholeAndInOrder) {
  constexpr int k_requests = 120;
  auto s = connect(4096);
  std::string requests;
  for (int i = 0; i < k_requests; ++i) {
    requests += i % 2 == 0 ? "GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
                           : "GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  asio::write(s, asio::buffer(requests));
  // The server fills its send buffer and waits for this reader.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string spec;
  beast::flat_buffer buf;  // holds the answers read past the current one
  for (int i = 0; i < k_requests; ++i) {
    response res;
    bhttp::read(s, buf, res);
    ASSERT_EQ(res.result_int(), 200) << i;
    if (i % 2 == 1) {
      EXPECT_EQ(res.body(), R"({"status":"ok"})") << i;
      continue;
    }
    EXPECT_GT(res.body().size(), 50'000u) << i;
    EXPECT_EQ(res.body()[res.body().find_last_not_of('\n')], '}') << i;
    if (spec.empty()) spec = res.body();
    EXPECT_EQ(res.body(), spec) << i;
  }
  EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
}

// Each session counts itself on its loop (shard/loop_clients.hpp, what a
// shard's loop reads to decide where its WAL sync runs): a connection from
// its start to its end, and a waiting one from a whole request to the
// answer, a long-poll's included.
TEST_P(ServerTest, SessionsCountThemselvesOnTheirLoopAndWhileTheyWait) {
  h_.post("/v1/topics", {{"name", "t"}});
  const loop_clients& clients = loop_clients::of(ioc_);
  auto within_5s = [](auto cond) {
    for (int i = 0; i < 500 && !cond(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return cond();
  };
  auto s = connect();
  EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
  EXPECT_EQ(clients.connections(), 1u);
  EXPECT_EQ(clients.waiting(), 0u);
  EXPECT_EQ(clients.recently_idle(), 1u) << "idle since its answer; nobody turns this loop";

  request poll{verb::post, "/v1/consume", 11};
  poll.set(bhttp::field::host, "127.0.0.1");
  poll.body() = R"({"topic":"t","group":"g","owner":"o","max_messages":10,"wait_ms":10000})";
  poll.prepare_payload();
  bhttp::write(s, poll);
  EXPECT_TRUE(within_5s([&] { return clients.waiting() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(clients.waiting(), 1u) << "still waiting: nothing to deliver";
  h_.post("/v1/produce", {{"topic", "t"}, {"value", "v"}});
  auto res = read_response(s);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_NE(res.body().find("\"v\""), std::string::npos) << res.body();
  EXPECT_EQ(clients.waiting(), 0u);
  EXPECT_EQ(clients.connections(), 1u);

  s.close();
  expect_no_sessions_soon();
  EXPECT_TRUE(within_5s([&] { return clients.connections() == 0; }));
  EXPECT_EQ(clients.recently_idle(), 0u);
}

TEST_P(ServerTest, StreamConsumeSendsChunkedLines) {
  h_.post("/v1/topics", {{"name", "t"}});
  h_.post("/v1/produce", {{"topic", "t"}, {"value", "first"}});
  auto s = connect();
  stream_head st;
  EXPECT_EQ(open_stream(s, "s", st), 200u);
  EXPECT_TRUE(st.parser.get().chunked());
  EXPECT_EQ(st.parser.get()[bhttp::field::content_type], "application/x-ndjson");

  // Collect chunk bodies until two lines arrived.
  std::string lines;
  auto on_body = [&](std::uint64_t, std::string_view body, beast::error_code& ec) {
    lines.append(body);
    ec = {};
    return body.size();
  };
  st.parser.on_chunk_body(on_body);
  h_.post("/v1/produce", {{"topic", "t"}, {"value", "second"}});
  while (std::count(lines.begin(), lines.end(), '\n') < 2) {
    beast::error_code ec;
    bhttp::read_some(s, st.buf, st.parser, ec);
    ASSERT_FALSE(ec) << ec.message();
  }
  auto got = lines_of(lines);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]["value"], "first");
  EXPECT_EQ(got[1]["value"], "second");

  // The client leaves; the session ends on its own.
  s.close();
  expect_no_sessions_soon();
}

TEST_P(ServerTest, ClosedStreamTakesNoMoreMessages) {
  h_.post("/v1/topics", {{"name", "t"}});
  {
    auto s = connect();
    stream_head st;
    ASSERT_EQ(open_stream(s, "gone", st), 200u);
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

TEST_P(ServerTest, StopClosesIdleConnections) {
  auto s = connect();
  EXPECT_EQ(roundtrip(s, verb::get, "/v1/healthz").result_int(), 200);
  srv_.stop();
  EXPECT_TRUE(closed_by_server(s));
  // No new connections are served.
  expect_no_sessions_soon();
}

TEST_P(ServerTest, StopEndsStreams) {
  h_.post("/v1/topics", {{"name", "t"}});
  auto s = connect();
  stream_head st;
  ASSERT_EQ(open_stream(s, "s", st), 200u);
  srv_.stop();
  h_.core().stop();
  // The stream ends with the last chunk (a complete message), then the close.
  beast::error_code ec;
  bhttp::read(s, st.buf, st.parser, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(st.parser.is_done());
  EXPECT_TRUE(closed_by_server(s));
}

TEST_P(ServerTest, Http10StreamIsNotChunked) {
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

// Timeouts are deadlines swept once per period on each loop
// (http/deadline_sweep.hpp), not a timer per read, for plain and TLS
// sessions alike: a connection still closes when its deadline passes, and
// not before.
class ServerTimeoutTest : public ServerTest {
 protected:
  static http_options short_timeouts() {
    http_options o = options();
    // Long enough that a loaded machine (sanitizers, CI) does not stretch
    // a 150 ms pause between requests past it.
    o.idle_timeout_ms = 600;
    o.header_timeout_ms = 600;
    o.tls_handshake_timeout_ms = 600;
    return o;
  }
  ServerTimeoutTest() : ServerTest(short_timeouts()) {}

  static std::chrono::milliseconds since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t);
  }

  // The server closes s one timeout (600 ms; a sweep period late at most)
  // after started.
  template <class Stream>
  static void expect_cut_in_time(Stream& s, std::chrono::steady_clock::time_point started) {
    EXPECT_TRUE(closed_by_server(s));
    EXPECT_GE(since(started).count(), 550);
    EXPECT_LT(since(started).count(), 5000);
  }
};

TEST_P(ServerTimeoutTest, AnIdleKeptAliveConnectionClosesAfterTheIdleTimeoutNotBefore) {
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

TEST_P(ServerTimeoutTest, AStalledBodyIsCut) {
  auto s = connect();
  const auto started = std::chrono::steady_clock::now();
  std::string head =
      "POST /v1/produce HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"topic\"";
  asio::write(s, asio::buffer(head));
  expect_cut_in_time(s, started);
}

TEST_P(ServerTimeoutTest, AStalledHeaderIsCutAndCounted) {
  auto s = connect();
  const auto started = std::chrono::steady_clock::now();
  asio::write(s, asio::buffer(std::string_view("GET /v1/healthz HTTP/1.1\r\nHost: x\r\n")));
  expect_cut_in_time(s, started);
  EXPECT_EQ(h_.routes().metrics().connections().header_timeouts.load(), 1u);
}

TEST_P(ServerTimeoutTest, AStalledTlsHandshakeIsCutAndCounted) {
  if (!GetParam()) GTEST_SKIP() << "TLS only";
  auto s = connect_plain();
  const auto started = std::chrono::steady_clock::now();
  // The first bytes of a ClientHello record, then nothing.
  const unsigned char hello[] = {0x16, 0x03, 0x01, 0x00, 0x40, 0x01};
  asio::write(s, asio::buffer(hello));
  expect_cut_in_time(s, started);
  // Counted when the cut handshake's callback runs, which may be after the
  // client saw the close.
  const auto& failures = h_.routes().metrics().connections().tls_handshake_failures;
  for (int i = 0; i < 500 && failures.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(failures.load(), 1u);
}

TEST_P(ServerTest, PlainHttpOnTheTlsPortGetsAPlain400) {
  if (!GetParam()) GTEST_SKIP() << "TLS only";
  auto s = connect_plain();
  asio::write(s, asio::buffer(std::string_view("GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n")));
  std::string out = read_to_close(s);
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
  EXPECT_NE(out.find("HTTPS"), std::string::npos) << out;
  EXPECT_EQ(h_.routes().metrics().connections().tls_handshake_failures.load(), 1u);
}

std::string transport_name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "tls" : "plain";
}
INSTANTIATE_TEST_SUITE_P(Transports, ServerTest, ::testing::Bool(), transport_name);
INSTANTIATE_TEST_SUITE_P(Transports, ServerTimeoutTest, ::testing::Bool(), transport_name);

}  // namespace
}  // namespace onceq::http
