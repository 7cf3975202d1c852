#include "http/session.hpp"

#include "http/forwarder.hpp"

#include <openssl/ssl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <type_traits>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include "http/access_log.hpp"
#include "http/deadline_sweep.hpp"
#include "http/params.hpp"  // k_json_padding
#include "http/request_id.hpp"
#include "http/session_rules.hpp"
#include "http/spread.hpp"
#include "http/stream_pump.hpp"
#include "http/wire.hpp"
#include "shard/loop_clients.hpp"

namespace onceq::http {

namespace {

namespace beast = boost::beast;
using asio::ip::tcp;
using steady = std::chrono::steady_clock;
using tls_stream = asio::ssl::stream<tcp::socket>;
constexpr auto k_tuple = asio::as_tuple(asio::use_awaitable);
constexpr auto k_relaxed = std::memory_order_relaxed;

// What the drain after a refused request reads per read (into the read
// buffer, which the connection no longer needs).
constexpr std::size_t k_drain_read_bytes = 8u << 10;

std::chrono::milliseconds ms(millis v) {
  return std::chrono::milliseconds(v);
}

void start_plain(tcp::socket socket, router& r, std::shared_ptr<session_registry> registry,
                 std::optional<std::uint32_t> home, std::string pending, bool adopted,
                 steady::time_point settled_until = {});

// One HTTP/1.1 connection over Stream: tcp::socket (plain) or Asio's SSL
// stream over one (TLS). The hot path, as callbacks on the socket's loop,
// with no coroutine frame and no timer per operation (docs/DESIGN.md, "The
// request's path"):
//
//   read_some -> Beast's parser (put(), synchronously, on the bytes read)
//   -> router::handle(request, done) -> done: render the head into a
//   reused buffer -> one gathered write -> the next request
//
// Timeouts are deadlines the session sets on itself; a per-loop sweep
// (http/deadline_sweep.hpp) closes the sockets whose deadline has passed.
// A streamed consume is a coroutine: long-lived, rare, and not the hot
// path. What TLS adds is in `if constexpr (k_tls)`: the handshake (with
// the plain 400 for plain HTTP on the TLS port) and close_notify; a TLS
// session never migrates.
template <class Stream>
class basic_session final : public session,
                            public timed,
                            public std::enable_shared_from_this<basic_session<Stream>> {
  static constexpr bool k_tls = std::is_same_v<Stream, tls_stream>;

 public:
  // stream_args: the socket, and for TLS the SSL context.
  template <class... StreamArgs>
  basic_session(router& r, std::shared_ptr<session_registry> registry,
                std::optional<std::uint32_t> home, std::string pending, bool adopted,
                steady::time_point settled_until, StreamArgs&&... stream_args)
      : registry_(std::move(registry)),
        opts_(registry_->options()),
        router_(r),
        stream_(std::forward<StreamArgs>(stream_args)...),
        home_(home),
        adopted_(adopted),
        settled_until_(settled_until) {
    if (!pending.empty()) {
      auto room = buffer_.prepare(pending.size());
      asio::buffer_copy(room, asio::buffer(pending));
      buffer_.commit(pending.size());
    }
  }

  ~basic_session() override {
    if (sweep_ != nullptr) sweep_->remove(this);
    if (registered_) registry_->remove(id_);
    if (clients_ != nullptr) {
      answered();
      clients_->disconnected(idle_since_);
    }
  }

  void start() {
    id_ = registry_->add(this->weak_from_this());
    registered_ = true;
    auto& loop = asio::query(socket().get_executor(), asio::execution::context);
    sweep_ = &asio::use_service<deadline_sweep>(loop);
    clients_ = &loop_clients::of(loop);
    idle_since_ = clients_->connected();
    sweep_->add(this, sweep_period());
    if constexpr (k_tls) {
      detect_tls();
    } else {
      next_request(!adopted_);
    }
  }

  void shutdown() override {
    asio::post(socket().get_executor(), [self = this->shared_from_this()] {
      self->closing_ = true;
      if (self->phase_ == phase::handshake || self->phase_ == phase::idle ||
          self->phase_ == phase::header) {
        self->close_now();
      }
    });
  }

  std::shared_ptr<timed> hold() override { return this->weak_from_this().lock(); }

  // Closes the connection, on its own loop, if its deadline has passed by then.
  void expire_if_due(std::int64_t) override {
    asio::post(socket().get_executor(), [self = this->shared_from_this()] {
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
  enum class phase { handshake, idle, header, body, handling, writing, streaming, closing };

  // The TCP layer: timeouts, shutdown, close and the drain apply here.
  tcp::socket& socket() {
    if constexpr (k_tls) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  std::chrono::milliseconds sweep_period() const {
    millis shortest =
        std::min({opts_.header_timeout_ms, opts_.idle_timeout_ms, opts_.write_timeout_ms});
    if constexpr (k_tls) shortest = std::min(shortest, opts_.tls_handshake_timeout_ms);
    return ms(std::clamp<millis>(shortest / 10, 5, 250));
  }

  void enter(phase p, millis timeout_ms) {
    phase_ = p;
    set_deadline_after(ms(timeout_ms));
  }
  void enter_untimed(phase p) {
    phase_ = p;
    clear_deadline();
  }

  void close_now() {
    beast::error_code ec;
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
  }

  // TLS: one deadline for the whole handshake, from accept. Plain HTTP on
  // the TLS port gets a plain 400: a readable answer beats a TLS alert the
  // client cannot parse.
  void detect_tls() {
    enter(phase::handshake, opts_.tls_handshake_timeout_ms);
    beast::async_detect_ssl(socket(), buffer_,
                            [self = this->shared_from_this()](beast::error_code ec, bool is_tls) {
                              self->on_detected(ec, is_tls);
                            });
  }

  void on_detected(beast::error_code ec, bool is_tls) {
    auto& failures = registry_->stats().tls_handshake_failures;
    if (ec || closing_) {
      failures.fetch_add(1, k_relaxed);
      return finish(false);
    }
    if (!is_tls) {
      failures.fetch_add(1, k_relaxed);
      response res = router_.error_response(
          make_error(errc::invalid_argument,
                     "this port speaks HTTPS (TLS); the request was plain HTTP"),
          11, new_request_id());
      res.keep_alive(false);
      return write<true>(std::move(res), [](basic_session& s, bool) { s.finish(true); });
    }
    stream_.async_handshake(
        asio::ssl::stream_base::server, buffer_.data(),
        [self = this->shared_from_this()](beast::error_code hec, std::size_t used) {
          if (hec || self->closing_) {
            self->registry_->stats().tls_handshake_failures.fetch_add(1, k_relaxed);
            return self->finish(false);
          }
          self->buffer_.consume(used);
          self->secured_ = true;
          self->next_request(true);
        });
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
      // byte, then header_timeout_ms for the rest of its header block, so
      // that a client trickling a header (or sending half of one and
      // stalling) cannot hold the connection for the idle timeout.
      enter(phase::idle, opts_.idle_timeout_ms);
    }
    read_more();
  }

  void read_more() {
    stream_.async_read_some(buffer_.prepare(beast::read_size(buffer_, k_max_read_bytes)),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->on_read(ec, n);
                            });
  }

  void on_read(beast::error_code ec, std::size_t n) {
    if (ec) return finish(false);  // the client left, a timeout, shutdown: just close
    buffer_.commit(n);
    if (phase_ == phase::idle) enter(phase::header, opts_.header_timeout_ms);
    if (phase_ == phase::body) enter(phase::body, opts_.idle_timeout_ms);  // per read of a body
    parse();
  }

  // Feeds the buffered bytes to the parser; reads more, answers 100
  // Continue, or hands the complete request on. Pipelined requests stay in
  // the buffer for the next one.
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
    if (auto len = parser_->content_length()) {
      // Room for the body (up to one 64 KiB read) in the read buffer:
      // sized for the header, it would take a 40 KB body in ~80 reads.
      if (*len > buffer_.capacity() - buffer_.size()) {
        buffer_.reserve(std::min<std::uint64_t>(*len, k_max_read_bytes) + buffer_.size());
      }
      // simdjson's padding past the body's end in its string now (Beast
      // then reserves only the Content-Length, which does not shrink it),
      // so read_params parses it in place instead of copying it. A chunked
      // body, of unknown length, is copied there instead.
      if (*len <= opts_.max_body_bytes) {
        parser_->get().body().reserve(static_cast<std::size_t>(*len) + k_json_padding);
      }
    }
    const auto& head = parser_->get();
    if (head.version() < 11 || !beast::iequals(head[bhttp::field::expect], "100-continue")) {
      return false;
    }
    enter(phase::writing, opts_.write_timeout_ms);
    asio::async_write(stream_, asio::buffer(k_continue.data(), k_continue.size()),
                      [self = this->shared_from_this()](beast::error_code wec, std::size_t) {
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
    write(std::move(res), [](basic_session& s, bool) { s.finish(true); });
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
    awaiting_ = true;
    clients_->request_sent(idle_since_);
    // The cluster's internal routes are taken only from the cluster's own
    // hosts: they learn the peer's address here (whatever a client sent in
    // the header is replaced). Other requests pay nothing for it.
    if (req.target().starts_with(k_internal_prefix)) {
      boost::system::error_code ec;
      const auto peer = socket().remote_endpoint(ec);
      req.set(k_peer_header, ec ? std::string() : peer.address().to_string());
    }
    router_.handle(std::move(req), socket().get_executor(),
                   [self = this->shared_from_this()](reply r) { self->on_reply(std::move(r)); });
  }

  // The answer to the request dispatched came (or never will).
  void answered() {
    if (!awaiting_) return;
    awaiting_ = false;
    idle_since_ = clients_->answered();
  }

  void on_reply(reply r) {
    answered();
    if (opts_.access_log) {
      log_access({method_, target_, r.res.result_int(), steady::now() - started_,
                  r.stream ? -1 : static_cast<std::int64_t>(r.res.body().size()),
                  r.res[k_request_id_header]});
    }
    if (r.stream) {
      enter_untimed(phase::streaming);
      asio::co_spawn(
          socket().get_executor(),
          [self = this->shared_from_this(), r = std::move(r)]() mutable -> asio::awaitable<void> {
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
    write(std::move(r.res), [keep, shard](basic_session& s, bool ok) {
      if (!ok || !keep) return s.finish(false);
      if constexpr (!k_tls) {
        if (s.note_shard(shard) && s.migrate(s.foreign_)) return;
        if (auto to = s.spread_target(shard); to && s.migrate(*to, steady::now() + k_settle)) {
          s.registry_->stats().spreads.fetch_add(1, k_relaxed);
          return;
        }
      } else {
        (void)shard;  // a TLS session stays on its loop
      }
      s.next_request(false);
    });
  }

  // One gathered write of the head (rendered into head_, reused) and the
  // body (http/wire.hpp); then then_(session, written). Raw: on the TCP
  // socket even under TLS (the plain 400 before a handshake).
  template <bool Raw = false, class Then>
  void write(response res, Then then_) {
    res_ = std::move(res);
    render_head(res_, head_);
    enter(phase::writing, opts_.write_timeout_ms);
    auto done = [self = this->shared_from_this(), then_](beast::error_code ec, std::size_t) {
      self->res_.body().clear();
      then_(*self, !ec);
    };
    // Under TLS, Asio's SSL stream copies the front of a gathered write
    // into one record of up to 8 KiB (its linearisation), so a small
    // answer is still one SSL_write and one send.
    const std::array<asio::const_buffer, 2> bytes{asio::buffer(head_), asio::buffer(res_.body())};
    if constexpr (Raw) {
      asio::async_write(socket(), bytes, std::move(done));
    } else {
      asio::async_write(stream_, bytes, std::move(done));
    }
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
    if (foreign_streak_ < k_migrate_after) return false;
    if (registry_->has_loads()) {
      const auto now = steady::now();
      // Spread here, or stayed off that loop, a moment ago: stay put.
      if (now < settled_until_) return false;
      // That loop is busy and this one has room: stay, and let the
      // commands cross (http/spread.hpp).
      if (stays_off(registry_->reading(*shard, now), registry_->reading(*home_, now),
                    registry_->idle_cores(now))) {
        foreign_streak_ = 0;
        settled_until_ = now + k_settle;
        return false;
      }
    }
    return true;
  }

  // After an answer its own loop served: the loop to spread to when this
  // one is saturated and another has room (http/spread.hpp), one session
  // per loop_load::k_window.
  std::optional<std::uint32_t> spread_target(std::optional<std::uint32_t> shard) {
    if (!opts_.migrate_connections || !home_ || !shard || *shard != *home_ ||
        !registry_->has_loads()) {
      return std::nullopt;
    }
    const auto now = steady::now();
    if (registry_->reading(*home_, now).busy < k_saturated) return std::nullopt;
    static thread_local std::vector<loop_reading> loops;
    registry_->readings(now, loops);
    auto to = spread_to(*home_, loops, registry_->idle_cores(now));
    if (!to || registry_->loop(*to) == nullptr || !registry_->take_spread_turn(*home_, now)) {
      return std::nullopt;
    }
    return to;
  }

  // Hands the socket and the bytes read so far to the loop of shard
  // target, where the session does not move again before settled_until.
  // False (the session stays) if the socket cannot be released.
  bool migrate(std::uint32_t target, steady::time_point settled_until = {}) {
    asio::io_context* loop = registry_->loop(target);
    beast::error_code ec;
    const auto protocol = socket().local_endpoint(ec).protocol();
    if (ec || loop == nullptr) return false;
    // Nothing is in flight (between requests): the socket leaves this
    // loop's reactor with no operation.
    const int fd = socket().release(ec);
    if (ec) return false;
    enter_untimed(phase::closing);
    std::string pending = beast::buffers_to_string(buffer_.data());
    registry_->stats().migrations.fetch_add(1, k_relaxed);
    asio::post(*loop, [loop, fd, protocol, target, pending = std::move(pending), &rt = router_,
                       registry = registry_, settled_until]() mutable {
      tcp::socket adopted(*loop);
      beast::error_code aec;
      adopted.assign(protocol, fd, aec);
      if (aec) {
        ::close(fd);
        return;
      }
      start_plain(std::move(adopted), rt, std::move(registry), target, std::move(pending), true,
                  settled_until);
    });
    return true;
  }

  // The end of the connection. TLS first sends close_notify, so that the
  // client can tell the end of a response that ends at the close (HTTP/1.0
  // streams) from a cut; one-way: it does not wait for the client's own
  // (RFC 8446 6.1 allows it), which Asio's shutdown would otherwise do.
  void finish(bool drain) {
    if (phase_ == phase::closing) return;
    enter_untimed(phase::closing);
    if constexpr (k_tls) {
      if (secured_ && !peer_gone_ && socket().is_open()) {
        SSL_set_shutdown(stream_.native_handle(), SSL_RECEIVED_SHUTDOWN);
        set_deadline_after(std::min(ms(opts_.write_timeout_ms), k_drain_time));
        stream_.async_shutdown([self = this->shared_from_this(), drain](beast::error_code) {
          self->close_tcp(drain);  // closing anyway
        });
        return;
      }
    }
    close_tcp(drain);
  }

  // Shuts down our side; after a refused request (drain), reads and
  // discards the rest of it, raw bytes also under TLS, for a while first.
  void close_tcp(bool drain) {
    beast::error_code ec;
    socket().shutdown(tcp::socket::shutdown_send, ec);
    if (!drain || !socket().is_open()) {
      clear_deadline();
      socket().close(ec);
      return;
    }
    set_deadline_after(k_drain_time);
    buffer_.clear();
    drain_more(0);
  }

  void drain_more(std::size_t drained) {
    socket().async_read_some(
        buffer_.prepare(k_drain_read_bytes),
        [self = this->shared_from_this(), drained](beast::error_code ec, std::size_t n) {
          if (!ec && drained + n < k_drain_bytes) return self->drain_more(drained + n);
          self->clear_deadline();
          beast::error_code cec;
          self->socket().close(cec);
        });
  }

  asio::awaitable<void> send_stream(reply r);
  asio::awaitable<void> watch_peer();

  std::shared_ptr<session_registry> registry_;
  const http_options& opts_;  // owned by registry_
  router& router_;
  Stream stream_;
  deadline_sweep* sweep_ = nullptr;
  // This loop's count of connections and of those waiting for an answer
  // (shard/loop_clients.hpp): in from start() to the end, waiting from
  // dispatch() to on_reply(), idle in between since the generation
  // idle_since_.
  loop_clients* clients_ = nullptr;
  bool awaiting_ = false;
  std::uint64_t idle_since_ = 0;
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
  bool secured_ = false;    // TLS: the handshake finished
  std::optional<std::uint32_t> home_;
  bool adopted_ = false;
  std::uint32_t foreign_ = 0;
  int foreign_streak_ = 0;
  // Before this the session does not migrate (it spread, or stayed off a
  // busy loop, a moment ago: k_settle).
  steady::time_point settled_until_;
  // --access-log: what the line needs, taken before the router owns the request.
  steady::time_point started_;
  std::string method_, target_;
};

template <class Stream>
asio::awaitable<void> basic_session<Stream>::send_stream(reply r) {
  response head = std::move(r.res);
  head.keep_alive(false);  // the connection ends with the stream
  // HTTP/1.0 has no chunked encoding: the body then simply ends at the close.
  const bool chunked = head.version() >= 11;
  head.chunked(chunked);
  std::string head_bytes;
  render_head(head, head_bytes);
  enter(phase::streaming, opts_.write_timeout_ms);
  auto [ec, n] = co_await asio::async_write(stream_, asio::buffer(head_bytes), k_tuple);
  if (ec) co_return;
  enter_untimed(phase::streaming);

  asio::co_spawn(
      socket().get_executor(),
      [self = this->shared_from_this()]() -> asio::awaitable<void> { co_await self->watch_peer(); },
      asio::detached);

  auto op = pump_stream(
      stream_, *r.stream, chunked, peer_gone_, [this] { return closing_ || registry_->stopping(); },
      [this](bool on) {
        if (on) {
          enter(phase::streaming, opts_.write_timeout_ms);
        } else {
          enter_untimed(phase::streaming);
        }
      });
  co_await std::move(op);
}

template <class Stream>
asio::awaitable<void> basic_session<Stream>::watch_peer() {
  // A streaming client sends nothing more; a read that ends means it left.
  // Under TLS through the TLS layer (records, close_notify), concurrently
  // with the stream's writes, which Asio's SSL stream allows (one read and
  // one write at a time).
  std::array<char, 1024> sink;
  while (true) {
    auto [ec, n] = co_await stream_.async_read_some(asio::buffer(sink), k_tuple);
    if (ec) break;
  }
  peer_gone_ = true;
}

void start_plain(tcp::socket socket, router& r, std::shared_ptr<session_registry> registry,
                 std::optional<std::uint32_t> home, std::string pending, bool adopted,
                 steady::time_point settled_until) {
  auto s = std::make_shared<basic_session<tcp::socket>>(
      r, std::move(registry), home, std::move(pending), adopted, settled_until, std::move(socket));
  s->start();
}

}  // namespace

void start_session(tcp::socket socket, router& r, std::shared_ptr<session_registry> registry,
                   std::optional<std::uint32_t> home, std::string pending, bool adopted) {
  if (asio::ssl::context* tls = registry->tls()) {
    auto s = std::make_shared<basic_session<tls_stream>>(r, std::move(registry), home,
                                                         std::string{}, false, steady::time_point{},
                                                         std::move(socket), *tls);
    s->start();
  } else {
    start_plain(std::move(socket), r, std::move(registry), home, std::move(pending), adopted);
  }
}

}  // namespace onceq::http
