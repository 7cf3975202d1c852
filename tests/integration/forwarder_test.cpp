// http::forwarder in process, against a fake peer node on 127.0.0.1: the
// request it forwards is marked with X-Onceq-Forwarded (this node's id), so
// that the leader answers 503 rather than forwarding it again (the
// receiving side is cluster_edge_test's), keeps its method, target, body
// and request id; and a peer that does not answer gets the request once,
// never a second send whose first may have been applied.

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "http/cluster_view.hpp"
#include "http/forwarder.hpp"

namespace onceq::itest {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// Two nodes: this one ("n2") and the peer ("n1") on a local port.
class two_nodes final : public http::cluster_view {
 public:
  explicit two_nodes(std::uint16_t peer_port) : peer_port_(peer_port) {}
  const std::string& self() const override { return self_; }
  std::string node_at(unsigned n) const override { return n == 1 ? "n1" : n == 2 ? "n2" : ""; }
  std::optional<http::node_address> http_of(std::string_view node) const override {
    if (node == "n1") return http::node_address{"127.0.0.1", peer_port_};
    return std::nullopt;
  }
  nlohmann::json status() const override { return nlohmann::json::object(); }
  void render_metrics(std::string&) const override {}

 private:
  std::string self_ = "n2";
  std::uint16_t peer_port_;
};

// The peer: accepts connections on its own thread and records every
// request; answers each with 200, X-Onceq-Node: n1 and Connection: close
// unless `silent`, in which case it closes the connection without a word.
class fake_peer {
 public:
  explicit fake_peer(bool silent)
      : silent_(silent), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] { serve(); });
  }
  ~fake_peer() {
    stop_ = true;
    beast::error_code ec;
    // Wakes accept() with a connection of our own.
    tcp::socket poke(io_);
    poke.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::vector<http::request> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void serve() {
    while (!stop_) {
      beast::error_code ec;
      tcp::socket s(io_);
      acceptor_.accept(s, ec);
      if (ec || stop_) return;
      beast::flat_buffer buf;
      for (;;) {
        http::request req;
        bhttp::read(s, buf, req, ec);
        if (ec) break;
        {
          std::lock_guard lock(mu_);
          seen_.push_back(req);
        }
        if (silent_) break;
        http::response res{bhttp::status::ok, req.version()};
        res.set("X-Onceq-Node", "n1");
        res.body() = R"({"status":"produced"})";
        res.keep_alive(false);  // one request per connection: none stays pooled
        res.prepare_payload();
        bhttp::write(s, res, ec);
        break;
      }
    }
  }

  bool silent_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<http::request> seen_;
  std::thread thread_;
};

http::request produce_request() {
  http::request req{bhttp::verb::post, "/v1/produce?x=1", 11};
  req.set(bhttp::field::content_type, "application/json");
  req.body() = R"({"topic":"t","value":"v"})";
  req.prepare_payload();
  return req;
}

// forward() once, driven on an io_context of this thread.
result<http::response> forward_once(http::forwarder& f, const http::request& req) {
  asio::io_context io;
  std::optional<result<http::response>> got;
  f.forward(req, "rid-7", "n1", 2'000, io.get_executor(),
            [&](result<http::response> r) { got = std::move(r); });
  io.run_for(10s);
  if (!got) return make_error(errc::internal, "forward() never answered");
  return std::move(*got);
}

TEST(forwarder, marks_the_request_as_forwarded_by_this_node_and_relays_the_answer) {
  fake_peer peer(false);
  two_nodes cluster(peer.port());
  http::forwarder f(cluster);
  auto r = forward_once(f, produce_request());
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->result_int(), 200u);
  EXPECT_EQ((*r)["X-Onceq-Node"], "n1");
  EXPECT_EQ(r->body(), R"({"status":"produced"})");

  const auto seen = peer.seen();
  ASSERT_EQ(seen.size(), 1u);
  const http::request& got = seen.front();
  EXPECT_EQ(got[http::k_forwarded_header], "n2") << "the mark that stops a second hop";
  EXPECT_EQ(got[http::k_request_id_header], "rid-7");
  EXPECT_EQ(got.method(), bhttp::verb::post);
  EXPECT_EQ(got.target(), "/v1/produce?x=1");
  EXPECT_EQ(got.body(), R"({"topic":"t","value":"v"})");
}

TEST(forwarder, a_peer_that_does_not_answer_gets_the_request_once_and_the_caller_a_503) {
  fake_peer peer(true);
  two_nodes cluster(peer.port());
  http::forwarder f(cluster);
  auto r = forward_once(f, produce_request());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::unavailable) << r.err().message;
  EXPECT_NE(r.err().message.find("n1"), std::string::npos) << r.err().message;
  EXPECT_EQ(peer.seen().size(), 1u) << "sent again after no answer";
}

TEST(forwarder, a_node_not_in_the_cluster_file_is_unavailable_at_once) {
  two_nodes cluster(1);
  http::forwarder f(cluster);
  asio::io_context io;
  std::optional<result<http::response>> got;
  f.forward(produce_request(), "rid", "n9", 1'000, io.get_executor(),
            [&](result<http::response> r) { got = std::move(r); });
  ASSERT_TRUE(got.has_value()) << "answered without running the loop";
  ASSERT_FALSE(got->ok());
  EXPECT_EQ(got->err().code, errc::unavailable);
}

}  // namespace
}  // namespace onceq::itest
