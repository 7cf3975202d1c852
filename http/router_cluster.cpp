// The router's cluster placement routes (docs/API.md, "Clusters"): a
// drain, a rebalance, and other nodes' entries for the meta group.

#include <charconv>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>

#include <nlohmann/json.hpp>

#include "http/forwarder.hpp"
#include "http/router.hpp"
#include "http/router_internal.hpp"

namespace onceq::http {

using namespace detail;
using bhttp::status;
using json = nlohmann::json;

namespace {
constexpr std::string_view k_single = "this server is a single node: it runs without --cluster";
}  // namespace

bool router::from_member(const call& c) const {
  // From a member (by name) on one of the cluster's hosts (by the peer's
  // address, which the session sets): loopback, or a node's API host.
  const auto from = c.req[k_forwarded_header];
  const std::string peer(c.req[k_peer_header]);
  boost::system::error_code bad;
  const auto addr = boost::asio::ip::make_address(peer, bad);
  bool known_host = !bad && addr.is_loopback();
  for (unsigned n = 1; !known_host && n <= 64; ++n) {
    const std::string id = cluster_->node_at(n);
    if (id.empty()) break;
    if (auto at = cluster_->http_of(id); at && at->host == peer) known_host = true;
  }
  return !from.empty() && cluster_->http_of(from) && known_host;
}

void router::fail(pending_ptr p, const error& e) {
  auto out = error_reply(e, p->c);
  finish(std::move(p), std::move(out));
}

// Runs a meta request and finishes p on its executor: 202 with body, or
// the error (another node leads the meta group: forwarded there).
void router::meta_answer(pending_ptr p, status ok_status, std::string body,
                         const std::function<void(std::function<void(result<void>)>)>& start) {
  start([this, p = std::move(p), ok_status, body = std::move(body)](result<void> r) mutable {
    auto ex = p->ex;
    asio::post(ex, [this, p = std::move(p), ok_status, body = std::move(body),
                    r = std::move(r)]() mutable {
      if (!r.ok()) {
        auto out = error_reply(r.err(), p->c);
        return finish(std::move(p), std::move(out));
      }
      finish(std::move(p),
             body.empty() ? no_content() : json_text_reply(ok_status, std::move(body)));
    });
  });
}

void router::cluster_drain(pending_ptr p) {
  if (cluster_ == nullptr)
    return fail(std::move(p), make_error(errc::not_found, std::string(k_single)));
  const std::string node = p->c.captures.at(0);
  std::string body = dump(json{{"node", node}, {"state", "draining"}});
  meta_answer(std::move(p), status::accepted, std::move(body),
              [this, node](std::function<void(result<void>)> done) {
                cluster_->drain(node, std::move(done));
              });
}

void router::cluster_rebalance(pending_ptr p) {
  if (cluster_ == nullptr)
    return fail(std::move(p), make_error(errc::not_found, std::string(k_single)));
  std::string body = dump(json{{"status", "rebalancing"}});
  meta_answer(
      std::move(p), status::accepted, std::move(body),
      [this](std::function<void(result<void>)> done) { cluster_->rebalance(std::move(done)); });
}

void router::cluster_move(pending_ptr p) {
  if (cluster_ == nullptr)
    return fail(std::move(p), make_error(errc::not_found, std::string(k_single)));
  const std::string& shard_text = p->c.captures.at(0);
  std::uint32_t shard = 0;
  const auto* end = shard_text.data() + shard_text.size();
  if (auto [at, ec] = std::from_chars(shard_text.data(), end, shard);
      ec != std::errc{} || at != end) {
    return fail(std::move(p),
                make_error(errc::invalid_argument,
                           fmt::format("shard: expected a number, got \"{}\"", shard_text)));
  }
  const json body = json::parse(p->c.req.body(), nullptr, false);
  auto field = [&](const char* k) -> std::optional<std::string> {
    if (!body.is_object() || !body.contains(k) || !body.at(k).is_string()) return std::nullopt;
    return body.at(k).get<std::string>();
  };
  const auto from = field("from");
  const auto to = field("to");
  if (!from || !to || body.size() != 2) {
    return fail(std::move(p), make_error(errc::invalid_argument,
                                         "body: expected {\"from\":\"<node>\",\"to\":\"<node>\"}"));
  }
  std::string answer =
      dump(json{{"shard", shard}, {"from", *from}, {"to", *to}, {"state", "adding"}});
  meta_answer(std::move(p), status::accepted, std::move(answer),
              [this, shard, from = *from, to = *to](std::function<void(result<void>)> done) {
                cluster_->move_shard(shard, from, to, std::move(done));
              });
}

void router::meta_in(pending_ptr p) {
  if (cluster_ == nullptr)
    return fail(std::move(p), make_error(errc::not_found, std::string(k_single)));
  if (!from_member(p->c))
    return fail(std::move(p), make_error(errc::permission_denied,
                                         "only a node of this cluster proposes placement changes"));
  std::string entry = p->c.req.body();
  meta_answer(std::move(p), status::no_content, {},
              [this, entry = std::move(entry)](std::function<void(result<void>)> done) mutable {
                cluster_->meta_submit(std::move(entry), std::move(done));
              });
}

}  // namespace onceq::http
