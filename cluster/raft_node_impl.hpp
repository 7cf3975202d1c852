#pragma once

// Private to cluster/: raft_node's implementation, one class over three
// files (raft_node.cpp: start, stop and status; raft_node_log.cpp: proposals,
// group commit and the state machine; raft_node_leadership.cpp: barrier,
// transfer, rebalance, terms and the published status). Everything runs on
// the node's libuv thread except what raft_node.hpp says may be called from
// any thread.

#include "cluster/raft_node.hpp"
#include "cluster/tcp_transport.hpp"

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

#include "base/log.hpp"

namespace onceq::cluster::detail {

inline constexpr std::string_view k_log = "cluster";

inline op_result fail(raft_errc code, std::string message, std::string leader = {}) {
  op_result r;
  r.code = code;
  r.leader = std::move(leader);
  r.message = std::move(message);
  return r;
}

// Runs a caller's callback. They run inside raft's C callbacks, which an
// exception must not cross: one is logged and dropped.
inline void deliver(op_cb& cb, op_result r) noexcept {
  if (!cb) return;
  try {
    cb(std::move(r));
  } catch (const std::exception& e) {
    log(log_level::error, k_log, "a raft_node callback threw; ignored", {{"error", e.what()}});
  } catch (...) {
    log(log_level::error, k_log, "a raft_node callback threw; ignored");
  }
}

inline raft_errc code_of(int rv) {
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
  std::uint64_t proposals = 0, apply_calls = 0, restores = 0, restored_bytes = 0;
  std::uint64_t terms_seen = 0;
  std::vector<::raft_id> heard;  // leader: the voters heard from within an election timeout
  std::string failure;
  bool open = false;
  std::vector<member> members;
};

// Raft 0.15 needs every entry to be a multiple of 8 bytes: its decoder
// (network and disk) steps over padding to the next multiple of 8 that its
// encoder does not write, so shorter entries would run into each other. An
// entry therefore goes to raft padded with 1..8 bytes, each holding the
// pad's length (PKCS#7's rule), and apply() strips them.
inline std::size_t padded_size(std::size_t n) {
  return (n / 8 + 1) * 8;
}

inline std::optional<std::string_view> unpad(const struct raft_buffer& buf) {
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

}  // namespace onceq::cluster::detail

namespace onceq::cluster {

using namespace detail;

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

  struct change_op {
    struct raft_change req {};
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
    tcp_transport transport;  // raft_uv's TCP transport with TCP_NODELAY
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
    // raft_uv's own append, which watch_appends (raft_node_log.cpp) wraps to
    // see a failed write of this node's log.
    int (*raw_append)(struct raft_io*, struct raft_io_append*, const struct raft_entry[], unsigned,
                      raft_io_append_cb) = nullptr;
    std::uint64_t next_shed_ms = 0;  // a failed leader's next attempt to hand over
    // The term whose opening barrier was sent, and the term whose opening
    // barrier this node applied while leading it (leader_ready).
    ::raft_term barrier_term = 0, ready_term = 0;
    // The role, term and leader last logged (note_role): a change is logged
    // once, with the log's positions at that moment.
    int logged_state = -1;
    ::raft_term logged_term = 0;
    ::raft_id logged_leader = 0;
    std::uint64_t proposals = 0, apply_calls = 0, restores = 0, restored_bytes = 0;
    std::vector<struct raft_buffer> bufs;  // scratch for raft_apply
    // The configuration a pristine directory is bootstrapped with.
    std::vector<member> bootstrap;
    // A close of this group alone (close_group): its callback, and whether
    // the directory goes with it.
    std::vector<op_cb> close_cbs;
    bool wipe = false;
    bool closing_one = false;  // close_group's raft_close is under way
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
      if (opts_.specs.empty()) {
        for (std::size_t k = 0; k < cfg_.nodes().size(); ++k) {
          g->bootstrap.push_back(member{k + 1, member_role::voter});
        }
      } else {
        g->bootstrap = opts_.specs[i].bootstrap;
      }
      groups_.push_back(std::move(g));
    }
  }

  ~impl() { stop(); }

  const cluster_config& config() const noexcept { return cfg_; }
  unsigned groups() const noexcept { return opts_.groups; }

  // ---- Start and stop (caller's thread) ----

  result<void> init();

  void stop();

  // ---- Public operations (any thread) ----

  result<void> propose(unsigned g, std::string entry, op_cb cb);

  result<void> post(std::function<void()> task);

  result<void> barrier(unsigned g, op_cb cb);
  result<void> read(unsigned g, bool fresh, op_cb cb);
  bool leads(unsigned g) const;
  bool opened(unsigned g) const;
  std::uint64_t leader_term(unsigned g) const;

  result<void> transfer(unsigned g, std::string_view to_node, op_cb cb);

  result<void> rebalance();

  result<group_status> status(unsigned g) const;
  result<void> open_group(unsigned g, std::vector<member> bootstrap, op_cb cb);
  result<void> close_group(unsigned g, bool wipe, op_cb cb);
  result<void> change(unsigned g, member_change c, op_cb cb);

 private:
  // What a request to a closing group gets: shutting_down when the node
  // stops; not_leader (no leader known: the caller may go elsewhere) when
  // this node is leaving the group (close_group).
  op_result closing_answer(const group& g) const {
    if (g.closing_one && !closing_all_) {
      return fail(raft_errc::not_leader,
                  fmt::format("group {}: this node is leaving the group", g.index));
    }
    return fail(raft_errc::shutting_down, "the raft node is stopping");
  }
  // Whether group g's raft runs on this node (not dormant, not closing).
  static bool running(const group& g) { return g.raft_ready && !g.closing; }
  // After raft_close of one group (close_group): its I/O released, its
  // directory wiped if asked, the group dormant again.
  void finish_close(group& g);
  // Deletes a group's directory crash-safely (raft_node.cpp); "" or why not.
  static std::string wipe_dir(const std::string& dir);
  static void on_change(struct raft_change* req, int status);
  static int role_of(member_role r);
  static error no_group(unsigned g);
  static error stopped() { return make_error(errc::unavailable, "the raft node is stopped"); }

  // mu_ held. uv_async_send runs under mu_ so that stop() cannot close the
  // handle between the check of accepting_ and the send.
  void wake();

  result<void> init_group(group& g);
  // Wraps g's raft_io append so that a failed write of the log becomes the
  // group's failure (raft_node_log.cpp). After raft_init, before the loop.
  static void watch_appends(group& g);

  // The loop thread: SIGPIPE is blocked here because libuv writes to
  // sockets with write(2) (a peer that went away would otherwise kill the
  // process); EPIPE is then an ordinary error for raft_uv.
  void run();

  // Starts the close of everything on the loop: raft_close of every group
  // (raft answers its pending requests), the wake-up and check handles.
  // The loop ends when the last close completes.
  void begin_close();

  // A failed start: close on the caller's thread (the loop thread never ran).
  void shutdown_inline();

  // After the loop has ended: release raft_uv's memory and the loop.
  void finalize();

  static void on_raft_closed(struct raft* r);

  // Raft is done with g: whatever it still held is answered and freed.
  void release_all(group& g);

  // ---- The loop: wake-ups ----

  static void on_async(uv_async_t* h) { static_cast<impl*>(h->data)->drain(); }

  void drain();

  // The group commit: everything queued for g goes to raft in as few
  // raft_apply calls as the batch limits allow (one, usually).
  void submit(group& g, std::vector<proposal>& q);

  void apply_batch(group& g, std::vector<proposal>& q, std::size_t from, std::size_t to);

  static void on_raft_apply(struct raft_apply* req, int status, void* /*result*/);

  // Answers every entry of b not answered yet.
  void fail_batch(batch& b, raft_errc code, const std::string& why);

  void pop_settled(group& g);

  // Entries appended in a term this node no longer leads will not be
  // answered by raft (it called back at most once, for the first entry):
  // answer them leadership_lost. They may still commit under the new leader.
  void fail_stale(group& g);

  std::string leader_name(group& g);

  // ---- The state machine, as raft calls it ----

  static int fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result);

  int apply(group& g, const struct raft_buffer& buf);

  static int fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[], unsigned* n_bufs);

  static int fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf);

  // The state machine failed here: this replica applies nothing more
  // (until a snapshot replaces its state or a restart replays the log).
  // What it proposed cannot be answered; a leader hands its leadership over
  // (after_iteration) so that the group keeps serving.
  void set_failure(group& g, std::string why);

  static std::string failed_why(const group& g);

  // ---- Barrier and transfer ----

  void start_barrier(group& g, op_cb cb);

  static void on_barrier(struct raft_barrier* req, int status);

  void start_transfer(group& g, ::raft_id target, op_cb cb);

  // Raft calls back when the target won, when an election timeout passed,
  // or at close. The new leader may not be known yet at that moment: such
  // transfers settle in on_check once it is (or give up after another
  // election timeout).
  static void on_transfer(struct raft_transfer* req);

  // True when op was answered (and freed).
  bool settle_transfer(group& g, transfer_op& op);

  // A new leader appends a barrier at once: when it is applied, everything
  // committed before this term is applied here (leader_ready: the moment a
  // leader may serve reads of committed state, docs/REPLICATION.md). It
  // also gets an entry of the current term committed as early as possible,
  // which narrows (does not close) the window of raft 0.15's commit of
  // earlier terms' entries by counting replicas (canonical/raft#220).
  void open_term(group& g);

  // ---- Once per loop iteration ----

  static void on_check(uv_check_t* h) { static_cast<impl*>(h->data)->after_iteration(); }

  void after_iteration();

  // Logs a change of this node's role, term or known leader in group g
  // (info): who led which term, and where each node's log stood, is what a
  // reader of a failover needs first.
  void note_role(group& g);

  void publish();

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

}  // namespace onceq::cluster
