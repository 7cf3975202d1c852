#include "http/router.hpp"

#include <chrono>
#include <exception>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "base/log.hpp"
#include "broker/validation.hpp"
#include "http/codec.hpp"
#include "http/embedded.hpp"
#include "http/error_table.hpp"
#include "http/forwarder.hpp"
#include "http/ndjson.hpp"
#include "http/params.hpp"
#include "http/request_id.hpp"
#include "http/router_internal.hpp"
#include "http/shard_ops.hpp"

namespace onceq::http {

using namespace detail;

namespace {

using json = nlohmann::json;
using asio::use_awaitable;
using bhttp::status;
using bhttp::verb;

constexpr std::string_view k_unmatched = "unmatched";
// A forwarded request's answer may take this much longer than its wait at
// the leader (a long-poll's wait_ms, else none). A leader that can still
// answer does so within an election timeout or two (a write it cannot
// commit fails when it steps down); past this the link or the node is
// presumed dead and the client gets 503 to retry (found by
// cluster_partition_test: a request forwarded as the link went dark used
// to wait 75 s).
constexpr millis k_forward_timeout_ms = 5'000;

// Splits "/a/b/c" into {"a","b","c"}; an empty path has no segments.
std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (true) {
    auto slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

// Matches path segments against a pattern's segments (split once, in the
// router's constructor); captures "{...}" segments (percent-decoded).
// False on a mismatch or a bad escape.
bool match(const std::vector<std::string_view>& pat, const std::vector<std::string_view>& segs,
           std::vector<std::string>* captures) {
  if (pat.size() != segs.size()) return false;
  std::vector<std::string> caps;
  for (std::size_t i = 0; i < pat.size(); ++i) {
    if (pat[i].size() > 1 && pat[i].front() == '{') {
      if (segs[i].empty()) return false;
      auto decoded = percent_decode(segs[i], false);
      if (!decoded.ok()) return false;
      caps.push_back(std::move(*decoded));
    } else if (pat[i] != segs[i]) {
      return false;
    }
  }
  if (captures != nullptr) *captures = std::move(caps);
  return true;
}

}  // namespace

// The scope column is the whole authorization policy of the API
// (docs/SECURITY.md); topic checks follow in the handlers that take one.
namespace {
// The steps of the routes that have the common shape (router::topic_command).
struct nack_route;
struct extend_route;
struct key_history_route;
struct redrive_route;
struct replay_route;
}  // namespace

const router::route_def router::k_routes[] = {
    {verb::get, "/v1/healthz", &router::at_once<&router::healthz>, false, scope::none},
    {verb::get, "/v1/version", &router::at_once<&router::version>, false, scope::none},
    {verb::get, "/v1/cluster", &router::at_once<&router::cluster_status>, false, scope::metrics},
    {verb::post, "/v1/topics", &router::spawned<&router::create_topic>, true, scope::admin},
    {verb::get, "/v1/topics", &router::spawned<&router::list_topics>, true, scope::admin},
    {verb::get, "/v1/topics/{name}", &router::spawned<&router::get_topic>, true, scope::admin},
    {verb::delete_, "/v1/topics/{name}", &router::spawned<&router::delete_topic>, true,
     scope::admin},
    {verb::post, "/v1/produce", &router::produce, true, scope::produce},
    {verb::get, "/v1/consume", &router::consume, true, scope::consume},
    {verb::post, "/v1/consume", &router::consume, true, scope::consume},
    {verb::post, "/v1/ack", &router::ack, true, scope::consume},
    {verb::post, "/v1/nack", &router::spawned<&router::topic_command<nack_route>>, true,
     scope::consume},
    {verb::post, "/v1/extend", &router::spawned<&router::topic_command<extend_route>>, true,
     scope::consume},
    {verb::get, "/v1/keys", &router::spawned<&router::keys>, true, scope::consume},
    {verb::get, "/v1/keys/history", &router::spawned<&router::topic_command<key_history_route>>,
     true, scope::consume},
    {verb::post, "/v1/dlq/redrive", &router::spawned<&router::topic_command<redrive_route>>, true,
     scope::admin},
    {verb::post, "/v1/replay", &router::spawned<&router::topic_command<replay_route>>, true,
     scope::admin},
    {verb::get, "/metrics", &router::spawned<&router::prometheus>, false, scope::metrics},
    // Public like healthz: the page and the spec hold no data; the page's
    // own API calls carry the token (docs/UI.md).
    {verb::get, "/ui", &router::spawned<&router::ui>, false, scope::none},
    {verb::get, "/v1/openapi.json", &router::spawned<&router::openapi>, false, scope::none},
    // A cluster's nodes hand each other outbox entries here; only a member
    // (X-Onceq-Forwarded naming one) may: trusted as the raft port is.
    {verb::post, "/v1/internal/outbox_append", &router::outbox_append_in, true, scope::none},
    {verb::post, "/v1/cluster/nodes/{id}/drain", &router::cluster_drain, false, scope::admin},
    {verb::post, "/v1/cluster/rebalance", &router::cluster_rebalance, false, scope::admin},
    {verb::post, "/v1/cluster/shards/{shard}/move", &router::cluster_move, false, scope::admin},
    {verb::post, "/v1/internal/meta", &router::meta_in, false, scope::none},
};
const std::size_t router::k_route_count = std::size(router::k_routes);

// ---- router ---------------------------------------------------------------

router::router(shard_set& shards, const clock& time, http_options opts, authenticator* auth,
               const cluster_view* cluster)
    : shards_(shards), clock_(time), opts_(std::move(opts)), auth_(auth), cluster_(cluster) {
  if (cluster_ != nullptr) {
    forwarder_ = std::make_unique<forwarder>(*cluster_);
  }
  for (std::size_t i = 0; i < k_route_count; ++i) {
    route_segments_.push_back(split_path(k_routes[i].pattern));
    std::string label(k_routes[i].pattern);
    auto it = std::find(labels_.begin(), labels_.end(), label);
    route_label_.push_back(static_cast<std::size_t>(it - labels_.begin()));
    if (it == labels_.end()) labels_.push_back(std::move(label));
  }
  labels_.emplace_back(k_unmatched);
  metrics_ = std::make_unique<http_metrics>(labels_);
  relay_ = std::make_unique<outbox_relay>(
      shards_, cluster_ == nullptr ? outbox_relay::deliver_fn{} : outbox_to_leader());
  relay_->start();
}

router::~router() = default;

std::vector<std::string> router::describe_routes() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < k_route_count; ++i) {
    out.push_back(fmt::format("{} {}", std::string_view(bhttp::to_string(k_routes[i].method)),
                              k_routes[i].pattern));
  }
  return out;
}

std::vector<scope> router::route_scopes() const {
  std::vector<scope> out;
  for (std::size_t i = 0; i < k_route_count; ++i) out.push_back(k_routes[i].need);
  return out;
}

shard& router::route(call& c, std::string_view topic) {
  shard& s = shards_.of(topic);
  c.shard = s.id();
  return s;
}

std::optional<error> router::deny_topic(const call& c, std::string_view topic) const {
  if (auth_ == nullptr || c.grant.may_use(topic)) return std::nullopt;
  return auth_->deny_topic(c.grant, topic);
}

std::optional<error> router::deny_produce(const call& c, std::string_view topic) const {
  if (auth_ == nullptr || c.grant.token == nullptr) return std::nullopt;
  if (!c.grant.token->has(scope::produce))
    return make_error(errc::permission_denied,
                      fmt::format("token '{}' lacks the scope 'produce' an ack's produce needs",
                                  c.grant.token->name));
  return deny_topic(c, topic);
}

response router::error_response(const error& e, unsigned version,
                                std::string_view request_id) const {
  response res = make_error_response(e, version, error_extras{opts_.retry_after_ms, {}});
  res.set(k_request_id_header, request_id);
  return res;
}

reply router::error_reply(const error& e, const call& c, std::string_view allow) const {
  if (cluster_ != nullptr && e.leader != 0 && e.code == errc::unavailable) {
    const std::string leader = cluster_->node_at(e.leader);
    // Another node leads the shard: the request goes there, once.
    const auto from = c.req[k_forwarded_header];
    if (c.forwardable && from.empty()) {
      reply r;
      r.forward_to = leader;
      return r;
    }
    error moved = e;
    moved.message =
        from.empty() ? fmt::format("{}: a streaming consume is not forwarded; connect to {}",
                                   e.message, leader)
                     : fmt::format("{} (leadership moved while node {} forwarded the request here)",
                                   e.message, std::string_view(from));
    moved.retry_after_ms = opts_.retry_after_ms;
    reply r{make_error_response(moved, c.req.version(), error_extras{opts_.retry_after_ms, allow}),
            {},
            {}};
    r.res.set("X-Onceq-Leader", leader);
    return r;
  }
  reply r{
      make_error_response(e, c.req.version(), error_extras{opts_.retry_after_ms, allow}), {}, {}};
  return r;
}

outbox_relay::deliver_fn router::outbox_to_leader() {
  return [this](std::uint32_t target, outbox_append_cmd cmd,
                std::function<void(result<std::vector<outbox_appended>>)> done) {
    auto copy = cmd;
    shards_.at(target).submit(std::move(copy), [this, target, cmd = std::move(cmd),
                                                done = std::move(done)](
                                                   result<std::vector<outbox_appended>> r) mutable {
      // This node leads the target (or nobody does): its answer.
      if (r.ok() || r.code() != errc::unavailable || r.err().leader == 0) return done(std::move(r));
      std::string node = cluster_->node_at(r.err().leader);
      if (node.empty() || node == cluster_->self()) return done(std::move(r));
      request req{bhttp::verb::post, "/v1/internal/outbox_append", 11};
      req.set(bhttp::field::content_type, "application/json");
      req.body() = outbox_append_json(cmd);
      req.prepare_payload();
      forwarder_->forward(
          req, fmt::format("outbox-{}-{}", cmd.source, cmd.entries.front().seq), std::move(node),
          k_forward_timeout_ms, shards_.at(target).context().get_executor(),
          [done = std::move(done)](result<response> res) {
            if (res.ok() && res->result_int() == 200)
              return done(parse_outbox_appended(res->body()));
            // Not reached, or refused: the entries wait for the next pass.
            done(make_error(
                errc::unavailable,
                res.ok() ? fmt::format("the target shard's leader answered {}", res->result_int())
                         : std::string("the target shard's leader did not answer")));
          });
    });
  };
}

void router::outbox_append_in(pending_ptr p) {
  call& c = p->c;
  if (cluster_ == nullptr)
    return finish(
        std::move(p),
        error_reply(make_error(errc::not_found, "no outbox hand-over on a single node"), c));
  if (!from_member(c))
    return finish(std::move(p),
                  error_reply(make_error(errc::permission_denied,
                                         "only a node of this cluster hands over its outbox"),
                              c));
  auto params = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!params.ok()) return finish(std::move(p), error_reply(params.err(), c));
  auto cmd = parse_outbox_append(*params);
  if (!cmd.ok()) return finish(std::move(p), error_reply(cmd.err(), c));
  shard& target = route(c, cmd->entries.front().msg.topic);
  target.submit(std::move(*cmd),
                answer_with<result<std::vector<outbox_appended>>>(
                    std::move(p), [this](result<std::vector<outbox_appended>> r, const call& c) {
                      if (!r.ok()) return error_reply(r.err(), c);
                      return json_text_reply(bhttp::status::ok, outbox_appended_json(*r));
                    }));
}

void router::forward(pending_ptr p, std::string node) {
  const request& req = p->req;
  auto ex = p->ex;
  const std::string& id = p->c.request_id;
  const millis timeout = p->c.wait_ms + k_forward_timeout_ms;
  forwarder_->forward(req, id, std::move(node), timeout, ex,
                      [this, p = std::move(p)](result<response> r) {
                        reply out;
                        if (r.ok()) {
                          out.res = std::move(*r);
                        } else {
                          out = error_reply(r.err(), p->c);
                        }
                        finish(std::move(p), std::move(out));
                      });
}

void router::handle(request req, asio::any_io_executor ex, reply_fn done) {
  std::string request_id = request_id_for(req[k_request_id_header]);
  auto p = std::make_shared<pending>(std::move(req), std::move(request_id), std::move(ex),
                                     std::move(done));
  p->started = std::chrono::steady_clock::now();
  call& c = p->c;
  const request& r = p->req;

  std::string_view target = r.target();
  std::string_view path = target.substr(0, target.find('?'));
  if (auto q = target.find('?'); q != std::string_view::npos) c.query = target.substr(q + 1);
  if (auto h = c.query.find('#'); h != std::string_view::npos) c.query = c.query.substr(0, h);
  const auto segs = split_path(path);

  const route_def* found = nullptr;
  p->label = labels_.size() - 1;  // unmatched
  std::string allow;
  for (std::size_t i = 0; i < k_route_count; ++i) {
    std::vector<std::string> caps;
    if (!match(route_segments_[i], segs, &caps)) continue;
    p->label = route_label_[i];
    if (k_routes[i].method == r.method()) {
      found = &k_routes[i];
      c.captures = std::move(caps);
      break;
    }
    if (!allow.empty()) allow += ", ";
    allow += std::string_view(bhttp::to_string(k_routes[i].method));
  }

  if (found == nullptr && allow.empty()) {
    reply out = error_reply(make_error(errc::not_found, fmt::format("no route for {}", path)), c);
    return finish(std::move(p), std::move(out));
  }
  if (found == nullptr) {
    reply out = error_reply(make_error(errc::method_not_allowed,
                                       fmt::format("{} is not allowed on {}",
                                                   std::string_view(r.method_string()), path)),
                            c, allow);
    return finish(std::move(p), std::move(out));
  }
  if (auth_ != nullptr && found->need != scope::none) {
    // Before the backpressure check: a stranger learns nothing, not even load.
    auto g = auth_->authorize(r[bhttp::field::authorization], found->need);
    if (!g.ok()) return finish(std::move(p), error_reply(g.err(), c));
    c.grant = std::move(*g);
  }
  if (found->needs_core) {
    if (const std::size_t depth = shards_.queue_depth(); depth > opts_.max_queue_depth) {
      error e = make_error(errc::resource_exhausted, "too many requests queued; retry later");
      e.retry_after_ms = drain_.drain_ms(depth, p->started).value_or(opts_.retry_after_ms);
      return finish(std::move(p), error_reply(e, c));
    }
    p->drains = true;
  }
  try {
    (this->*(found->fn))(p);
  } catch (const std::exception& e) {
    // Before its command reached a shard (nothing else throws): answer it
    // here. After, the shard's answer comes.
    if (!c.shard) {
      finish(
          std::move(p),
          error_reply(make_error(errc::internal, fmt::format("internal error: {}", e.what())), c));
    } else {
      log(log_level::error, "http", fmt::format("internal error: {}", e.what()));
    }
  }
}

asio::awaitable<reply> router::handle(request req) {
  auto ex = co_await asio::this_coro::executor;
  auto op = asio::async_initiate<decltype(use_awaitable), void(reply)>(
      [this, ex](auto h, request r) {
        // done may run inside handle(); a coroutine's handler must not.
        auto held = std::make_shared<decltype(h)>(std::move(h));
        handle(std::move(r), ex, [held, ex](reply out) {
          asio::post(ex,
                     [held, out = std::move(out)]() mutable { std::move (*held)(std::move(out)); });
        });
      },
      use_awaitable, std::move(req));
  co_return co_await std::move(op);
}

void router::finish(pending_ptr p, reply out) {
  if (!out.forward_to.empty() && forwarder_ != nullptr) {
    std::string node = std::move(out.forward_to);
    return forward(std::move(p), std::move(node));
  }
  // The node that answered; a relayed answer keeps the leader's.
  if (cluster_ != nullptr && out.res.find(k_node_header) == out.res.end()) {
    out.res.set(k_node_header, cluster_->self());
  }
  out.res.version(p->req.version());
  out.res.set(k_request_id_header, p->c.request_id);
  out.shard = p->c.shard;
  const auto finished = std::chrono::steady_clock::now();
  if (p->drains) drain_.completed(finished);
  const double seconds = std::chrono::duration<double>(finished - p->started).count();
  metrics_->observe(p->label, seconds, out.res.result_int());
  reply_fn done = std::move(p->done);
  p.reset();  // the request's memory goes before the answer is written
  done(std::move(out));
}

template <reply (router::*Fn)(router::call&)>
void router::at_once(pending_ptr p) {
  reply out = (this->*Fn)(p->c);
  finish(std::move(p), std::move(out));
}

template <asio::awaitable<reply> (router::*Fn)(router::call&)>
void router::spawned(pending_ptr p) {
  auto ex = p->ex;
  asio::co_spawn(
      ex,
      [this, p = std::move(p)]() mutable -> asio::awaitable<void> {
        reply out;
        try {
          auto op = (this->*Fn)(p->c);
          out = co_await std::move(op);
        } catch (const std::exception& e) {
          out = error_reply(make_error(errc::internal, fmt::format("internal error: {}", e.what())),
                            p->c);
        }
        finish(std::move(p), std::move(out));
      },
      asio::detached);
}

// ---- the common shape of a topic command -----------------------------------

// read the parameters -> parse them into a command -> may the token use
// its topic? -> submit it to the topic's shard (broker/dispatch.hpp says
// what it answers) -> render the answer. Route supplies parse, topic and
// render (the *_route structs below); the routes with a shape of their own
// (produce's batch answers, consume's long-poll and stream, ack's
// single-or-batch, create's placement) keep their handlers.
template <class Route>
asio::awaitable<reply> router::topic_command(call& c) {
  auto p = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!p.ok()) co_return error_reply(p.err(), c);
  auto cmd = Route::parse(*p);
  if (!cmd.ok()) co_return error_reply(cmd.err(), c);
  const std::string topic = Route::topic(*cmd);
  if (auto denied = deny_topic(c, topic)) co_return error_reply(*denied, c);
  using answer = typename command_traits<std::decay_t<decltype(*cmd)>>::reply;
  auto r_op = async_submit(route(c, topic), std::move(*cmd), use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  if constexpr (std::is_void_v<answer>) {
    co_return Route::render();
  } else {
    co_return Route::render(*r);
  }
}

namespace {

struct nack_route {
  static result<nack_cmd> parse(const params& p) { return parse_nack(p); }
  static const std::string& topic(const nack_cmd& c) { return c.ref.topic; }
  static reply render() { return no_content(); }
};

struct extend_route {
  static result<extend_cmd> parse(const params& p) { return parse_extend(p); }
  static const std::string& topic(const extend_cmd& c) { return c.ref.topic; }
  static reply render(const lease_extended& e) {
    return json_reply(status::ok, {{"lease_expires_at_ms", e.lease_expires_at_ms}});
  }
};

struct key_history_route {
  static result<key_query> parse(const params& p) { return parse_key_history_query(p); }
  static const std::string& topic(const key_query& q) { return q.topic; }
  static reply render(const onceq::key_history& h) { return json_reply(status::ok, to_json(h)); }
};

struct redrive_route {
  static result<redrive_cmd> parse(const params& p) { return parse_redrive(p); }
  static const std::string& topic(const redrive_cmd& c) { return c.topic; }
  static reply render(const redriven& r) { return json_reply(status::ok, {{"moved", r.moved}}); }
};

struct replay_route {
  static result<replay_cmd> parse(const params& p) { return parse_replay(p); }
  static const std::string& topic(const replay_cmd& c) { return c.topic; }
  static reply render(const replay_reply& r) { return json_reply(status::ok, to_json(r)); }
};

}  // namespace

}  // namespace onceq::http
