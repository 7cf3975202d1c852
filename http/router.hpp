#pragma once

// The route table and its handlers. A handler only translates: request
// parameters -> broker command (codec), command -> the topic's shard (run
// at once when the request is on that shard's loop, else crossing once to
// it), result -> JSON / NDJSON / error. Routes without a topic (the topic
// list, /metrics, healthz) gather from every shard.
//
// Unknown path -> 404 NOT_FOUND; known path, other method -> 405 with
// Allow. Every answer carries X-Request-Id (the client's, or a new one).
// Requests that need a shard get 429 RESOURCE_EXHAUSTED (Retry-After)
// while the shards' queue_depth() is over http_options::max_queue_depth; the
// Retry-After is the time the queued commands need at the drain rate seen
// in the last seconds (drain_meter.hpp), http_options::retry_after_ms
// without a recent rate.
//
// Auth (when an authenticator is given): each route names the scope it
// needs in the route table; the bearer token and scope are checked before
// the backpressure check and before the body is read (401/403), the topic
// after the parameters are parsed and before anything reaches the core
// (403). A request refused changes nothing.
//
// Thread safety: handle() may run concurrently on any number of
// threads; the router holds no per-request state (each request's own is
// in a router::pending on the heap while its command runs).

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "http/auth.hpp"
#include "http/cluster_view.hpp"
#include "http/codec.hpp"
#include "http/drain_meter.hpp"
#include "http/message.hpp"
#include "http/metrics.hpp"
#include "http/options.hpp"
#include "shard/outbox_relay.hpp"
#include "shard/shard_set.hpp"

namespace onceq::http {

namespace asio = boost::asio;

struct consume_request;  // http/codec/consume.hpp

// The rest of a streamed GET/POST /v1/consume (no max_messages): the
// session sends the head of reply::res (chunked), then the initial lines,
// then whatever each next() returns, until the client leaves, the server
// stops or next() fails.
//
// Not thread-safe: one session drives it, on its strand.
class consume_stream {
 public:
  consume_stream(shard& s, consume_cmd cmd, millis poll_ms, std::vector<delivery> initial);

  // Lines of the deliveries that the first poll got before the head was sent.
  std::string take_initial() { return std::move(initial_); }

  // Waits up to poll_ms for messages and answers their NDJSON lines ("" if
  // none came). An error (e.g. the shard stopped) ends the stream.
  asio::awaitable<result<std::string>> next();

  // The client is gone before it got the lines of the last batch: shortens
  // those leases to 1 ms, so they expire (as they would have, later) and go
  // to live consumers now. Fire-and-forget.
  void abandon_last();

  const consume_cmd& cmd() const noexcept { return cmd_; }

 private:
  struct held {
    std::uint32_t partition;
    std::uint64_t offset;
    std::int64_t attempts;
  };
  void remember(const std::vector<delivery>& ds);

  shard& shard_;
  consume_cmd cmd_;
  millis poll_ms_;
  std::string initial_;
  std::vector<held> last_;  // deliveries of the last batch handed out
};

// A handler's answer: a complete response, or the head of a stream.
struct reply {
  response res;
  std::shared_ptr<consume_stream> stream;  // set: res is the head of a chunked stream
  // The shard whose loop ran the command, for a route with a topic: a
  // session whose requests keep going to another shard moves there.
  std::optional<std::uint32_t> shard;
  // A cluster's node that must answer instead (the shard's leader): the
  // router forwards the request there and relays its answer.
  std::string forward_to{};
};

class router {
 public:
  // auth: null = every route is open (no --auth-file); else it must
  // outlive the router.
  // cluster: the node's cluster (outlives the router), or null for a single
  // node; with one, every answer carries X-Onceq-Node and a request for a
  // shard this node does not lead is forwarded to its leader.
  router(shard_set& shards, const clock& time, http_options opts, authenticator* auth = nullptr,
         const cluster_view* cluster = nullptr);
  ~router();
  router(const router&) = delete;
  router& operator=(const router&) = delete;

  // Answers one complete request: done(reply) runs on ex, either inside
  // handle() (an answer that needs no shard: healthz, an error, a refusal)
  // or later (after the shard's answer crossed back to ex). done must only
  // start work (e.g. the answer's write), never read the next request
  // inline. Never throws: an exception in a handler becomes 500 INTERNAL.
  // The caller sets keep-alive. The hot routes (produce, consume, ack,
  // healthz) run as callbacks, with no coroutine frame; the others as a
  // coroutine spawned on ex.
  using reply_fn = std::function<void(reply)>;
  void handle(request req, asio::any_io_executor ex, reply_fn done);
  // The same for a coroutine (tests and the request fuzzer; every session
  // uses the callback form): completes on the
  // caller's executor, never inside the call.
  asio::awaitable<reply> handle(request req);

  // The error response every part of http/ sends (with X-Request-Id).
  response error_response(const error& e, unsigned version, std::string_view request_id) const;

  const http_metrics& metrics() const noexcept { return *metrics_; }
  const http_options& options() const noexcept { return opts_; }

  // "GET /v1/healthz", ...: every route, for docs and tests.
  std::vector<std::string> describe_routes() const;
  // The scope each route needs, in the order of describe_routes().
  std::vector<scope> route_scopes() const;

  struct call;
  struct pending;  // one request from handle() to its answer

 private:
  using pending_ptr = std::shared_ptr<pending>;
  using handler = void (router::*)(pending_ptr);
  struct route_def {
    bhttp::verb method;
    std::string_view pattern;  // segments; "{name}" captures one
    handler fn;
    bool needs_core;  // subject to backpressure
    scope need;       // what a token must hold when auth is on
  };
  static const route_def k_routes[];
  static const std::size_t k_route_count;

  // A route's handler in one of three shapes: answered at once, a
  // callback handler (the hot routes), or a coroutine.
  template <reply (router::*Fn)(call&)>
  void at_once(pending_ptr p);
  template <asio::awaitable<reply> (router::*Fn)(call&)>
  void spawned(pending_ptr p);
  // Answers p: the answer's common fields, metrics, then p's done.
  void finish(pending_ptr p, reply out);
  // A shard's done callback for p: renders the shard's answer R on p's
  // executor (render(R&&, call&) -> reply), then finish().
  template <class R, class Render>
  std::function<void(R)> answer_with(pending_ptr p, Render render);

  reply healthz(call& c);
  reply version(call& c);
  reply cluster_status(call& c);
  asio::awaitable<reply> create_topic(call& c);
  asio::awaitable<reply> list_topics(call& c);
  asio::awaitable<reply> get_topic(call& c);
  asio::awaitable<reply> delete_topic(call& c);
  void produce(pending_ptr p);
  void consume(pending_ptr p);
  asio::awaitable<reply> consume_stream_head(call& c, consume_request cr);
  void ack(pending_ptr p);
  // An ack that produces (a workflow step, router_steps.cpp): its targets
  // checked, the ack, and the wait for its messages on other shards.
  void ack_steps(pending_ptr p, ack_request ar, shard& owner);
  // POST /v1/internal/outbox_append: another node's relay hands this one
  // outbox entries for a shard it leads.
  void outbox_append_in(pending_ptr p);
  // A cluster's relay delivery: to this node's shard, or (not its leader)
  // to the leader's outbox_append_in.
  outbox_relay::deliver_fn outbox_to_leader();
  // Placement (router_cluster.cpp): POST /v1/cluster/nodes/{id}/drain,
  // POST /v1/cluster/rebalance, and POST /v1/internal/meta (another node's
  // entry for the meta group).
  void cluster_drain(pending_ptr p);
  void cluster_rebalance(pending_ptr p);
  void cluster_move(pending_ptr p);
  void meta_in(pending_ptr p);
  // Finishes p with e's answer (the reply is made before p is handed on).
  void fail(pending_ptr p, const error& e);
  void meta_answer(pending_ptr p, bhttp::status ok_status, std::string body,
                   const std::function<void(std::function<void(result<void>)>)>& start);
  // Whether c comes from a node of the cluster: X-Onceq-Forwarded names a
  // member and the peer is loopback or a node's API host.
  bool from_member(const call& c) const;
  // The 403 when the request's token may not produce into topic.
  std::optional<error> deny_produce(const call& c, std::string_view topic) const;
  asio::awaitable<reply> keys(call& c);
  // nack, extend, key history, redrive, replay: one shape (router.cpp).
  template <class Route>
  asio::awaitable<reply> topic_command(call& c);
  asio::awaitable<reply> prometheus(call& c);
  asio::awaitable<reply> ui(call& c);
  asio::awaitable<reply> openapi(call& c);

  reply error_reply(const error& e, const call& c, std::string_view allow = {}) const;
  // The topic's shard, noted in the call (reply::shard).
  shard& route(call& c, std::string_view topic);
  // The 403 when the request's token may not use topic; nullopt if it may.
  std::optional<error> deny_topic(const call& c, std::string_view topic) const;

  shard_set& shards_;
  const clock& clock_;
  http_options opts_;
  authenticator* auth_;
  const cluster_view* cluster_;
  std::unique_ptr<class forwarder> forwarder_;  // with cluster_
  // Forwards p's request to node and finishes p with the relayed answer.
  void forward(pending_ptr p, std::string node);
  drain_meter drain_;
  std::vector<std::string> labels_;       // metric label per distinct pattern (+ "unmatched")
  std::vector<std::size_t> route_label_;  // route index -> label index
  // route index -> its pattern's segments (views of the static pattern)
  std::vector<std::vector<std::string_view>> route_segments_;
  std::unique_ptr<http_metrics> metrics_;
  // Carries acks' messages to other shards (workflow steps). Last: its
  // thread stops first.
  std::unique_ptr<outbox_relay> relay_;
};

}  // namespace onceq::http
