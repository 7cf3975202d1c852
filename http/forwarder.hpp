#pragma once

// forwarder: sends a request that another node of the cluster must answer
// (the leader of the request's shard) there, and hands back its answer to
// relay (docs/API.md, "Clusters"). One hop: the request carries
// X-Onceq-Forwarded (this node's id), and a node that receives a forwarded
// request it cannot answer itself answers 503 instead of forwarding again.
//
// Connections to each node are kept alive and reused, one pool per thread
// (each loop keeps its own, so a pool is never shared); a connection idle
// longer than k_pool_idle is closed rather than reused, well before the
// peer's idle timeout would close it under a request. A request is sent
// once: a failure (connect, write, read, timeout) answers 503 UNAVAILABLE
// with Retry-After, never a second send whose first may have been applied.
//
// Thread safety: forward() may be called from any thread; done runs on ex.

#include <functional>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "base/clock.hpp"
#include "base/result.hpp"
#include "http/cluster_view.hpp"
#include "http/message.hpp"

namespace onceq::http {

inline constexpr std::string_view k_node_header = "X-Onceq-Node";
inline constexpr std::string_view k_forwarded_header = "X-Onceq-Forwarded";
// Routes only a cluster's own nodes call (the outbox hand-over), and the
// header in which the session gives them the peer's address.
inline constexpr std::string_view k_internal_prefix = "/v1/internal/";
inline constexpr std::string_view k_peer_header = "X-Onceq-Peer";
// GET /v1/topics between nodes: the one shard whose topics the asking node
// wants (it holds no fresh copy of that shard).
inline constexpr std::string_view k_shard_header = "X-Onceq-Shard";

class forwarder {
 public:
  // cluster outlives the forwarder.
  explicit forwarder(const cluster_view& cluster);

  // Sends req (with request_id as its X-Request-Id, so that both nodes log
  // one id) to node's API and calls done(its response) on ex, or
  // done(errc::unavailable) when the node cannot be reached or did not
  // answer in time.
  // timeout_ms bounds the exchange once connected.
  void forward(const request& req, std::string_view request_id, std::string node, millis timeout_ms,
               boost::asio::any_io_executor ex, std::function<void(result<response>)> done);

 private:
  const cluster_view& cluster_;
};

}  // namespace onceq::http
