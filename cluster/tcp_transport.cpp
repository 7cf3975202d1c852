#include "cluster/tcp_transport.hpp"

#include <cstring>

namespace onceq::cluster {

namespace {

void set_nodelay(struct uv_stream_s* stream) {
  if (stream != nullptr && stream->type == UV_TCP) {
    // Swallowed: Nagle's algorithm on is slow, not wrong.
    (void)uv_tcp_nodelay(reinterpret_cast<uv_tcp_t*>(stream), 1);
  }
}

// One dial in flight: raft_uv's request and callback, and the request the
// TCP transport gets (freed by its callback, which the TCP transport fires
// exactly once: connected, failed, or cancelled by close).
struct dial {
  struct raft_uv_connect tcp_req {};
  struct raft_uv_connect* req = nullptr;
  raft_uv_connect_cb cb = nullptr;
};

}  // namespace

int tcp_transport::init(uv_loop_t* loop) {
  // A transport released by a group that closed may be set up again.
  tcp_ = {};
  outer_ = {};
  accept_cb_ = nullptr;
  close_cb_ = nullptr;
  const int rv = raft_uv_tcp_init(&tcp_, loop);
  if (rv != 0) return rv;
  tcp_ready_ = true;
  tcp_.data = this;
  outer_.impl = this;
  outer_.init = &on_init;
  outer_.listen = &on_listen;
  outer_.connect = &on_connect;
  outer_.close = &on_close;
  return 0;
}

void tcp_transport::release() {
  if (tcp_ready_) raft_uv_tcp_close(&tcp_);
  tcp_ready_ = false;
}

int tcp_transport::forward(int rv) {
  if (rv != 0) std::memcpy(outer_.errmsg, tcp_.errmsg, sizeof outer_.errmsg);
  return rv;
}

int tcp_transport::on_init(struct raft_uv_transport* t, raft_id id, const char* address) {
  auto* self = of(t);
  return self->forward(self->tcp_.init(&self->tcp_, id, address));
}

int tcp_transport::on_listen(struct raft_uv_transport* t, raft_uv_accept_cb cb) {
  auto* self = of(t);
  self->accept_cb_ = cb;
  return self->forward(self->tcp_.listen(&self->tcp_, &accepted));
}

void tcp_transport::accepted(struct raft_uv_transport* tcp, raft_id id, const char* address,
                             struct uv_stream_s* stream) {
  auto* self = static_cast<tcp_transport*>(tcp->data);
  set_nodelay(stream);
  self->accept_cb_(&self->outer_, id, address, stream);
}

int tcp_transport::on_connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id,
                              const char* address, raft_uv_connect_cb cb) {
  auto* self = of(t);
  auto* d = new dial{};
  d->tcp_req.data = d;
  d->req = req;
  d->cb = cb;
  req->cb = cb;
  const int rv = self->tcp_.connect(&self->tcp_, &d->tcp_req, id, address, &connected);
  if (rv != 0) delete d;
  return self->forward(rv);
}

void tcp_transport::connected(struct raft_uv_connect* tcp_req, struct uv_stream_s* stream,
                              int status) {
  // Not a word about the transport here: a dial cancelled by close is
  // answered after the transport may be gone.
  auto* d = static_cast<dial*>(tcp_req->data);
  struct raft_uv_connect* req = d->req;
  const raft_uv_connect_cb cb = d->cb;
  delete d;
  if (status == 0) set_nodelay(stream);
  cb(req, stream, status);
}

void tcp_transport::on_close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb) {
  auto* self = of(t);
  self->close_cb_ = cb;
  self->tcp_.close(&self->tcp_, &closed);
}

void tcp_transport::closed(struct raft_uv_transport* tcp) {
  auto* self = static_cast<tcp_transport*>(tcp->data);
  if (self->close_cb_ != nullptr) self->close_cb_(&self->outer_);
}

}  // namespace onceq::cluster
