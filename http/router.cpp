#include "http/router.hpp"

#include <chrono>
#include <exception>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "broker/validation.hpp"
#include "http/codec.hpp"
#include "http/embedded.hpp"
#include "http/error_table.hpp"
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

// Unknown topic on produce/consume is 400 by the spec (the topic is a
// parameter there, not the resource); on a topic URL or ack it stays 404.
error topic_param_error(error e) {
  if (e.code == errc::not_found) e.code = errc::invalid_argument;
  return e;
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
    {verb::get, "/v1/healthz", &router::healthz, false, scope::none},
    {verb::get, "/v1/version", &router::version, false, scope::none},
    {verb::post, "/v1/topics", &router::create_topic, true, scope::admin},
    {verb::get, "/v1/topics", &router::list_topics, true, scope::admin},
    {verb::get, "/v1/topics/{name}", &router::get_topic, true, scope::admin},
    {verb::delete_, "/v1/topics/{name}", &router::delete_topic, true, scope::admin},
    {verb::post, "/v1/produce", &router::produce, true, scope::produce},
    {verb::get, "/v1/consume", &router::consume, true, scope::consume},
    {verb::post, "/v1/consume", &router::consume, true, scope::consume},
    {verb::post, "/v1/ack", &router::ack, true, scope::consume},
    {verb::post, "/v1/nack", &router::topic_command<nack_route>, true, scope::consume},
    {verb::post, "/v1/extend", &router::topic_command<extend_route>, true, scope::consume},
    {verb::get, "/v1/keys", &router::keys, true, scope::consume},
    {verb::get, "/v1/keys/history", &router::topic_command<key_history_route>, true,
     scope::consume},
    {verb::post, "/v1/dlq/redrive", &router::topic_command<redrive_route>, true, scope::admin},
    {verb::post, "/v1/replay", &router::topic_command<replay_route>, true, scope::admin},
    {verb::get, "/metrics", &router::prometheus, false, scope::metrics},
    // Public like healthz: the page and the spec hold no data; the page's
    // own API calls carry the token (docs/UI.md).
    {verb::get, "/ui", &router::ui, false, scope::none},
    {verb::get, "/v1/openapi.json", &router::openapi, false, scope::none},
};
const std::size_t router::k_route_count = std::size(router::k_routes);

// ---- consume_stream -------------------------------------------------------

consume_stream::consume_stream(shard& s, consume_cmd cmd, millis poll_ms,
                               std::vector<delivery> initial)
    : shard_(s), cmd_(std::move(cmd)), poll_ms_(poll_ms), initial_(encode_deliveries(initial)) {
  remember(initial);
}

void consume_stream::remember(const std::vector<delivery>& ds) {
  last_.clear();
  for (const auto& d : ds) last_.push_back(held{d.partition, d.offset, d.attempts});
}

asio::awaitable<result<std::string>> consume_stream::next() {
  consume_cmd cmd = cmd_;
  auto got_op = async_consume(shard_, std::move(cmd), poll_ms_, use_awaitable);
  auto got = co_await std::move(got_op);
  if (!got.ok()) co_return std::move(got).err();
  remember(*got);
  co_return encode_deliveries(*got);
}

void consume_stream::abandon_last() {
  if (last_.empty()) return;
  std::vector<extend_cmd> cmds;
  for (const auto& h : last_) {
    extend_cmd e;
    e.ref = delivery_ref{cmd_.topic, cmd_.group, cmd_.owner, h.partition, h.offset, h.attempts, {}};
    e.lease_ms = 1;
    cmds.push_back(std::move(e));
  }
  last_.clear();
  shard_.execute<int>(
      [cmds = std::move(cmds)](broker& b) -> result<int> {
        for (const auto& e : cmds) {
          // Fenced by attempts: a delivery someone else got meanwhile stays.
          auto r = b.extend(e);
          (void)r;  // best effort: a lease already gone needs nothing
        }
        return 0;
      },
      [](result<int>) {});
}

// ---- router ---------------------------------------------------------------

router::router(shard_set& shards, const clock& time, http_options opts, authenticator* auth)
    : shards_(shards), clock_(time), opts_(std::move(opts)), auth_(auth) {
  for (std::size_t i = 0; i < k_route_count; ++i) {
    route_segments_.push_back(split_path(k_routes[i].pattern));
    std::string label(k_routes[i].pattern);
    auto it = std::find(labels_.begin(), labels_.end(), label);
    route_label_.push_back(static_cast<std::size_t>(it - labels_.begin()));
    if (it == labels_.end()) labels_.push_back(std::move(label));
  }
  labels_.emplace_back(k_unmatched);
  metrics_ = std::make_unique<http_metrics>(labels_);
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

response router::error_response(const error& e, unsigned version,
                                std::string_view request_id) const {
  response res = make_error_response(e, version, error_extras{opts_.retry_after_ms, {}});
  res.set(k_request_id_header, request_id);
  return res;
}

reply router::error_reply(const error& e, const call& c, std::string_view allow) const {
  reply r{
      make_error_response(e, c.req.version(), error_extras{opts_.retry_after_ms, allow}), {}, {}};
  return r;
}

asio::awaitable<reply> router::handle(request req) {
  const auto started = std::chrono::steady_clock::now();
  call c{req, request_id_for(req[k_request_id_header]), {}, {}, {}, {}};

  std::string_view target = req.target();
  std::string_view path = target.substr(0, target.find('?'));
  if (auto q = target.find('?'); q != std::string_view::npos) c.query = target.substr(q + 1);
  if (auto h = c.query.find('#'); h != std::string_view::npos) c.query = c.query.substr(0, h);
  const auto segs = split_path(path);

  const route_def* found = nullptr;
  std::size_t label = labels_.size() - 1;  // unmatched
  std::string allow;
  for (std::size_t i = 0; i < k_route_count; ++i) {
    std::vector<std::string> caps;
    if (!match(route_segments_[i], segs, &caps)) continue;
    label = route_label_[i];
    if (k_routes[i].method == req.method()) {
      found = &k_routes[i];
      c.captures = std::move(caps);
      break;
    }
    if (!allow.empty()) allow += ", ";
    allow += std::string_view(bhttp::to_string(k_routes[i].method));
  }

  reply out;
  bool answered = false;
  if (found == nullptr && allow.empty()) {
    out = error_reply(make_error(errc::not_found, fmt::format("no route for {}", path)), c);
    answered = true;
  } else if (found == nullptr) {
    out = error_reply(make_error(errc::method_not_allowed,
                                 fmt::format("{} is not allowed on {}",
                                             std::string_view(req.method_string()), path)),
                      c, allow);
    answered = true;
  } else if (auth_ != nullptr && found->need != scope::none) {
    // Before the backpressure check: a stranger learns nothing, not even load.
    auto g = auth_->authorize(req[bhttp::field::authorization], found->need);
    if (g.ok()) {
      c.grant = std::move(*g);
    } else {
      out = error_reply(g.err(), c);
      answered = true;
    }
  }
  if (!answered && found->needs_core) {
    if (const std::size_t depth = shards_.queue_depth(); depth > opts_.max_queue_depth) {
      error e = make_error(errc::resource_exhausted, "too many requests queued; retry later");
      e.retry_after_ms = drain_.drain_ms(depth, started).value_or(opts_.retry_after_ms);
      out = error_reply(e, c);
      answered = true;
    }
  }
  if (!answered) {
    try {
      auto op = (this->*(found->fn))(c);
      out = co_await std::move(op);
    } catch (const std::exception& e) {
      out = error_reply(make_error(errc::internal, fmt::format("internal error: {}", e.what())), c);
    }
  }

  out.res.version(req.version());
  out.res.set(k_request_id_header, c.request_id);
  out.shard = c.shard;
  const auto finished = std::chrono::steady_clock::now();
  if (!answered && found->needs_core) drain_.completed(finished);
  const double seconds = std::chrono::duration<double>(finished - started).count();
  metrics_->observe(label, seconds, out.res.result_int());
  co_return out;
}

// ---- the common shape of a topic command -----------------------------------

// read the parameters -> parse them into a command -> may the token use
// its topic? -> submit it to the topic's shard (shard/commands.hpp says
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
  using answer = typename command<std::decay_t<decltype(*cmd)>>::reply;
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
  static reply render(millis expires) {
    return json_reply(status::ok, {{"lease_expires_at_ms", expires}});
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
  static reply render(std::int64_t moved) { return json_reply(status::ok, {{"moved", moved}}); }
};

struct replay_route {
  static result<replay_cmd> parse(const params& p) { return parse_replay(p); }
  static const std::string& topic(const replay_cmd& c) { return c.topic; }
  static reply render(const replay_reply& r) { return json_reply(status::ok, to_json(r)); }
};

}  // namespace

// ---- handlers ---------------------------------------------------------------

asio::awaitable<reply> router::produce(call& c) {
  auto p = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!p.ok()) co_return error_reply(p.err(), c);
  auto pr = parse_produce(*p, c.req["Idempotency-Key"]);
  if (!pr.ok()) co_return error_reply(pr.err(), c);
  // A batch names one topic: one check covers every message.
  if (auto denied = deny_topic(c, pr->cmd.topic)) co_return error_reply(*denied, c);
  const bool batch = pr->batch;
  std::string topic = pr->cmd.topic;
  auto r_op = async_submit(route(c, topic), std::move(pr->cmd), use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(topic_param_error(std::move(r).err()), c);
  if (r->results.empty()) {
    co_return error_reply(make_error(errc::internal, "produce answered no result"), c);
  }
  co_return json_text_reply(status::ok, produce_reply_json(*r, topic, batch));
}

asio::awaitable<reply> router::consume(call& c) {
  auto p = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!p.ok()) co_return error_reply(p.err(), c);
  auto cr = parse_consume(*p);
  if (!cr.ok()) co_return error_reply(cr.err(), c);
  if (auto denied = deny_topic(c, cr->cmd.topic)) co_return error_reply(*denied, c);
  if (cr->cmd.deadline_ms) {
    // Waiting past the consumer's deadline could deliver nothing anyway.
    const millis left = std::max<millis>(0, *cr->cmd.deadline_ms - clock_.now_ms());
    cr->wait_ms = std::min(cr->wait_ms, left);
  }
  if (cr->acks) {
    // The previous batch's acks first, in the same core job: one durable
    // round trip for the cycle. Errors of the acks as a whole are answered
    // as POST /v1/ack answers them.
    ack_batch_cmd acks{cr->cmd.topic, cr->cmd.group, cr->cmd.owner, std::move(*cr->acks)};
    shard& owner = route(c, cr->cmd.topic);
    auto both_op = async_consume_after_acks(owner, std::move(acks), std::move(cr->cmd), cr->wait_ms,
                                            use_awaitable);
    auto both = co_await std::move(both_op);
    if (!both.ok()) co_return error_reply(both.err(), c);
    co_return ndjson_reply(consumed_acks_line(both->acks) + encode_deliveries(both->deliveries));
  }
  shard& owner = route(c, cr->cmd.topic);
  if (!cr->stream) {
    auto got_op = async_consume(owner, std::move(cr->cmd), cr->wait_ms, use_awaitable);
    auto got = co_await std::move(got_op);
    if (!got.ok()) co_return error_reply(topic_param_error(std::move(got).err()), c);
    co_return ndjson_reply(encode_deliveries(*got));
  }
  // Stream: the first poll does not wait, so that errors (unknown topic, bad
  // lease) still get a proper status and the head goes out at once.
  cr->cmd.max_messages = opts_.stream_batch;
  consume_cmd first = cr->cmd;
  auto got_op = async_consume(owner, std::move(first), 0, use_awaitable);
  auto got = co_await std::move(got_op);
  if (!got.ok()) co_return error_reply(topic_param_error(std::move(got).err()), c);
  reply r;
  r.res.result(status::ok);
  r.res.set(bhttp::field::content_type, k_ndjson_type);
  r.res.set(bhttp::field::cache_control, "no-store");
  r.stream = std::make_shared<consume_stream>(owner, std::move(cr->cmd), opts_.stream_poll_ms,
                                              std::move(*got));
  co_return r;
}

asio::awaitable<reply> router::ack(call& c) {
  auto p = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!p.ok()) co_return error_reply(p.err(), c);
  auto ar = parse_ack(*p);
  if (!ar.ok()) co_return error_reply(ar.err(), c);
  const std::string& ack_topic = std::holds_alternative<ack_cmd>(*ar)
                                     ? std::get<ack_cmd>(*ar).ref.topic
                                     : std::get<ack_batch_cmd>(*ar).topic;
  if (auto denied = deny_topic(c, ack_topic)) co_return error_reply(*denied, c);
  if (auto* single = std::get_if<ack_cmd>(&*ar)) {
    shard& owner = route(c, ack_topic);
    auto r_op = async_submit(owner, std::move(*single), use_awaitable);
    auto r = co_await std::move(r_op);
    if (!r.ok()) co_return error_reply(r.err(), c);
    co_return no_content();
  }
  shard& owner = route(c, ack_topic);
  auto r_op = async_submit(owner, std::move(std::get<ack_batch_cmd>(*ar)), use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  co_return json_text_reply(status::ok, ack_outcomes_json(*r));
}

asio::awaitable<reply> router::keys(call& c) {
  auto p = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!p.ok()) co_return error_reply(p.err(), c);
  auto kr = parse_key_query(*p);
  if (!kr.ok()) co_return error_reply(kr.err(), c);
  if (auto denied = deny_topic(c, kr->q.topic)) co_return error_reply(*denied, c);
  shard& owner = route(c, kr->q.topic);
  auto r_op = async_wait_key(owner, std::move(kr->q), kr->wait_ms, use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  co_return json_reply(status::ok, to_json(*r));
}

// The console talks to this server only: the CSP keeps a page that
// someone managed to inject text into from loading or sending anything
// elsewhere, and the page may not be framed (clickjacking).
}  // namespace onceq::http
