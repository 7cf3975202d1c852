#include "http/plain_session.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include "http/access_log.hpp"
#include "http/deadline_sweep.hpp"
#include "http/params.hpp"  // k_json_padding
#include "http/request_id.hpp"
#include "http/session.hpp"
#include "http/session_rules.hpp"
#include "http/stream_pump.hpp"
#include "http/wire.hpp"
#include "base/log.hpp"

namespace onceq::http {

namespace {

namespace beast = boost::beast;
using asio::ip::tcp;
using steady = std::chrono::steady_clock;
constexpr auto k_tuple = asio::as_tuple(asio::use_awaitable);
constexpr auto k_relaxed = std::memory_order_relaxed;

class plain_session final : public session,
                            public timed,
                            public std::enable_shared_from_this<plain_session> {
 public:
  plain_session(tcp::socket socket, router& r, std::shared_ptr<session_registry> registry,
                std::optional<std::uint32_t> home, std::string pending, bool adopted)
      : registry_(std::move(registry)),
        opts_(registry_->options()),
        router_(r),
        sock_(std::move(socket)),
        home_(home),
        adopted_(adopted) {
    if (!pending.empty()) {
      auto room = buffer_.prepare(pending.size());
      asio::buffer_copy(room, asio::buffer(pending));
      buffer_.commit(pending.size());
    }
  }

  ~plain_session() override {
    if (sweep_ != nullptr) sweep_->remove(this);
    if (registered_) registry_->remove(id_);
  }

  void start() {
    id_ = registry_->add(weak_from_this());
    registered_ = true;
    sweep_ = &asio::use_service<deadline_sweep>(
        asio::query(sock_.get_executor(), asio::execution::context));
    sweep_->add(this, sweep_period());
    next_request(!adopted_);
  }

  void shutdown() override {
    asio::post(sock_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      if (self->phase_ == phase::idle || self->phase_ == phase::header) self->close_now();
    });
  }

  std::shared_ptr<timed> hold() override { return weak_from_this().lock(); }

  // Closes the connection, on its own loop, if its deadline has passed by then.
  void expire_if_due(std::int64_t) override {
    asio::post(sock_.get_executor(), [self = shared_from_this()] {
      if (!self->due(steady_now_ns())) return;  // it moved on meanwhile
      if (self->phase_ == phase::header) {
        self->registry_->stats().header_timeouts.fetch_add(1, k_relaxed);
      }
      self->clear_deadline();
      self->close_now();
    });
  }

 private:
  // What the connection waits for; the deadline belongs to it.
  enum class phase { idle, header, body, handling, writing, streaming, closing };

  std::chrono::milliseconds sweep_period() const {
    const millis shortest =
        std::min({opts_.header_timeout_ms, opts_.idle_timeout_ms, opts_.write_timeout_ms});
    return std::chrono::milliseconds(std::clamp<millis>(shortest / 10, 5, 250));
  }

  void enter(phase p, millis timeout_ms) {
    phase_ = p;
    set_deadline_after(std::chrono::milliseconds(timeout_ms));
  }
  void enter_untimed(phase p) {
    phase_ = p;
    clear_deadline();
  }

  void close_now() {
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
  }

  // Starts reading the next request (first: the connection's first, whose
  // header has header_timeout_ms from the start).
  void next_request(bool first) {
    if (closing_ || registry_->stopping()) return finish(false);
    parser_.emplace();
    parser_->body_limit(opts_.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(opts_.max_header_bytes));
    header_seen_ = false;
    if (first || buffer_.size() > 0) {
      enter(phase::header, opts_.header_timeout_ms);
      if (buffer_.size() > 0) return parse();
    } else {
      // Between requests: idle_timeout_ms to the next request's first
      // byte, then header_timeout_ms for the rest of its header block.
      enter(phase::idle, opts_.idle_timeout_ms);
    }
    read_more();
  }

  void read_more() {
    sock_.async_read_some(
        buffer_.prepare(beast::read_size(buffer_, k_max_read_bytes)),
        [self = shared_from_this()](beast::error_code ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(beast::error_code ec, std::size_t n) {
    if (ec) return finish(false);  // the client left, a timeout, shutdown: just close
    buffer_.commit(n);
    if (phase_ == phase::idle) enter(phase::header, opts_.header_timeout_ms);
    if (phase_ == phase::body) enter(phase::body, opts_.idle_timeout_ms);  // per read of a body
    parse();
  }

  // Feeds the buffered bytes to the parser; reads more, answers 100
  // Continue, or hands the complete request on.
  void parse() {
    beast::error_code ec;
    while (buffer_.size() > 0 && !parser_->is_done()) {
      const std::size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec) return refuse(ec);
      if (parser_->is_header_done() && !header_seen_) {
        header_seen_ = true;
        if (on_header()) return;  // writing 100 Continue; parse() goes on after
      }
    }
    if (parser_->is_done()) return dispatch();
    read_more();
  }

  // The header is complete. True when a 100 Continue write was started.
  bool on_header() {
    if (parser_->is_done()) return false;
    enter(phase::body, opts_.idle_timeout_ms);
    // Room for the body (up to one 64 KiB read) in the read buffer, and
    // simdjson's padding past its end in the body's string now, so that
    // read_params parses it in place (session.cpp says why).
    if (auto len = parser_->content_length()) {
      if (*len > buffer_.capacity() - buffer_.size()) {
        buffer_.reserve(std::min<std::uint64_t>(*len, k_max_read_bytes) + buffer_.size());
      }
      if (*len <= opts_.max_body_bytes) {
        parser_->get().body().reserve(static_cast<std::size_t>(*len) + k_json_padding);
      }
    }
    const auto& head = parser_->get();
    if (head.version() < 11 || !beast::iequals(head[bhttp::field::expect], "100-continue")) {
      return false;
    }
    enter(phase::writing, opts_.write_timeout_ms);
    asio::async_write(sock_, asio::buffer(k_continue.data(), k_continue.size()),
                      [self = shared_from_this()](beast::error_code wec, std::size_t) {
                        if (wec) return self->finish(false);
                        self->enter(phase::body, self->opts_.idle_timeout_ms);
                        self->parse();
                      });
    return true;
  }

  // A request the parser refused: 413, 400 with the reason, or (the
  // client left mid-request) nothing.
  void refuse(const beast::error_code& ec) {
    const std::optional<error> why = refusal_of(ec, opts_);
    if (!why) return finish(false);
    // The header may be complete (413): echo the client's request id.
    response res =
        router_.error_response(*why, 11, request_id_for(parser_->get()[k_request_id_header]));
    res.keep_alive(false);
    write(std::move(res), [](plain_session& s, bool) { s.finish(true); });
  }

  void dispatch() {
    request req = parser_->release();
    parser_.reset();
    keep_alive_ = req.keep_alive();
    started_ = steady::now();
    if (opts_.access_log) {
      method_ = std::string(req.method_string());
      target_ = std::string(req.target());
    }
    enter_untimed(phase::handling);
    router_.handle(std::move(req), sock_.get_executor(),
                   [self = shared_from_this()](reply r) { self->on_reply(std::move(r)); });
  }

  void on_reply(reply r) {
    if (opts_.access_log) {
      log_access({method_, target_, r.res.result_int(), steady::now() - started_,
                  r.stream ? -1 : static_cast<std::int64_t>(r.res.body().size()),
                  r.res[k_request_id_header]});
    }
    if (r.stream) {
      enter_untimed(phase::streaming);
      auto self = shared_from_this();
      asio::co_spawn(
          sock_.get_executor(),
          [self, r = std::move(r)]() mutable -> asio::awaitable<void> {
            auto op = self->send_stream(std::move(r));
            co_await std::move(op);
            self->finish(false);
          },
          asio::detached);
      return;
    }
    const bool keep = keep_alive_ && !closing_ && !registry_->stopping();
    r.res.keep_alive(keep);
    const std::optional<std::uint32_t> shard = r.shard;
    write(std::move(r.res), [keep, shard](plain_session& s, bool ok) {
      if (!ok || !keep) return s.finish(false);
      if (s.note_shard(shard) && s.migrate(s.foreign_)) return;
      s.next_request(false);
    });
  }

  // One gathered write of the head (rendered into head_, reused) and the
  // body (http/wire.hpp); then then_(session, written).
  template <class Then>
  void write(response res, Then then_) {
    res_ = std::move(res);
    render_head(res_, head_);
    enter(phase::writing, opts_.write_timeout_ms);
    const std::array<asio::const_buffer, 2> bytes{asio::buffer(head_), asio::buffer(res_.body())};
    asio::async_write(sock_, bytes,
                      [self = shared_from_this(), then_](beast::error_code ec, std::size_t) {
                        self->res_.body().clear();
                        then_(*self, !ec);
                      });
  }

  // After an answer: counts requests served by another shard; true when
  // the session should move there now (see start_session).
  bool note_shard(std::optional<std::uint32_t> shard) {
    if (!opts_.migrate_connections || !home_ || !shard || *shard == *home_ ||
        registry_->loop(*shard) == nullptr) {
      foreign_streak_ = 0;
      return false;
    }
    if (foreign_streak_ > 0 && foreign_ == *shard) {
      ++foreign_streak_;
    } else {
      foreign_ = *shard;
      foreign_streak_ = 1;
    }
    return foreign_streak_ >= k_migrate_after;
  }

  // Hands the socket and the bytes read so far to the loop of shard
  // target. False (the session stays) if the socket cannot be released.
  bool migrate(std::uint32_t target) {
    asio::io_context* loop = registry_->loop(target);
    beast::error_code ec;
    const auto protocol = sock_.local_endpoint(ec).protocol();
    if (ec || loop == nullptr) return false;
    // Nothing is in flight (between requests): the socket leaves this
    // loop's reactor with no operation.
    const int fd = sock_.release(ec);
    if (ec) return false;
    enter_untimed(phase::closing);
    std::string pending = beast::buffers_to_string(buffer_.data());
    registry_->stats().migrations.fetch_add(1, k_relaxed);
    asio::post(*loop, [loop, fd, protocol, target, pending = std::move(pending), &rt = router_,
                       registry = registry_]() mutable {
      tcp::socket adopted(*loop);
      beast::error_code aec;
      adopted.assign(protocol, fd, aec);
      if (aec) {
        ::close(fd);
        return;
      }
      start_session(std::move(adopted), rt, std::move(registry), target, std::move(pending), true);
    });
    return true;
  }

  // The end of the connection: shut down our side; after a refused
  // request (drain), read and discard the rest of it for a while first.
  void finish(bool drain) {
    if (phase_ == phase::closing) return;
    enter_untimed(phase::closing);
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (!drain || !sock_.is_open()) {
      sock_.close(ec);
      return;
    }
    set_deadline_after(k_drain_time);
    asio::co_spawn(
        sock_.get_executor(),
        [self = shared_from_this()]() -> asio::awaitable<void> {
          std::array<char, 8192> sink;
          std::size_t drained = 0;
          while (drained < k_drain_bytes) {
            auto [rec, n] = co_await self->sock_.async_read_some(asio::buffer(sink), k_tuple);
            if (rec) break;
            drained += n;
          }
          beast::error_code cec;
          self->sock_.close(cec);
        },
        asio::detached);
  }

  asio::awaitable<void> send_stream(reply r);
  asio::awaitable<void> watch_peer();

  std::shared_ptr<session_registry> registry_;
  const http_options& opts_;  // owned by registry_
  router& router_;
  tcp::socket sock_;
  deadline_sweep* sweep_ = nullptr;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  response res_;      // the answer being written
  std::string head_;  // its head, rendered by write()
  std::uint64_t id_ = 0;
  bool registered_ = false;
  phase phase_ = phase::idle;
  bool header_seen_ = false;
  bool keep_alive_ = false;
  bool closing_ = false;    // close after the current answer
  bool peer_gone_ = false;  // stream mode: the client closed its side
  std::optional<std::uint32_t> home_;
  bool adopted_ = false;
  std::uint32_t foreign_ = 0;
  int foreign_streak_ = 0;
  // --access-log: what the line needs, taken before the router owns the request.
  steady::time_point started_;
  std::string method_, target_;
};

asio::awaitable<void> plain_session::send_stream(reply r) {
  response head = std::move(r.res);
  head.keep_alive(false);  // the connection ends with the stream
  // HTTP/1.0 has no chunked encoding: the body then simply ends at the close.
  const bool chunked = head.version() >= 11;
  head.chunked(chunked);
  std::string head_bytes;
  render_head(head, head_bytes);
  enter(phase::streaming, opts_.write_timeout_ms);
  auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(head_bytes), k_tuple);
  if (ec) co_return;
  enter_untimed(phase::streaming);

  asio::co_spawn(
      sock_.get_executor(),
      [self = shared_from_this()]() -> asio::awaitable<void> { co_await self->watch_peer(); },
      asio::detached);

  auto op = pump_stream(
      sock_, *r.stream, chunked, peer_gone_, [this] { return closing_ || registry_->stopping(); },
      [this](bool on) {
        if (on) {
          enter(phase::streaming, opts_.write_timeout_ms);
        } else {
          enter_untimed(phase::streaming);
        }
      });
  co_await std::move(op);
}

asio::awaitable<void> plain_session::watch_peer() {
  // A streaming client sends nothing more; a read that ends means it left.
  std::array<char, 1024> sink;
  while (true) {
    auto [ec, n] = co_await sock_.async_read_some(asio::buffer(sink), k_tuple);
    if (ec) break;
  }
  peer_gone_ = true;
}

}  // namespace

void start_plain_session(tcp::socket socket, router& r, std::shared_ptr<session_registry> registry,
                         std::optional<std::uint32_t> home, std::string pending, bool adopted) {
  auto s = std::make_shared<plain_session>(std::move(socket), r, std::move(registry), home,
                                           std::move(pending), adopted);
  s->start();
}

}  // namespace onceq::http
