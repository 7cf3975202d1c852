// HTTPS: onceqd --tls-cert/--tls-key with a self-signed certificate made by
// the openssl CLI at test time. Keep-alive, long-poll and the NDJSON stream
// over TLS; plain HTTP on the TLS port; old protocol versions; bad files.

#include <openssl/ssl.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>

#include "test_support.hpp"

#ifndef ONCEQD_PATH
#error "ONCEQD_PATH must be defined to the path of the onceqd binary"
#endif

namespace onceq::itest {
namespace {

namespace net = boost::asio;
namespace fs = std::filesystem;

// Runs a shell command; returns its exit status (-1 if it did not exit).
int run(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A temp directory with cert.pem/key.pem (P-256, CN and SAN 127.0.0.1) and
// other.key (a key of no certificate).
struct cert_dir {
  cert_dir() {
    std::string tmpl = (fs::temp_directory_path() / "onceq-tls-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    cert = dir + "/cert.pem";
    key = dir + "/key.pem";
    other_key = dir + "/other.key";
    const int made =
        run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
            "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
            key + " -out " + cert + " 2>/dev/null && openssl genpkey -algorithm EC -pkeyopt " +
            "ec_paramgen_curve:prime256v1 -out " + other_key + " 2>/dev/null");
    if (made != 0) throw std::runtime_error("openssl could not make a test certificate");
  }
  ~cert_dir() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::string dir, cert, key, other_key;
};

class tls : public onceq_test {
 protected:
  void SetUp() override {
    server_process::options o;
    o.extra_args = {"--tls-cert", certs_.cert, "--tls-key", certs_.key};
    o.tls = true;
    server_ = std::make_unique<server_process>(std::move(o));
    client_ = std::make_unique<http_client>(server_->port(), verified());
  }

  // Verifies the server's certificate (and that it names 127.0.0.1).
  tls_client_options verified() const { return tls_client_options{certs_.cert}; }

  // The protocol a handshake with min..max versions negotiated, or "" if
  // the server refused it.
  std::string handshake_with(int min_version, int max_version) {
    net::io_context ioc;
    net::ssl::context ctx(net::ssl::context::tls_client);
    // OpenSSL 3 allows TLS 1.0/1.1 only at security level 0.
    SSL_CTX_set_security_level(ctx.native_handle(), 0);
    SSL_CTX_set_min_proto_version(ctx.native_handle(), min_version);
    SSL_CTX_set_max_proto_version(ctx.native_handle(), max_version);
    ctx.set_verify_mode(net::ssl::verify_none);
    net::ssl::stream<net::ip::tcp::socket> s(ioc, ctx);
    s.next_layer().connect({net::ip::address_v4::loopback(), port()});
    boost::system::error_code ec;
    s.handshake(net::ssl::stream_base::client, ec);
    if (ec) return "";
    return SSL_get_version(s.native_handle());
  }

  double metric(std::string_view name) { return itest::metric(client(), name); }

  cert_dir certs_;
};

TEST_F(tls, keep_alive_serves_many_requests_on_one_connection) {
  const double accepted = metric("onceq_connections_accepted_total");
  ASSERT_GE(accepted, 1);
  create_topic("t", 1);
  for (int i = 0; i < 20; ++i) produce("t", numbered("m", i));
  auto got = drain("t", "g", "w");
  EXPECT_EQ(got.size(), 20u);
  // Every request above went over the first connection.
  EXPECT_EQ(metric("onceq_connections_accepted_total"), accepted);
  EXPECT_EQ(metric("onceq_tls_handshake_failures_total"), 0);
}

TEST_F(tls, long_poll_waits_and_answers_over_tls) {
  create_topic("lp", 1);
  auto waiting =
      timed_post_async([&] { return std::make_unique<http_client>(port(), verified()); },
                       "/v1/consume", consume_body("lp", "g", "w", 1, {{"wait_ms", 10000}}));
  std::this_thread::sleep_for(300ms);
  produce("lp", "late");
  auto [res, waited] = waiting.get();
  ASSERT_EQ(res.status, 200u) << res.body;
  auto lines = res.ndjson();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("value"), "late");
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s);
}

TEST_F(tls, stream_consume_over_tls) {
  create_topic("s", 1);
  produce("s", "one");
  {
    ndjson_stream stream(port(), verified(), "GET",
                         "/v1/consume?topic=s&group=g&owner=streamer&lease_ms=60000");
    ASSERT_EQ(stream.status(), 200u);
    EXPECT_EQ(stream.head().header("Transfer-Encoding"), "chunked");
    auto first = stream.next(5s);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->at("value"), "one");
    // Quiet for longer than several polls, then a new message arrives.
    std::this_thread::sleep_for(1s);
    produce("s", "two");
    auto second = stream.next(5s);
    ASSERT_TRUE(second.has_value());
    EXPECT_EQ(second->at("value"), "two");
  }
  // The stream ended with the client: a message produced now goes to
  // another consumer.
  std::this_thread::sleep_for(500ms);
  produce("s", "three");
  auto later = consume("s", "g", "other", 10);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].at("value"), "three");
  EXPECT_EQ(client().get("/v1/healthz").status, 200u);
}

TEST_F(tls, large_bodies_cross_many_tls_records) {
  create_topic("big", 1);
  const std::string value(300'000, 'x');  // ~19 TLS records each way
  produce("big", value);
  auto got = consume("big", "g", "w", 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].at("value"), value);
  // Over the limit: 413 over TLS, then the connection closes cleanly.
  auto res = client().request("POST", "/v1/produce", std::string(2u << 20, 'y'));
  EXPECT_TRUE(is_error(res, 413, "PAYLOAD_TOO_LARGE"));
  EXPECT_EQ(client().get("/v1/healthz").status, 200u);
}

TEST_F(tls, plain_http_on_the_tls_port_gets_a_plain_400) {
  http_client plain(port(), 5s);
  auto res = plain.get("/v1/healthz");
  EXPECT_TRUE(is_error(res, 400, "INVALID_ARGUMENT"));
  EXPECT_NE(res.body.find("HTTPS"), std::string::npos) << res.body;
  EXPECT_EQ(metric("onceq_tls_handshake_failures_total"), 1);
  EXPECT_EQ(client().get("/v1/healthz").status, 200u);
}

TEST_F(tls, only_tls_1_2_and_later_are_accepted) {
  EXPECT_EQ(handshake_with(TLS1_VERSION, TLS1_1_VERSION), "");
  EXPECT_EQ(handshake_with(TLS1_2_VERSION, TLS1_2_VERSION), "TLSv1.2");
  EXPECT_EQ(handshake_with(TLS1_VERSION, TLS1_3_VERSION), "TLSv1.3");
  EXPECT_EQ(metric("onceq_tls_handshake_failures_total"), 1);
}

// onceqd with the given TLS files: its exit code and stderr.
std::pair<int, std::string> start_with(const std::string& dir, const std::string& cert,
                                       const std::string& key) {
  const std::string log = dir + "/start.log";
  const int code = run(std::string(ONCEQD_PATH) + " --listen 127.0.0.1:0 --data-dir " + dir +
                       "/data --tls-cert " + cert + " --tls-key " + key + " >/dev/null 2>" + log);
  return {code, read_file(log)};
}

TEST(tls_files, bad_certificate_or_key_exits_2_with_the_reason) {
  cert_dir certs;
  auto [code, err] = start_with(certs.dir, certs.dir + "/missing.pem", certs.key);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("cannot load the TLS certificate chain from '" + certs.dir + "/missing.pem'"),
            std::string::npos)
      << err;

  std::tie(code, err) = start_with(certs.dir, certs.cert, certs.other_key);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("does not match the certificate"), std::string::npos) << err;

  std::ofstream(certs.dir + "/junk.pem") << "not a certificate\n";
  std::tie(code, err) = start_with(certs.dir, certs.dir + "/junk.pem", certs.key);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("junk.pem"), std::string::npos) << err;
  // Nothing was created: the files are checked before the store opens.
  EXPECT_FALSE(fs::exists(certs.dir + "/data"));
}

}  // namespace
}  // namespace onceq::itest
