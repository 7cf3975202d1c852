// The router's administration and operations routes: topics (create,
// list, get, delete), health, version, metrics, the UI and the OpenAPI
// document. Dispatch is in router.cpp, the message routes in
// router_messages.cpp.

#include <algorithm>
#include <chrono>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/async_result.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "http/codec.hpp"
#include "http/embedded.hpp"
#include "http/error_table.hpp"
#include "http/forwarder.hpp"
#include "http/metrics.hpp"
#include "http/router.hpp"
#include "http/router_internal.hpp"
#include "http/shard_ops.hpp"

namespace onceq::http {

using namespace detail;
using asio::use_awaitable;
using bhttp::status;
using json = nlohmann::json;

reply router::healthz(call&) {
  // Not through the shards' loops (stays up under backpressure); a store's
  // health never touches the disk. A fault names its shard: that shard's
  // topics answer 503, the others go on.
  std::string reason;
  json faulty = nullptr;  // built only for a fault: the healthy answer is a constant
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const storage::store_health h = shards_.at(i).storage_health();
    if (h.writable) continue;
    if (!reason.empty()) reason += "; ";
    reason += shards_.size() == 1
                  ? "storage is not writable: " + h.reason
                  : fmt::format("shard {}: storage is not writable: {}", i, h.reason);
    faulty.push_back({{"shard", i}, {"reason", h.reason}});
  }
  if (reason.empty()) return json_text_reply(status::ok, R"({"status":"ok"})");
  reply r = json_reply(status::service_unavailable,
                       {{"status", "unavailable"}, {"reason", reason}, {"shards", faulty}});
  r.res.set(bhttp::field::retry_after, "1");
  return r;
}

reply router::cluster_status(call& c) {
  if (cluster_ == nullptr) {
    return error_reply(
        make_error(errc::not_found, "this server is a single node: it runs without --cluster"), c);
  }
  return json_reply(status::ok, cluster_->status());
}

reply router::version(call&) {
  return json_reply(status::ok,
                    {{"version", opts_.version}, {"commit", opts_.commit}, {"wal_enabled", true}});
}

asio::awaitable<reply> router::create_topic(call& c) {
  auto p = read_params(c.req.body(), c.query, c.req.body().capacity());
  if (!p.ok()) co_return error_reply(p.err(), c);
  auto cmd = parse_create_topic(*p, opts_.topic_defaults);
  if (!cmd.ok()) co_return error_reply(cmd.err(), c);
  if (auto denied = deny_topic(c, cmd->name)) co_return error_reply(*denied, c);
  // The topic's shard, chosen now if it is new (a single node: the one
  // with the fewest topics; a cluster: its name's); the shard's create
  // settles the placement on its loop (shard::on_topic_change), so that
  // creates and deletes of one name are ordered there.
  shard& owner = shards_.place(cmd->name);
  c.shard = owner.id();
  // The operation is built outside the co_await (as every handler here):
  // GCC miscompiles temporaries inside a co_await's operand.
  auto r_op = async_submit(owner, std::move(*cmd), use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  co_return json_reply(status::created, to_json(*r));
}

asio::awaitable<reply> router::list_topics(call& c) {
  // Each shard's topics as its leader has them: read here when this node
  // leads the shard; else (a cluster) asked of the leader, or of a node
  // holding the shard, one request per such shard (X-Onceq-Shard). A node
  // asked that way answers only that shard, from its own state.
  const auto one = c.req[k_shard_header];
  const bool asked_by_node = !one.empty() && !c.req[k_forwarded_header].empty();
  std::vector<std::string> all;
  auto fn = [](broker& b) -> result<std::vector<std::string>> { return b.list_topics(); };
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (asked_by_node && one != std::to_string(i)) continue;
    auto r_op = async_query<std::vector<std::string>>(shards_.at(i), !asked_by_node, fn,
                                                      asio::use_awaitable);
    auto r = co_await std::move(r_op);
    if (!r.ok() && cluster_ != nullptr && !asked_by_node && r.err().code == errc::unavailable &&
        r.err().leader != 0) {
      request sub = c.req;
      sub.target("/v1/topics");
      sub.set(k_shard_header, std::to_string(i));
      auto ex = co_await asio::this_coro::executor;
      auto got =
          co_await asio::async_initiate<decltype(asio::use_awaitable), void(result<response>)>(
              [&](auto handler) {
                auto h = std::make_shared<decltype(handler)>(std::move(handler));
                forwarder_->forward(sub, c.request_id, cluster_->node_at(r.err().leader),
                                    millis{5'000}, ex,
                                    [h](result<response> res) mutable { (*h)(std::move(res)); });
              },
              asio::use_awaitable);
      if (!got.ok()) co_return error_reply(got.err(), c);
      if (got->result_int() != 200) {
        error e = make_error(errc::unavailable,
                             fmt::format("shard {}: node {} answered {}", i,
                                         cluster_->node_at(r.err().leader), got->result_int()));
        e.retry_after_ms = opts_.retry_after_ms;
        co_return error_reply(e, c);
      }
      const json body = json::parse(got->body(), nullptr, false);
      if (!body.is_object() || !body.contains("topics") || !body.at("topics").is_array()) {
        co_return error_reply(make_error(errc::unavailable, "a node answered no topic list"), c);
      }
      for (const auto& t : body.at("topics")) {
        if (t.is_string()) all.push_back(t.get<std::string>());
      }
      continue;
    }
    if (!r.ok()) {
      error e = r.err();
      e.leader = 0;  // answered here (503), not forwarded as a whole
      co_return error_reply(e, c);
    }
    std::move(r->begin(), r->end(), std::back_inserter(all));
  }
  std::sort(all.begin(), all.end());
  // A token sees the topics it covers; the list itself is no 403.
  std::erase_if(all, [&](const std::string& name) { return !c.grant.may_use(name); });
  co_return json_reply(status::ok, {{"topics", all}});
}

asio::awaitable<reply> router::get_topic(call& c) {
  if (auto denied = deny_topic(c, c.captures.at(0))) co_return error_reply(*denied, c);
  const std::string& name = c.captures.at(0);
  auto r_op = async_execute<topic_info>(
      route(c, name), [name](broker& b) { return b.get_topic(name); }, use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  co_return json_reply(status::ok, to_json(*r));
}

asio::awaitable<reply> router::delete_topic(call& c) {
  if (auto denied = deny_topic(c, c.captures.at(0))) co_return error_reply(*denied, c);
  const std::string& name = c.captures.at(0);
  // The shard settles the placement of the topic and its DLQ.
  delete_topic_cmd cmd{name};
  auto r_op = async_submit(route(c, name), std::move(cmd), use_awaitable);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  co_return no_content();
}

asio::awaitable<reply> router::prometheus(call& c) {
  std::vector<std::size_t> topics;  // per shard, DLQs included
  auto r_op = gather<topic_info>(
      shards_, false, [](broker& b) -> result<std::vector<topic_info>> { return b.metrics(); },
      &topics);
  auto r = co_await std::move(r_op);
  if (!r.ok()) co_return error_reply(r.err(), c);
  // Each shard's outbox (workflow steps): one entry per shard, in order.
  const outbox_stats none{};
  auto o_op = gather<outbox_stats>(
      shards_, false,
      [](broker& b) -> result<std::vector<outbox_stats>> {
        return std::vector{b.outbox_metrics()};
      },
      nullptr, &none);
  auto outboxes = co_await std::move(o_op);
  if (!outboxes.ok()) co_return error_reply(outboxes.err(), c);
  reply out;
  out.res.result(status::ok);
  out.res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  std::string& body = out.res.body();
  render_broker_metrics(body, *r, clock_.now_ms());
  body +=
      "# HELP onceq_runner_queue_depth Commands waiting for a shard's loop, all shards.\n"
      "# TYPE onceq_runner_queue_depth gauge\n";
  body += fmt::format("onceq_runner_queue_depth {}\n", shards_.queue_depth());
  std::vector<shard_gauges> gauges;
  storage::store_health all{true, {}};
  std::optional<storage::sync_stats> wal;
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const shard& s = shards_.at(i);
    const auto ob = i < outboxes->size() ? (*outboxes)[i] : outbox_stats{};
    const auto now = clock_.now_ms();
    const loop_load::reading load = s.load().read(std::chrono::steady_clock::now());
    gauges.push_back({s.id(), s.storage_health(), s.queue_depth(), topics[i], s.iterations(),
                      s.write_stalls(), s.disk_reads(), s.loop_disk_reads(), ob.depth,
                      ob.oldest_created_at_ms == 0 || ob.oldest_created_at_ms > now
                          ? 0.0
                          : static_cast<double>(now - ob.oldest_created_at_ms) / 1000.0,
                      load.busy, load.waiting});
    if (!gauges.back().health.writable) all = gauges.back().health;
    // Omitted for a store without a WAL (the in-memory store of the tests).
    if (auto w = s.wal_sync_stats()) {
      if (!wal) wal.emplace();
      storage::add(*wal, *w);
    }
  }
  render_storage_metrics(body, all);
  render_shard_metrics(body, gauges);
  if (cluster_ != nullptr) cluster_->render_metrics(body);
  if (wal) render_wal_sync_metrics(body, *wal);
  if (auth_ != nullptr) auth_->render_metrics(body);
  metrics_->render(body);
  out.res.prepare_payload();
  co_return out;
}

asio::awaitable<reply> router::ui(call&) {
  reply r;
  r.res.result(status::ok);
  r.res.set(bhttp::field::content_type, "text/html; charset=utf-8");
  r.res.set(bhttp::field::cache_control, "no-cache");
  r.res.set("Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'");
  r.res.set("X-Content-Type-Options", "nosniff");
  r.res.set("Referrer-Policy", "no-referrer");
  r.res.body() = std::string(ui_page());
  r.res.prepare_payload();
  co_return r;
}

asio::awaitable<reply> router::openapi(call&) {
  reply r = json_text_reply(status::ok, std::string(openapi_document()));
  r.res.set(bhttp::field::cache_control, "no-cache");
  co_return r;
}

}  // namespace onceq::http
