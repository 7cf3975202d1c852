// The message routes (produce, consume, ack, keys) and consume_stream.
// produce, consume and ack are callbacks with no coroutine frame (the hot
// path): each reads and checks its request, hands its command to the
// topic's shard, and answers from answer_with() when the shard has.
// Dispatch and the routes of one shape (topic_command) are router.cpp.

#include <algorithm>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "http/codec.hpp"
#include "http/ndjson.hpp"
#include "http/params.hpp"
#include "http/router.hpp"
#include "http/router_internal.hpp"
#include "http/shard_ops.hpp"

namespace onceq::http {

using namespace detail;
using asio::use_awaitable;
using bhttp::status;

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
  // Fenced by attempts: a delivery someone else got meanwhile stays; a
  // lease already gone needs nothing (best effort).
  for (auto& e : cmds) shard_.submit(std::move(e), [](result<lease_extended>) {});
}

void router::produce(pending_ptr p) {
  call& c = p->c;
  auto params = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!params.ok()) return finish(std::move(p), error_reply(params.err(), c));
  auto pr = parse_produce(*params, c.req["Idempotency-Key"]);
  if (!pr.ok()) return finish(std::move(p), error_reply(pr.err(), c));
  // A batch names one topic: one check covers every message.
  if (auto denied = deny_topic(c, pr->cmd.topic))
    return finish(std::move(p), error_reply(*denied, c));
  shard& owner = route(c, pr->cmd.topic);
  auto render = [this, topic = pr->cmd.topic, batch = pr->batch](result<produce_reply> r,
                                                                 const call& c) {
    if (!r.ok()) return error_reply(topic_param_error(std::move(r).err()), c);
    if (r->results.empty()) {
      return error_reply(make_error(errc::internal, "produce answered no result"), c);
    }
    return json_text_reply(status::ok, produce_reply_json(*r, topic, batch));
  };
  owner.submit(std::move(pr->cmd),
               answer_with<result<produce_reply>>(std::move(p), std::move(render)));
}

void router::consume(pending_ptr p) {
  call& c = p->c;
  auto params = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!params.ok()) return finish(std::move(p), error_reply(params.err(), c));
  auto cr = parse_consume(*params);
  if (!cr.ok()) return finish(std::move(p), error_reply(cr.err(), c));
  if (auto denied = deny_topic(c, cr->cmd.topic))
    return finish(std::move(p), error_reply(*denied, c));
  if (cr->cmd.deadline_ms) {
    // Waiting past the consumer's deadline could deliver nothing anyway.
    const millis left = std::max<millis>(0, *cr->cmd.deadline_ms - clock_.now_ms());
    cr->wait_ms = std::min(cr->wait_ms, left);
  }
  c.wait_ms = cr->wait_ms;
  if (cr->stream) {
    // A stream's head and its polls: a coroutine (not the hot path).
    auto ex = p->ex;
    asio::co_spawn(
        ex,
        [this, p = std::move(p), cr = std::move(*cr)]() mutable -> asio::awaitable<void> {
          auto op = consume_stream_head(p->c, std::move(cr));
          reply out = co_await std::move(op);
          finish(std::move(p), std::move(out));
        },
        asio::detached);
    return;
  }
  shard& owner = route(c, cr->cmd.topic);
  if (cr->acks) {
    // The previous batch's acks first, in the same core job: one durable
    // round trip for the cycle. Errors of the acks as a whole are answered
    // as POST /v1/ack answers them.
    ack_batch_cmd acks{cr->cmd.topic, cr->cmd.group, cr->cmd.owner, std::move(*cr->acks)};
    auto render = [this](result<consume_after_acks_reply> both, const call& c) {
      if (!both.ok()) return error_reply(both.err(), c);
      return ndjson_reply(consumed_acks_line(both->acks) + encode_deliveries(both->deliveries));
    };
    owner.consume_after_acks(
        std::move(acks), std::move(cr->cmd), cr->wait_ms,
        answer_with<result<consume_after_acks_reply>>(std::move(p), std::move(render)));
    return;
  }
  auto render = [this](result<std::vector<delivery>> got, const call& c) {
    if (!got.ok()) return error_reply(topic_param_error(std::move(got).err()), c);
    return ndjson_reply(encode_deliveries(*got));
  };
  owner.consume(std::move(cr->cmd), cr->wait_ms,
                answer_with<result<std::vector<delivery>>>(std::move(p), std::move(render)));
}

// Stream: the first poll does not wait, so that errors (unknown topic, bad
// lease) still get a proper status and the head goes out at once.
asio::awaitable<reply> router::consume_stream_head(call& c, consume_request cr) {
  c.forwardable = false;  // its answer does not end: a client connects to the leader
  shard& owner = route(c, cr.cmd.topic);
  cr.cmd.max_messages = opts_.stream_batch;
  consume_cmd first = cr.cmd;
  auto got_op = async_consume(owner, std::move(first), 0, use_awaitable);
  auto got = co_await std::move(got_op);
  if (!got.ok()) co_return error_reply(topic_param_error(std::move(got).err()), c);
  reply r;
  r.res.result(status::ok);
  r.res.set(bhttp::field::content_type, k_ndjson_type);
  r.res.set(bhttp::field::cache_control, "no-store");
  r.stream = std::make_shared<consume_stream>(owner, std::move(cr.cmd), opts_.stream_poll_ms,
                                              std::move(*got));
  co_return r;
}

void router::ack(pending_ptr p) {
  call& c = p->c;
  auto params = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!params.ok()) return finish(std::move(p), error_reply(params.err(), c));
  auto ar = parse_ack(*params);
  if (!ar.ok()) return finish(std::move(p), error_reply(ar.err(), c));
  const std::string& ack_topic = std::holds_alternative<ack_cmd>(*ar)
                                     ? std::get<ack_cmd>(*ar).ref.topic
                                     : std::get<ack_batch_cmd>(*ar).topic;
  if (auto denied = deny_topic(c, ack_topic)) return finish(std::move(p), error_reply(*denied, c));
  shard& owner = route(c, ack_topic);
  const auto* batch = std::get_if<ack_batch_cmd>(&*ar);
  const bool steps = batch == nullptr
                         ? !std::get<ack_cmd>(*ar).produce.empty()
                         : std::any_of(batch->acks.begin(), batch->acks.end(),
                                       [](const ack_item& a) { return !a.produce.empty(); });
  if (steps) return ack_steps(std::move(p), std::move(*ar), owner);
  if (auto* single = std::get_if<ack_cmd>(&*ar)) {
    auto render = [this](result<ack_outcome> r, const call& c) {
      return r.ok() ? no_content() : error_reply(r.err(), c);
    };
    owner.submit(std::move(*single),
                 answer_with<result<ack_outcome>>(std::move(p), std::move(render)));
    return;
  }
  auto render = [this](result<std::vector<ack_outcome>> r, const call& c) {
    if (!r.ok()) return error_reply(r.err(), c);
    return json_text_reply(status::ok, ack_outcomes_json(*r));
  };
  owner.submit(std::move(std::get<ack_batch_cmd>(*ar)),
               answer_with<result<std::vector<ack_outcome>>>(std::move(p), std::move(render)));
}

asio::awaitable<reply> router::keys(call& c) {
  auto p = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!p.ok()) co_return error_reply(p.err(), c);
  auto kr = parse_key_query(*p);
  if (!kr.ok()) co_return error_reply(kr.err(), c);
  if (auto denied = deny_topic(c, kr->q.topic)) co_return error_reply(*denied, c);
  shard& owner = route(c, kr->q.topic);
  c.wait_ms = kr->wait_ms;
  auto r_op = async_wait_key(owner, std::move(kr->q), kr->wait_ms, use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  co_return json_reply(status::ok, to_json(*r));
}

}  // namespace onceq::http
