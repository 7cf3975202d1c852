#pragma once

// tcp_transport: raft_uv's own TCP transport (raft_uv_tcp_init), decorated
// so that every connection it hands to raft has TCP_NODELAY.
//
// raft 0.15 opens its sockets with Nagle's algorithm on: an append queued
// behind one the peer had not acknowledged yet waited for the peer's
// delayed ACK, 40 ms, which was the p99 of a loaded group
// (docs/BENCHMARKS.md, "Replication: one Raft group alone"). raft's public
// transport interface (struct raft_uv_transport, raft/uv.h) hands every
// connection to raft_uv through two callbacks: the accept callback (a peer
// dialled us and sent its handshake) and the connect request's callback
// (our dial and handshake completed). This transport forwards init, listen,
// connect and close to the TCP one and sets TCP_NODELAY on the stream in
// both callbacks, before raft_uv writes its first message on it.
//
// Threading: the libuv loop's thread only, like raft_uv. Not movable: raft
// keeps pointers to it between init and close.

#include <uv.h>

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

namespace onceq::cluster {

class tcp_transport {
 public:
  tcp_transport() = default;
  tcp_transport(const tcp_transport&) = delete;
  tcp_transport& operator=(const tcp_transport&) = delete;

  // raft_uv_tcp_init; on success get() is ready for raft_uv_init. Returns
  // raft's error code; errmsg() has its message.
  int init(uv_loop_t* loop);
  // raft_uv_tcp_close: frees the TCP transport's memory, once raft_uv has
  // closed it (after raft_uv_close, as raft's own order requires).
  void release();

  // What raft_uv_init gets.
  struct raft_uv_transport* get() noexcept {
    return &outer_;
  }
  const char* errmsg() const noexcept { return tcp_.errmsg; }

 private:
  static int on_init(struct raft_uv_transport* t, raft_id id, const char* address);
  static int on_listen(struct raft_uv_transport* t, raft_uv_accept_cb cb);
  static int on_connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id,
                        const char* address, raft_uv_connect_cb cb);
  static void on_close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb);
  static void accepted(struct raft_uv_transport* tcp, raft_id id, const char* address,
                       struct uv_stream_s* stream);
  static void connected(struct raft_uv_connect* req, struct uv_stream_s* stream, int status);
  static void closed(struct raft_uv_transport* tcp);
  static tcp_transport* of(struct raft_uv_transport* outer) {
    return static_cast<tcp_transport*>(outer->impl);
  }
  // The TCP transport's result, with its message copied where raft_uv reads it.
  int forward(int rv);

  struct raft_uv_transport outer_ {};  // ours; raft_uv owns its data field
  struct raft_uv_transport tcp_ {};    // raft_uv_tcp_init's; its data field points here
  raft_uv_accept_cb accept_cb_ = nullptr;
  raft_uv_transport_close_cb close_cb_ = nullptr;
  bool tcp_ready_ = false;
};

}  // namespace onceq::cluster
