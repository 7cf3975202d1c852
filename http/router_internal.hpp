#pragma once

// Private to the router's files (router.cpp: dispatch, forwarding and the
// routes of one shape, topic_command; router_messages.cpp: the message
// routes, produce, consume, ack and keys, and consume_stream;
// router_admin.cpp: topics administration, health, metrics, the UI): what
// a handler sees of a request, the answers they build, and gather() over
// every shard.

#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "http/codec.hpp"
#include "http/router.hpp"
#include "http/shard_ops.hpp"
#include "shard/mailbox.hpp"

namespace onceq::http {

// Everything a handler needs about one request.
struct router::call {
  const request& req;
  std::string request_id;
  std::string_view query;
  std::vector<std::string> captures;
  auth_grant grant;                    // what the token may do (everything when auth is off)
  std::optional<std::uint32_t> shard;  // the shard the command ran on (reply::shard)
  // Cluster: whether a not-leader answer may forward the request to the
  // leader (not a streaming consume, whose answer does not end).
  bool forwardable = true;
  // How long the command may wait at the shard (a long-poll's wait_ms): a
  // forwarded request gets this long plus k_forward_timeout_ms.
  millis wait_ms = 0;
};

// One request from router::handle() to its answer, on the heap while its
// command runs (call refers to req).
struct router::pending {
  pending(request r, std::string request_id, asio::any_io_executor executor, reply_fn d)
      : req(std::move(r)),
        c{req, std::move(request_id), {}, {}, {}, {}},
        ex(std::move(executor)),
        done(std::move(d)) {}
  request req;
  call c;
  asio::any_io_executor ex;  // where done runs
  reply_fn done;
  std::chrono::steady_clock::time_point started;
  std::size_t label = 0;  // the route's metric label
  bool drains = false;    // counted by the drain meter (needs a shard)
};

namespace detail {

using json = nlohmann::json;
using bhttp::status;

inline reply json_text_reply(status st, std::string body) {
  reply r;
  r.res.result(st);
  r.res.set(bhttp::field::content_type, k_json_type);
  r.res.body() = std::move(body);
  r.res.prepare_payload();
  return r;
}

inline reply json_reply(status st, const json& body) {
  return json_text_reply(st, dump(body));
}

// No Content-Length either: RFC 9110 forbids it on 204.
inline reply no_content() {
  reply r;
  r.res.result(status::no_content);
  return r;
}

inline reply ndjson_reply(std::string body) {
  reply r;
  r.res.result(status::ok);
  r.res.set(bhttp::field::content_type, k_ndjson_type);
  r.res.body() = std::move(body);
  r.res.prepare_payload();
  return r;
}

// Runs fn on every shard, one after another, and joins the answers in
// shard order (the routes without a topic: the topic list, /metrics).
// per_shard: if given, how many answers each shard gave. In a cluster, a
// node that leads every shard answers fresh; one that does not forwards
// the request to a leader (the first shard's it does not lead), whose
// answer (fresh: false there, the request being forwarded) is every shard
// as that node applied it. fresh: false also for /metrics (this node's).
// A shard this node holds no replica of (a cluster's placement put it on
// other nodes) is skipped: it gives nothing, or `filler` when given (one
// answer per shard expected).
template <class T>
asio::awaitable<result<std::vector<T>>> gather(shard_set& shards, bool fresh,
                                               std::function<result<std::vector<T>>(broker&)> fn,
                                               std::vector<std::size_t>* per_shard = nullptr,
                                               const T* filler = nullptr) {
  std::vector<T> all;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (!shards.at(i).held()) {
      if (per_shard != nullptr) per_shard->push_back(filler != nullptr ? 1 : 0);
      if (filler != nullptr) all.push_back(*filler);
      continue;
    }
    auto op = async_query<std::vector<T>>(shards.at(i), fresh, fn, asio::use_awaitable);
    auto r = co_await std::move(op);
    // A shard led elsewhere: the router forwards the request to its leader.
    if (!r.ok()) co_return std::move(r).err();
    if (per_shard != nullptr) per_shard->push_back(r->size());
    std::move(r->begin(), r->end(), std::back_inserter(all));
  }
  co_return all;
}

// Runs fn on ex: at once when this thread runs ex; else it crosses, through
// the loop's mailbox when ex is a plain io_context's (a session's loop),
// or by asio::dispatch (a strand, a test's executor).
template <class F>
void run_on(const asio::any_io_executor& ex, F&& fn) {
  const auto* loop = ex.target<asio::io_context::executor_type>();
  if (loop == nullptr) {
    asio::dispatch(ex, std::forward<F>(fn));
  } else if (loop->running_in_this_thread()) {
    std::forward<F>(fn)();
  } else {
    mailbox::of(asio::query(*loop, asio::execution::context)).push(std::forward<F>(fn));
  }
}

// Unknown topic on produce/consume is 400 by the spec (the topic is a
// parameter there, not the resource); on a topic URL or ack it stays 404.
inline error topic_param_error(error e) {
  if (e.code == errc::not_found) e.code = errc::invalid_argument;
  return e;
}

}  // namespace detail

template <class R, class Render>
std::function<void(R)> router::answer_with(pending_ptr p, Render render) {
  return [this, p = std::move(p), render = std::move(render)](R r) mutable {
    auto ex = p->ex;
    // On p's loop: at once when the shard answered there, else it crosses.
    detail::run_on(
        ex, [this, p = std::move(p), render = std::move(render), r = std::move(r)]() mutable {
          reply out;
          try {
            out = render(std::move(r), p->c);
          } catch (const std::exception& e) {
            out = error_reply(
                make_error(errc::internal, fmt::format("internal error: {}", e.what())), p->c);
          }
          finish(std::move(p), std::move(out));
        });
  };
}

}  // namespace onceq::http
