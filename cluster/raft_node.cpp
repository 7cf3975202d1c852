#include "cluster/raft_node.hpp"

#include <pthread.h>
#include <signal.h>
#include <uv.h>

// raft 0.15's headers declare C functions without extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "storage/base/log.hpp"

namespace onceq::cluster {

std::string_view to_string(raft_errc code) noexcept {
  switch (code) {
    case raft_errc::ok:
      return "ok";
    case raft_errc::not_leader:
      return "not_leader";
    case raft_errc::leadership_lost:
      return "leadership_lost";
    case raft_errc::shutting_down:
      return "shutting_down";
    case raft_errc::failed:
      return "failed";
  }
  return "failed";
}

namespace {

constexpr std::string_view k_log = "cluster";

op_result fail(raft_errc code, std::string message, std::string leader = {}) {
  op_result r;
  r.code = code;
  r.leader = std::move(leader);
  r.message = std::move(message);
  return r;
}

// Runs a caller's callback. They run inside raft's C callbacks, which an
// exception must not cross: one is logged and dropped.
void deliver(op_cb& cb, op_result r) noexcept {
  if (!cb) return;
  try {
    cb(std::move(r));
  } catch (const std::exception& e) {
    log(log_level::error, k_log, "a raft_node callback threw; ignored", {{"error", e.what()}});
  } catch (...) {
    log(log_level::error, k_log, "a raft_node callback threw; ignored");
  }
}

raft_errc code_of(int rv) {
  switch (rv) {
    case RAFT_NOTLEADER:
      return raft_errc::not_leader;
    case RAFT_LEADERSHIPLOST:
      return raft_errc::leadership_lost;
    case RAFT_SHUTDOWN:
      return raft_errc::shutting_down;
    default:
      return raft_errc::failed;
  }
}

// What one published status holds; copied out by status().
struct published {
  ::raft_id leader = 0;
  bool is_leader = false, leader_ready = false;
  std::uint64_t term = 0, commit_index = 0, last_applied = 0, last_index = 0;
  std::uint64_t proposals = 0, apply_calls = 0, restores = 0;
  std::string failure;
};

// Raft 0.15 needs every entry to be a multiple of 8 bytes: its decoder
// (network and disk) steps over padding to the next multiple of 8 that its
// encoder does not write, so shorter entries would run into each other. An
// entry therefore goes to raft padded with 1..8 bytes, each holding the
// pad's length (PKCS#7's rule), and apply() strips them.
std::size_t padded_size(std::size_t n) {
  return (n / 8 + 1) * 8;
}

std::optional<std::string_view> unpad(const struct raft_buffer& buf) {
  if (buf.len == 0 || buf.len % 8 != 0) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(buf.base);
  const std::size_t pad = p[buf.len - 1];
  if (pad == 0 || pad > 8) return std::nullopt;
  for (std::size_t i = buf.len - pad; i < buf.len; ++i) {
    if (p[i] != pad) return std::nullopt;
  }
  return std::string_view(reinterpret_cast<const char*>(p), buf.len - pad);
}

struct proposal {
  std::string entry;
  op_cb cb;
};

}  // namespace

class raft_node::impl {
 public:
  struct group;

  // One raft_apply call: n entries appended at first .. first + n - 1 in
  // term `term`. Raft calls back once, for the first entry (0.15 keys a
  // request by its first index), so each entry's reply is matched here, in
  // fsm_apply, by index, while this node still leads in `term` (a leader
  // never rewrites its own log within its term).
  struct batch {
    struct raft_apply req {};
    group* g = nullptr;
    ::raft_index first = 0;
    ::raft_term term = 0;
    std::vector<op_cb> cbs;  // null once answered
    std::size_t unresolved = 0;
    bool raft_owned = true;  // until raft has called req's callback
  };

  struct barrier_op {
    struct raft_barrier req {};
    op_cb cb;
  };

  struct transfer_op {
    struct raft_transfer req {};
    group* g = nullptr;
    op_cb cb;
    std::uint64_t deadline_ms = 0;  // when waiting for the new leader to be known gives up
  };

  struct group {
    impl* node = nullptr;
    unsigned index = 0;
    state_machine* sm = nullptr;
    std::string dir;
    std::string address;
    struct raft_uv_transport transport {};
    struct raft_io io {};
    struct raft_fsm fsm {};
    struct raft r {};
    bool transport_ready = false, io_ready = false, raft_ready = false;
    bool closing = false, closed = false;
    // In index order; the front is popped once raft and every waiter are
    // done with it.
    std::deque<batch*> inflight;
    // Transfers whose callback fired before this node knew the new leader.
    std::vector<transfer_op*> settling;
    std::string failure;
    std::uint64_t next_shed_ms = 0;  // a failed leader's next attempt to hand over
    // The term whose opening barrier was sent, and the term whose opening
    // barrier this node applied while leading it (leader_ready).
    ::raft_term barrier_term = 0, ready_term = 0;
    std::uint64_t proposals = 0, apply_calls = 0, restores = 0;
    std::vector<struct raft_buffer> bufs;  // scratch for raft_apply
  };

  impl(cluster_config cfg, raft_node_options opts, std::vector<state_machine*> machines)
      : cfg_(std::move(cfg)), opts_(std::move(opts)) {
    queued_.resize(opts_.groups);
    drain_queued_.resize(opts_.groups);
    published_.resize(opts_.groups);
    for (unsigned i = 0; i < opts_.groups; ++i) {
      auto g = std::make_unique<group>();
      g->node = this;
      g->index = i;
      g->sm = machines[i];
      g->dir = (std::filesystem::path(opts_.data_dir) / "raft" / std::to_string(i)).string();
      g->address = cfg_.raft_address(cfg_.self(), i);
      groups_.push_back(std::move(g));
    }
  }

  ~impl() { stop(); }

  const cluster_config& config() const noexcept { return cfg_; }
  unsigned groups() const noexcept { return opts_.groups; }

  // ---- Start and stop (caller's thread) ----

  result<void> init() {
    if (int rv = uv_loop_init(&loop_); rv != 0) {
      return make_error(errc::unavailable, fmt::format("uv_loop_init: {}", uv_strerror(rv)));
    }
    loop_ready_ = true;
    async_.data = this;
    check_.data = this;
    if (int rv = uv_async_init(&loop_, &async_, &impl::on_async); rv != 0) {
      auto e = make_error(errc::unavailable, fmt::format("uv_async_init: {}", uv_strerror(rv)));
      shutdown_inline();
      return e;
    }
    async_ready_ = true;
    uv_check_init(&loop_, &check_);
    uv_check_start(&check_, &impl::on_check);
    check_ready_ = true;
    for (auto& g : groups_) {
      if (auto r = init_group(*g); !r.ok()) {
        shutdown_inline();
        return std::move(r).err();
      }
    }
    publish();
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
      shutdown_inline();
      return make_error(errc::unavailable, fmt::format("raft loop thread: {}", e.what()));
    }
    return {};
  }

  void stop() {
    std::lock_guard stop_lock(stop_mu_);
    if (finalized_) return;
    if (thread_.joinable()) {
      if (std::this_thread::get_id() == thread_.get_id()) {
        log(log_level::error, k_log,
            "raft_node::stop called on the raft loop thread (from a callback): cannot join "
            "itself");
        std::terminate();
      }
      {
        std::lock_guard lock(mu_);
        accepting_ = false;
        stop_requested_ = true;
        uv_async_send(&async_);
      }
      thread_.join();
    }
    finalize();
  }

  // ---- Public operations (any thread) ----

  result<void> propose(unsigned g, std::string entry, op_cb cb) {
    if (g >= groups_.size()) return no_group(g);
    if (entry.empty()) {
      return make_error(errc::invalid_argument, "an entry needs at least one byte");
    }
    if (entry.size() > opts_.max_entry_bytes) {
      return make_error(errc::invalid_argument, fmt::format("entry of {} bytes; at most {}",
                                                            entry.size(), opts_.max_entry_bytes));
    }
    std::lock_guard lock(mu_);
    if (!accepting_) return stopped();
    auto& q = queued_[g];
    if (q.size() >= opts_.max_queued) {
      auto e = make_error(errc::resource_exhausted,
                          fmt::format("group {}: {} proposals queued", g, q.size()));
      e.retry_after_ms = 10;
      return e;
    }
    if (q.empty()) dirty_.push_back(g);
    q.push_back(proposal{std::move(entry), std::move(cb)});
    wake();
    return {};
  }

  result<void> post(std::function<void()> task) {
    std::lock_guard lock(mu_);
    if (!accepting_) return stopped();
    tasks_.push_back(std::move(task));
    wake();
    return {};
  }

  result<void> barrier(unsigned g, op_cb cb) {
    if (g >= groups_.size()) return no_group(g);
    group* gp = groups_[g].get();
    return post([this, gp, cb = std::move(cb)]() mutable { start_barrier(*gp, std::move(cb)); });
  }

  result<void> transfer(unsigned g, std::string_view to_node, op_cb cb) {
    if (g >= groups_.size()) return no_group(g);
    ::raft_id target = 0;
    if (!to_node.empty()) {
      auto id = cfg_.raft_id_of(to_node);
      if (!id) {
        return make_error(errc::invalid_argument,
                          fmt::format("no node \"{}\" in the cluster file", to_node));
      }
      target = *id;
    }
    group* gp = groups_[g].get();
    return post([this, gp, target, cb = std::move(cb)]() mutable {
      start_transfer(*gp, target, std::move(cb));
    });
  }

  result<void> rebalance() {
    return post([this] {
      for (auto& g : groups_) {
        const ::raft_id to = cfg_.preferred_leader(g->index);
        if (g->closing || raft_state(&g->r) != RAFT_LEADER || to == cfg_.self_raft_id() ||
            g->r.transfer != nullptr) {
          continue;
        }
        const unsigned index = g->index;
        start_transfer(*g, to, [index](op_result r) {
          if (!r.ok()) {
            log(log_level::info, k_log, "rebalance: transfer did not happen",
                {log_number("group", index), {"reason", r.message}});
          }
        });
      }
    });
  }

  result<group_status> status(unsigned g) const {
    if (g >= groups_.size()) return no_group(g);
    published p;
    {
      std::lock_guard lock(status_mu_);
      p = published_[g];
    }
    group_status s;
    if (const node_config* n = cfg_.node_of(p.leader)) s.leader = n->id;
    s.is_leader = p.is_leader;
    s.leader_ready = p.leader_ready;
    s.term = p.term;
    s.commit_index = p.commit_index;
    s.last_applied = p.last_applied;
    s.last_index = p.last_index;
    s.proposals = p.proposals;
    s.apply_calls = p.apply_calls;
    s.snapshots_restored = p.restores;
    s.failure = std::move(p.failure);
    return s;
  }

 private:
  static error no_group(unsigned g) {
    return make_error(errc::invalid_argument, fmt::format("no group {}", g));
  }
  static error stopped() { return make_error(errc::unavailable, "the raft node is stopped"); }

  // mu_ held. uv_async_send runs under mu_ so that stop() cannot close the
  // handle between the check of accepting_ and the send.
  void wake() {
    if (wake_pending_) return;
    wake_pending_ = true;
    uv_async_send(&async_);
  }

  result<void> init_group(group& g) {
    std::error_code ec;
    std::filesystem::create_directories(g.dir, ec);
    if (ec) {
      return make_error(errc::unavailable, fmt::format("{}: {}", g.dir, ec.message()));
    }
    auto raft_error = [&](std::string_view what, int rv, const char* msg) {
      return make_error(errc::unavailable,
                        fmt::format("group {} ({}, raft {}): {}: {}", g.index, g.dir, g.address,
                                    what, msg != nullptr && *msg != 0 ? msg : raft_strerror(rv)));
    };
    int rv = raft_uv_tcp_init(&g.transport, &loop_);
    if (rv != 0) return raft_error("raft_uv_tcp_init", rv, g.transport.errmsg);
    g.transport_ready = true;
    rv = raft_uv_init(&g.io, &loop_, g.dir.c_str(), &g.transport);
    if (rv != 0) return raft_error("raft_uv_init", rv, g.io.errmsg);
    g.io_ready = true;
    raft_uv_set_connect_retry_delay(&g.io, opts_.connect_retry_delay_ms);

    g.fsm.version = 1;
    g.fsm.data = &g;
    g.fsm.apply = &impl::fsm_apply;
    g.fsm.snapshot = &impl::fsm_snapshot;
    g.fsm.restore = &impl::fsm_restore;
    g.fsm.snapshot_finalize = nullptr;
    g.fsm.snapshot_async = nullptr;

    rv = raft_init(&g.r, &g.io, &g.fsm, cfg_.self_raft_id(), g.address.c_str());
    if (rv != 0) return raft_error("raft_init", rv, g.r.errmsg);
    g.raft_ready = true;
    g.r.data = &g;
    raft_set_election_timeout(&g.r, opts_.election_timeout_ms);
    raft_set_heartbeat_timeout(&g.r, opts_.heartbeat_timeout_ms);
    raft_set_snapshot_threshold(&g.r, opts_.snapshot_threshold);
    raft_set_snapshot_trailing(&g.r, opts_.snapshot_trailing);
    raft_set_pre_vote(&g.r, opts_.pre_vote);

    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (std::size_t i = 0; i < cfg_.nodes().size(); ++i) {
      const std::string addr = cfg_.raft_address(cfg_.nodes()[i], g.index);
      rv = raft_configuration_add(&conf, static_cast<::raft_id>(i + 1), addr.c_str(), RAFT_VOTER);
      if (rv != 0) {
        raft_configuration_close(&conf);
        return raft_error("raft_configuration_add", rv, nullptr);
      }
    }
    // Only a pristine directory takes the configuration; on a restart the
    // log already holds it and raft answers RAFT_CANTBOOTSTRAP.
    rv = raft_bootstrap(&g.r, &conf);
    raft_configuration_close(&conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) return raft_error("raft_bootstrap", rv, g.r.errmsg);
    rv = raft_start(&g.r);
    if (rv != 0) return raft_error("raft_start", rv, g.r.errmsg);
    return {};
  }

  // The loop thread: SIGPIPE is blocked here because libuv writes to
  // sockets with write(2) (a peer that went away would otherwise kill the
  // process); EPIPE is then an ordinary error for raft_uv.
  void run() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    pthread_setname_np(pthread_self(), "onceq-raft");
    uv_run(&loop_, UV_RUN_DEFAULT);
  }

  // Starts the close of everything on the loop: raft_close of every group
  // (raft answers its pending requests), the wake-up and check handles.
  // The loop ends when the last close completes.
  void begin_close() {
    if (closing_all_) return;
    closing_all_ = true;
    for (auto& g : groups_) {
      g->closing = true;
      if (g->raft_ready) {
        raft_close(&g->r, &impl::on_raft_closed);
      } else {
        g->closed = true;
      }
    }
    if (async_ready_) uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
    if (check_ready_) uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
  }

  // A failed start: close on the caller's thread (the loop thread never ran).
  void shutdown_inline() {
    begin_close();
    if (loop_ready_) uv_run(&loop_, UV_RUN_DEFAULT);
    finalize();
  }

  // After the loop has ended: release raft_uv's memory and the loop.
  void finalize() {
    if (finalized_) return;
    finalized_ = true;
    for (auto& g : groups_) {
      release_all(*g);
      if (g->io_ready) raft_uv_close(&g->io);
      if (g->transport_ready) raft_uv_tcp_close(&g->transport);
      g->io_ready = g->transport_ready = false;
    }
    if (loop_ready_) {
      if (int rv = uv_loop_close(&loop_); rv != 0) {
        log(log_level::warn, k_log, "uv_loop_close", {{"error", uv_strerror(rv)}});
      }
      loop_ready_ = false;
    }
  }

  static void on_raft_closed(struct raft* r) {
    auto* g = static_cast<group*>(r->data);
    g->closed = true;
    g->node->release_all(*g);
  }

  // Raft is done with g: whatever it still held is answered and freed.
  void release_all(group& g) {
    std::vector<op_cb> cbs;
    for (batch* b : g.inflight) {
      for (auto& cb : b->cbs) {
        if (cb) cbs.push_back(std::move(cb));
      }
      delete b;
    }
    g.inflight.clear();
    std::vector<transfer_op*> settling = std::move(g.settling);
    g.settling.clear();
    for (transfer_op* t : settling) {
      cbs.push_back(std::move(t->cb));
      delete t;
    }
    for (auto& cb : cbs) deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
  }

  // ---- The loop: wake-ups ----

  static void on_async(uv_async_t* h) { static_cast<impl*>(h->data)->drain(); }

  void drain() {
    bool stopping = false;
    {
      std::lock_guard lock(mu_);
      wake_pending_ = false;
      drain_dirty_.swap(dirty_);
      for (unsigned g : drain_dirty_) drain_queued_[g].swap(queued_[g]);
      drain_tasks_.swap(tasks_);
      stopping = stop_requested_;
    }
    if (stopping) {
      for (auto& g : groups_) g->closing = true;
    }
    for (unsigned g : drain_dirty_) {
      submit(*groups_[g], drain_queued_[g]);
      drain_queued_[g].clear();
    }
    drain_dirty_.clear();
    for (auto& task : drain_tasks_) task();
    drain_tasks_.clear();
    if (stopping) begin_close();
  }

  // The group commit: everything queued for g goes to raft in as few
  // raft_apply calls as the batch limits allow (one, usually).
  void submit(group& g, std::vector<proposal>& q) {
    if (q.empty()) return;
    if (g.closing) {
      for (auto& p : q) deliver(p.cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
      return;
    }
    if (raft_state(&g.r) != RAFT_LEADER || g.r.transfer != nullptr) {
      const std::string leader = g.r.transfer != nullptr ? std::string() : leader_name(g);
      const std::string why =
          g.r.transfer != nullptr
              ? fmt::format("group {}: leadership is being transferred", g.index)
              : fmt::format("group {}: this node is not the leader", g.index);
      for (auto& p : q) deliver(p.cb, fail(raft_errc::not_leader, why, leader));
      return;
    }
    if (!g.failure.empty()) {
      for (auto& p : q) deliver(p.cb, fail(raft_errc::failed, failed_why(g)));
      return;
    }
    std::size_t i = 0;
    while (i < q.size()) {
      std::size_t j = i;
      std::size_t bytes = 0;
      while (j < q.size() && j - i < opts_.max_batch_entries &&
             (j == i || bytes + q[j].entry.size() <= opts_.max_batch_bytes)) {
        bytes += q[j].entry.size();
        ++j;
      }
      apply_batch(g, q, i, j);
      i = j;
    }
  }

  void apply_batch(group& g, std::vector<proposal>& q, std::size_t from, std::size_t to) {
    const std::size_t n = to - from;
    g.bufs.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      const std::string& e = q[from + k].entry;
      const std::size_t padded = padded_size(e.size());
      auto* base = static_cast<unsigned char*>(raft_malloc(padded));
      if (base == nullptr) {
        for (std::size_t m = 0; m < k; ++m) raft_free(g.bufs[m].base);
        for (std::size_t m = from; m < to; ++m) {
          deliver(q[m].cb, fail(raft_errc::failed, "out of memory"));
        }
        return;
      }
      std::memcpy(base, e.data(), e.size());
      std::memset(base + e.size(), static_cast<int>(padded - e.size()), padded - e.size());
      g.bufs[k] = raft_buffer{base, padded};
    }
    auto* b = new batch;
    b->req.data = b;
    b->g = &g;
    b->term = g.r.current_term;
    b->first = raft_last_index(&g.r) + 1;
    b->cbs.reserve(n);
    for (std::size_t m = from; m < to; ++m) b->cbs.push_back(std::move(q[m].cb));
    b->unresolved = n;
    // Listed before the call: whatever raft does inside it finds the batch.
    g.inflight.push_back(b);
    const int rv =
        raft_apply(&g.r, &b->req, g.bufs.data(), static_cast<unsigned>(n), &impl::on_raft_apply);
    if (rv != 0) {
      // Not appended: the buffers are still ours (raft_apply's contract).
      g.inflight.pop_back();
      for (std::size_t k = 0; k < n; ++k) raft_free(g.bufs[k].base);
      const std::string leader = rv == RAFT_NOTLEADER ? leader_name(g) : std::string();
      const std::string why = fmt::format("group {}: raft_apply: {}", g.index, raft_strerror(rv));
      std::vector<op_cb> cbs = std::move(b->cbs);
      delete b;
      for (auto& cb : cbs) deliver(cb, fail(code_of(rv), why, leader));
      return;
    }
    b->first = b->req.index;
    g.proposals += n;
    g.apply_calls += 1;
  }

  static void on_raft_apply(struct raft_apply* req, int status, void* /*result*/) {
    auto* b = static_cast<batch*>(req->data);
    b->raft_owned = false;
    group& g = *b->g;
    if (status != 0) {
      const raft_errc code = g.closing ? raft_errc::shutting_down : code_of(status);
      g.node->fail_batch(*b, code, fmt::format("group {}: {}", g.index, raft_strerror(status)));
    }
    g.node->pop_settled(g);
  }

  // Answers every entry of b not answered yet.
  void fail_batch(batch& b, raft_errc code, const std::string& why) {
    std::vector<op_cb> cbs;
    for (auto& cb : b.cbs) {
      if (cb) cbs.push_back(std::move(cb));
      cb = nullptr;
    }
    b.unresolved = 0;
    for (auto& cb : cbs) deliver(cb, fail(code, why));
  }

  void pop_settled(group& g) {
    while (!g.inflight.empty() && g.inflight.front()->unresolved == 0 &&
           !g.inflight.front()->raft_owned) {
      delete g.inflight.front();
      g.inflight.pop_front();
    }
  }

  // Entries appended in a term this node no longer leads will not be
  // answered by raft (it called back at most once, for the first entry):
  // answer them leadership_lost. They may still commit under the new leader.
  void fail_stale(group& g) {
    if (g.inflight.empty()) return;
    const bool leading = raft_state(&g.r) == RAFT_LEADER;
    for (batch* b : g.inflight) {
      if (b->unresolved != 0 && (!leading || b->term != g.r.current_term)) {
        fail_batch(*b, raft_errc::leadership_lost,
                   fmt::format("group {}: leadership lost in term {}", g.index, b->term));
      }
    }
  }

  std::string leader_name(group& g) {
    ::raft_id id = 0;
    const char* address = nullptr;
    raft_leader(&g.r, &id, &address);
    const node_config* n = cfg_.node_of(id);
    return n != nullptr ? n->id : std::string();
  }

  // ---- The state machine, as raft calls it ----

  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
    auto* g = static_cast<group*>(fsm->data);
    *result = nullptr;  // replies travel through the batch, not raft's result pointer
    return g->node->apply(*g, *buf);
  }

  int apply(group& g, const struct raft_buffer& buf) {
    if (!g.failure.empty()) return RAFT_IOERR;
    // Raft advances last_applied after each entry: this entry's index.
    const std::uint64_t index = raft_last_applied(&g.r) + 1;
    auto entry = unpad(buf);
    if (!entry) {
      set_failure(g, fmt::format("entry at index {} is not a raft_node entry ({} bytes, no valid "
                                 "padding)",
                                 index, buf.len));
      return RAFT_MALFORMED;
    }
    std::string reply;
    try {
      reply = g.sm->apply(index, *entry);
    } catch (const std::exception& e) {
      set_failure(g, fmt::format("apply of index {} failed: {}", index, e.what()));
      return RAFT_IOERR;
    } catch (...) {
      set_failure(g, fmt::format("apply of index {} failed", index));
      return RAFT_IOERR;
    }
    fail_stale(g);
    op_cb cb;
    for (batch* b : g.inflight) {
      if (index < b->first) break;
      if (index >= b->first + b->cbs.size()) continue;
      cb = std::move(b->cbs[index - b->first]);
      b->cbs[index - b->first] = nullptr;
      if (cb) --b->unresolved;
      break;
    }
    pop_settled(g);
    if (cb) {
      op_result r;
      r.reply = std::move(reply);
      deliver(cb, std::move(r));
    }
    return 0;
  }

  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs) {
    auto* g = static_cast<group*>(fsm->data);
    std::string data;
    try {
      data = g->sm->snapshot();
    } catch (const std::exception& e) {
      log(log_level::warn, k_log, "snapshot failed; raft retries later",
          {log_number("group", g->index), {"error", e.what()}});
      return RAFT_IOERR;
    } catch (...) {
      log(log_level::warn, k_log, "snapshot failed; raft retries later",
          {log_number("group", g->index)});
      return RAFT_IOERR;
    }
    auto* arr = static_cast<struct raft_buffer*>(raft_malloc(sizeof(struct raft_buffer)));
    void* base = raft_malloc(std::max<std::size_t>(data.size(), 1));
    if (arr == nullptr || base == nullptr) {
      raft_free(arr);
      raft_free(base);
      return RAFT_NOMEM;
    }
    std::memcpy(base, data.data(), data.size());
    arr[0] = raft_buffer{base, data.size()};
    *bufs = arr;
    *n_bufs = 1;
    return 0;
  }

  static int fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
    auto* g = static_cast<group*>(fsm->data);
    try {
      g->sm->restore(std::string_view(static_cast<const char*>(buf->base), buf->len));
    } catch (const std::exception& e) {
      log(log_level::error, k_log, "restore of a snapshot failed",
          {log_number("group", g->index), {"error", e.what()}});
      return RAFT_IOERR;  // raft keeps (and releases) the buffer
    } catch (...) {
      log(log_level::error, k_log, "restore of a snapshot failed", {log_number("group", g->index)});
      return RAFT_IOERR;
    }
    // On success the buffer is the FSM's to release.
    raft_free(buf->base);
    g->restores += 1;
    // Entries applied before the snapshot are gone; so is any failure.
    g->failure.clear();
    return 0;
  }

  // The state machine failed here: this replica applies nothing more
  // (until a snapshot replaces its state or a restart replays the log).
  // What it proposed cannot be answered; a leader hands its leadership over
  // (after_iteration) so that the group keeps serving.
  void set_failure(group& g, std::string why) {
    log(log_level::error, k_log, "state machine failed; the group stops applying on this node",
        {log_number("group", g.index), {"error", why}});
    g.failure = std::move(why);
    g.next_shed_ms = 0;
    const std::string answer = failed_why(g);
    for (batch* b : g.inflight) fail_batch(*b, raft_errc::failed, answer);
  }

  static std::string failed_why(const group& g) {
    return fmt::format(
        "group {}: this replica's state machine failed ({}); its entries in flight "
        "may still be applied by the others",
        g.index, g.failure);
  }

  // ---- Barrier and transfer ----

  void start_barrier(group& g, op_cb cb) {
    if (g.closing) return deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
    if (raft_state(&g.r) != RAFT_LEADER) {
      return deliver(
          cb, fail(raft_errc::not_leader,
                   fmt::format("group {}: this node is not the leader", g.index), leader_name(g)));
    }
    if (!g.failure.empty()) return deliver(cb, fail(raft_errc::failed, failed_why(g)));
    auto* op = new barrier_op;
    op->req.data = op;
    op->cb = std::move(cb);
    if (int rv = raft_barrier(&g.r, &op->req, &impl::on_barrier); rv != 0) {
      op_cb done = std::move(op->cb);
      delete op;
      deliver(done, fail(code_of(rv),
                         fmt::format("group {}: raft_barrier: {}", g.index, raft_strerror(rv)),
                         rv == RAFT_NOTLEADER ? leader_name(g) : std::string()));
    }
  }

  static void on_barrier(struct raft_barrier* req, int status) {
    auto* op = static_cast<barrier_op*>(req->data);
    op_cb cb = std::move(op->cb);
    delete op;
    if (status == 0) return deliver(cb, op_result{});
    deliver(cb, fail(code_of(status), fmt::format("barrier: {}", raft_strerror(status))));
  }

  void start_transfer(group& g, ::raft_id target, op_cb cb) {
    if (g.closing) return deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
    if (raft_state(&g.r) != RAFT_LEADER) {
      return deliver(
          cb, fail(raft_errc::not_leader,
                   fmt::format("group {}: this node is not the leader", g.index), leader_name(g)));
    }
    auto* op = new transfer_op;
    op->req.data = op;
    op->g = &g;
    op->cb = std::move(cb);
    if (int rv = raft_transfer(&g.r, &op->req, target, &impl::on_transfer); rv != 0) {
      op_cb done = std::move(op->cb);
      delete op;
      deliver(done, fail(rv == RAFT_NOTLEADER ? raft_errc::not_leader : raft_errc::failed,
                         fmt::format("group {}: raft_transfer: {}", g.index, raft_strerror(rv))));
    }
  }

  // Raft calls back when the target won, when an election timeout passed,
  // or at close. The new leader may not be known yet at that moment: such
  // transfers settle in on_check once it is (or give up after another
  // election timeout).
  static void on_transfer(struct raft_transfer* req) {
    auto* op = static_cast<transfer_op*>(req->data);
    group& g = *op->g;
    if (g.closing) {
      op_cb cb = std::move(op->cb);
      delete op;
      return deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
    }
    op->deadline_ms = uv_now(&g.node->loop_) + g.node->opts_.election_timeout_ms * 2;
    if (!g.node->settle_transfer(g, *op)) g.settling.push_back(op);
  }

  // True when op was answered (and freed).
  bool settle_transfer(group& g, transfer_op& op) {
    ::raft_id leader = 0;
    const char* address = nullptr;
    raft_leader(&g.r, &leader, &address);
    const ::raft_id target = op.req.id;
    const node_config* to = cfg_.node_of(target);
    const std::string target_name = to != nullptr ? to->id : std::to_string(target);
    op_result r;
    if (leader != 0 && leader == target) {
      r.leader = target_name;
    } else if (raft_state(&g.r) == RAFT_LEADER) {
      r = fail(raft_errc::failed,
               fmt::format("group {}: {} did not take over within an election timeout", g.index,
                           target_name));
    } else if (leader != 0) {
      r = fail(raft_errc::failed,
               fmt::format("group {}: {} leads, not {}", g.index, leader_name(g), target_name));
      r.leader = leader_name(g);
    } else if (uv_now(&loop_) < op.deadline_ms) {
      return false;
    } else {
      r = fail(raft_errc::failed, fmt::format("group {}: no leader known after the transfer to {}",
                                              g.index, target_name));
    }
    op_cb cb = std::move(op.cb);
    delete &op;
    deliver(cb, std::move(r));
    return true;
  }

  // A new leader appends a barrier at once: when it is applied, everything
  // committed before this term is applied here (leader_ready: the moment a
  // leader may serve reads of committed state, docs/REPLICATION.md). It
  // also gets an entry of the current term committed as early as possible,
  // which narrows (does not close) the window of raft 0.15's commit of
  // earlier terms' entries by counting replicas (canonical/raft#220).
  void open_term(group& g) {
    if (raft_state(&g.r) != RAFT_LEADER || g.r.transfer != nullptr || !g.failure.empty() ||
        g.barrier_term == g.r.current_term) {
      return;
    }
    const ::raft_term term = g.r.current_term;
    g.barrier_term = term;
    group* gp = &g;
    auto* op = new barrier_op;
    op->req.data = op;
    op->cb = [gp, term](op_result r) {
      if (r.ok() && raft_state(&gp->r) == RAFT_LEADER && gp->r.current_term == term) {
        gp->ready_term = term;
      }
    };
    if (int rv = raft_barrier(&g.r, &op->req, &impl::on_barrier); rv != 0) {
      delete op;
      g.barrier_term = 0;  // the next iteration tries again
    }
  }

  // ---- Once per loop iteration ----

  static void on_check(uv_check_t* h) { static_cast<impl*>(h->data)->after_iteration(); }

  void after_iteration() {
    for (auto& g : groups_) {
      if (g->closing) continue;
      if (!g->failure.empty() && raft_state(&g->r) == RAFT_LEADER && g->r.transfer == nullptr &&
          uv_now(&loop_) >= g->next_shed_ms) {
        g->next_shed_ms = uv_now(&loop_) + opts_.election_timeout_ms;
        const unsigned index = g->index;
        start_transfer(*g, 0, [index](op_result r) {
          log(r.ok() ? log_level::info : log_level::warn, k_log,
              "a failed replica handed over its leadership",
              {log_number("group", index), {"result", r.ok() ? r.leader : r.message}});
        });
      }
      open_term(*g);
      fail_stale(*g);
      pop_settled(*g);
      if (!g->settling.empty()) {
        std::vector<transfer_op*> pending = std::move(g->settling);
        g->settling.clear();
        for (transfer_op* op : pending) {
          if (!settle_transfer(*g, *op)) g->settling.push_back(op);
        }
      }
    }
    publish();
  }

  void publish() {
    std::lock_guard lock(status_mu_);
    for (auto& g : groups_) {
      published& p = published_[g->index];
      if (!g->raft_ready || g->closed) continue;
      const char* address = nullptr;
      raft_leader(&g->r, &p.leader, &address);
      p.is_leader = raft_state(&g->r) == RAFT_LEADER;
      p.leader_ready = p.is_leader && g->ready_term == g->r.current_term;
      p.term = g->r.current_term;
      p.commit_index = g->r.commit_index;
      p.last_applied = raft_last_applied(&g->r);
      p.last_index = raft_last_index(&g->r);
      p.proposals = g->proposals;
      p.apply_calls = g->apply_calls;
      p.restores = g->restores;
      if (p.failure != g->failure) p.failure = g->failure;
    }
  }

  cluster_config cfg_;
  raft_node_options opts_;
  std::vector<std::unique_ptr<group>> groups_;

  uv_loop_t loop_{};
  uv_async_t async_{};
  uv_check_t check_{};
  bool loop_ready_ = false, async_ready_ = false, check_ready_ = false;
  bool closing_all_ = false;
  std::thread thread_;

  // Guards the hand-off from callers to the loop.
  std::mutex mu_;
  bool accepting_ = true;
  bool stop_requested_ = false;
  bool wake_pending_ = false;
  std::vector<std::vector<proposal>> queued_;  // per group
  std::vector<unsigned> dirty_;                // groups with a non-empty queue
  std::vector<std::function<void()>> tasks_;

  // The loop's side of the swap (reused: no allocation per wake-up).
  std::vector<unsigned> drain_dirty_;
  std::vector<std::vector<proposal>> drain_queued_;  // per group
  std::vector<std::function<void()>> drain_tasks_;

  mutable std::mutex status_mu_;
  std::vector<published> published_;

  std::mutex stop_mu_;
  bool finalized_ = false;
};

namespace {

// <data_dir>/raft/identity: the node id and raft id this directory
// belongs to, so that a reordered cluster file cannot hand it to another
// node's identity.
result<void> check_identity(const std::string& data_dir, const cluster_config& cfg) {
  const auto dir = std::filesystem::path(data_dir) / "raft";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return make_error(errc::unavailable, fmt::format("{}: {}", dir.string(), ec.message()));
  }
  const auto path = dir / "identity";
  const std::string want =
      fmt::format("node_id={}\nraft_id={}\n", cfg.self().id, cfg.self_raft_id());
  if (std::filesystem::exists(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream have;
    have << in.rdbuf();
    if (!in) {
      return make_error(errc::unavailable, fmt::format("{}: cannot read", path.string()));
    }
    if (have.str() != want) {
      return make_error(
          errc::invalid_argument,
          fmt::format("{} says this data dir belongs to another identity:\n{}but the cluster file "
                      "makes this node {} with raft id {} (nodes may be added at the end of the "
                      "cluster file, never reordered or removed)",
                      path.string(), have.str(), cfg.self().id, cfg.self_raft_id()));
    }
    return {};
  }
  const auto tmp = dir / "identity.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << want;
    out.flush();
    if (!out) return make_error(errc::unavailable, fmt::format("{}: cannot write", tmp.string()));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return make_error(errc::unavailable, fmt::format("{}: {}", path.string(), ec.message()));
  }
  return {};
}

}  // namespace

raft_node::raft_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

raft_node::~raft_node() {
  if (impl_) impl_->stop();
}

result<std::unique_ptr<raft_node>> raft_node::start(cluster_config cfg, raft_node_options opts,
                                                    std::vector<state_machine*> machines) {
  auto bad = [](std::string why) { return make_error(errc::invalid_argument, std::move(why)); };
  if (opts.data_dir.empty()) return bad("raft_node: needs a data_dir");
  if (opts.groups == 0) return bad("raft_node: needs at least one group");
  if (machines.size() != opts.groups) {
    return bad(
        fmt::format("raft_node: {} state machines for {} groups", machines.size(), opts.groups));
  }
  if (std::find(machines.begin(), machines.end(), nullptr) != machines.end()) {
    return bad("raft_node: a state machine is null");
  }
  if (opts.heartbeat_timeout_ms == 0 || opts.heartbeat_timeout_ms >= opts.election_timeout_ms) {
    return bad(
        fmt::format("raft_node: heartbeat timeout {} ms must be above 0 and below the "
                    "election timeout {} ms",
                    opts.heartbeat_timeout_ms, opts.election_timeout_ms));
  }
  if (opts.snapshot_threshold == 0) return bad("raft_node: snapshot_threshold must be above 0");
  if (opts.max_batch_entries == 0 || opts.max_batch_bytes == 0 || opts.max_entry_bytes == 0 ||
      opts.max_queued == 0) {
    return bad("raft_node: batch and queue limits must be above 0");
  }
  ONCEQ_TRY(cfg.check_ports(opts.groups));
  ONCEQ_TRY(check_identity(opts.data_dir, cfg));
  auto p = std::make_unique<impl>(std::move(cfg), std::move(opts), std::move(machines));
  ONCEQ_TRY(p->init());
  return std::unique_ptr<raft_node>(new raft_node(std::move(p)));
}

result<void> raft_node::propose(unsigned g, std::string entry, op_cb cb) {
  return impl_->propose(g, std::move(entry), std::move(cb));
}
result<void> raft_node::barrier(unsigned g, op_cb cb) {
  return impl_->barrier(g, std::move(cb));
}
result<void> raft_node::transfer(unsigned g, std::string_view to_node, op_cb cb) {
  return impl_->transfer(g, to_node, std::move(cb));
}
result<void> raft_node::rebalance() {
  return impl_->rebalance();
}
result<group_status> raft_node::status(unsigned g) const {
  return impl_->status(g);
}
void raft_node::stop() {
  impl_->stop();
}
const cluster_config& raft_node::config() const noexcept {
  return impl_->config();
}
unsigned raft_node::groups() const noexcept {
  return impl_->groups();
}

}  // namespace onceq::cluster
