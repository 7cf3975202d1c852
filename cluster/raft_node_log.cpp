// raft_node: proposals, group commit onto raft_apply, and the state machine raft calls
// (raft_node_impl.hpp).

#include "cluster/raft_node_impl.hpp"

#include <unordered_map>
#include <utility>

namespace onceq::cluster {

namespace {

using group_t = raft_node::impl::group;

// What group_status::failure says while this node's raft log cannot be
// written (an append failed: a full or failing disk under <data_dir>/raft).
constexpr std::string_view k_log_unwritable = "the raft log cannot be written";

// nullopt for an append outcome that is not a write failure.
std::optional<std::string> log_write_failure(int status) {
  if (status != RAFT_IOERR && status != RAFT_NOSPACE) return std::nullopt;
  // raft 0.15's raft_strerror has no text for RAFT_NOSPACE.
  return fmt::format("{} ({})", k_log_unwritable,
                     status == RAFT_NOSPACE ? "no space left on its disk" : raft_strerror(status));
}

// ---- Appends watched: a follower's write failures ----
//
// Raft tells nothing of a follower's failed append but a rejection to the
// leader, and raft_uv fails every later one too: the follower's log stops
// growing while it keeps voting and serving, and only its apply lag showed
// it. Each group's raft_io append is therefore decorated: a failed append
// is recorded as the group's failure (GET /v1/cluster, the shard's
// log_health in GET /v1/healthz), and the next append that succeeds clears
// it again. A leader's failed append reaches on_raft_apply as well, which
// also answers its proposals (set_failure).

// Per loop thread (the only one that appends to its groups' logs): the
// callback raft gave each append in flight, and its group. A raft_io's own
// group is io->data (raft_init's struct raft)'s data (init_group's &g).
thread_local std::unordered_map<struct raft_io_append*, std::pair<raft_io_append_cb, group_t*>>
    t_appends_in_flight;

group_t& group_of(struct raft_io* io) {
  return *static_cast<group_t*>(static_cast<struct raft*>(io->data)->data);
}

void note_append(group_t& g, int status) {
  if (g.closing) return;
  const bool unwritable = g.failure.starts_with(k_log_unwritable);
  if (status == 0) {
    // Written again (before raft applies what it now holds).
    if (unwritable) {
      log(log_level::info, k_log, "the raft log is written again", {log_number("group", g.index)});
      g.failure.clear();
    }
    return;
  }
  auto why = log_write_failure(status);
  if (!why || !g.failure.empty()) return;
  log(log_level::error, k_log, "an append to the raft log failed; this node's copy stops here",
      {log_number("group", g.index), {"error", *why}});
  g.failure = std::move(*why);
  g.next_shed_ms = 0;
}

void on_watched_append(struct raft_io_append* req, int status) {
  auto it = t_appends_in_flight.find(req);
  if (it == t_appends_in_flight.end()) return;  // not ours: cannot happen
  auto [cb, g] = it->second;
  t_appends_in_flight.erase(it);
  if (status == 0) note_append(*g, 0);
  cb(req, status);  // may free req
  if (status != 0) note_append(*g, status);
}

int watched_append(struct raft_io* io, struct raft_io_append* req,
                   const struct raft_entry entries[], unsigned n, raft_io_append_cb cb) {
  group_t& g = group_of(io);
  t_appends_in_flight[req] = {cb, &g};
  const int rv = g.raw_append(io, req, entries, n, &on_watched_append);
  if (rv != 0) {
    t_appends_in_flight.erase(req);
    note_append(g, rv);
  }
  return rv;
}

}  // namespace

void raft_node::impl::watch_appends(group& g) {
  if (g.io.append == &watched_append) return;
  g.raw_append = g.io.append;
  g.io.append = &watched_append;
}

result<void> raft_node::impl::propose(unsigned g, std::string entry, op_cb cb) {
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

result<void> raft_node::impl::post(std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (!accepting_) return stopped();
  tasks_.push_back(std::move(task));
  wake();
  return {};
}

void raft_node::impl::wake() {
  if (wake_pending_) return;
  wake_pending_ = true;
  uv_async_send(&async_);
}

void raft_node::impl::drain() {
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

void raft_node::impl::submit(group& g, std::vector<proposal>& q) {
  if (q.empty()) return;
  if (g.closing) {
    for (auto& p : q) deliver(p.cb, closing_answer(g));
    return;
  }
  if (!g.raft_ready) {
    for (auto& p : q) {
      deliver(p.cb, fail(raft_errc::not_leader,
                         fmt::format("group {}: this node holds no replica of it", g.index)));
    }
    return;
  }
  if (raft_state(&g.r) != RAFT_LEADER || g.r.transfer != nullptr) {
    const std::string leader = g.r.transfer != nullptr ? std::string() : leader_name(g);
    const std::string why = g.r.transfer != nullptr
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

void raft_node::impl::apply_batch(group& g, std::vector<proposal>& q, std::size_t from,
                                  std::size_t to) {
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
    if (auto broken = log_write_failure(rv); broken && g.failure.empty()) {
      set_failure(g, std::move(*broken));
    }
    return;
  }
  b->first = b->req.index;
  g.proposals += n;
  g.apply_calls += 1;
}

void raft_node::impl::on_raft_apply(struct raft_apply* req, int status, void* /*result*/) {
  auto* b = static_cast<batch*>(req->data);
  b->raft_owned = false;
  group& g = *b->g;
  if (status != 0) {
    const raft_errc code = g.closing ? raft_errc::shutting_down : code_of(status);
    g.node->fail_batch(*b, code, fmt::format("group {}: {}", g.index, raft_strerror(status)));
    if (auto broken = log_write_failure(status); broken && !g.closing && g.failure.empty()) {
      g.node->set_failure(g, std::move(*broken));
    }
  }
  g.node->pop_settled(g);
}

void raft_node::impl::fail_batch(batch& b, raft_errc code, const std::string& why) {
  std::vector<op_cb> cbs;
  for (auto& cb : b.cbs) {
    if (cb) cbs.push_back(std::move(cb));
    cb = nullptr;
  }
  b.unresolved = 0;
  for (auto& cb : cbs) deliver(cb, fail(code, why));
}

void raft_node::impl::pop_settled(group& g) {
  while (!g.inflight.empty() && g.inflight.front()->unresolved == 0 &&
         !g.inflight.front()->raft_owned) {
    delete g.inflight.front();
    g.inflight.pop_front();
  }
}

void raft_node::impl::fail_stale(group& g) {
  if (g.inflight.empty() || !g.raft_ready) return;
  const bool leading = raft_state(&g.r) == RAFT_LEADER;
  for (batch* b : g.inflight) {
    if (b->unresolved != 0 && (!leading || b->term != g.r.current_term)) {
      fail_batch(*b, raft_errc::leadership_lost,
                 fmt::format("group {}: leadership lost in term {}", g.index, b->term));
    }
  }
}

int raft_node::impl::fsm_apply(struct raft_fsm* fsm, const struct raft_buffer* buf, void** result) {
  auto* g = static_cast<group*>(fsm->data);
  *result = nullptr;  // replies travel through the batch, not raft's result pointer
  return g->node->apply(*g, *buf);
}

int raft_node::impl::apply(group& g, const struct raft_buffer& buf) {
  // What this node's log holds may still be applied while appends fail.
  if (!g.failure.empty() && !g.failure.starts_with(k_log_unwritable)) return RAFT_IOERR;
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

int raft_node::impl::fsm_snapshot(struct raft_fsm* fsm, struct raft_buffer* bufs[],
                                  unsigned* n_bufs) {
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

int raft_node::impl::fsm_restore(struct raft_fsm* fsm, struct raft_buffer* buf) {
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
  g->restored_bytes += buf->len;
  raft_free(buf->base);
  g->restores += 1;
  // Entries applied before the snapshot are gone; so is any failure.
  g->failure.clear();
  return 0;
}

void raft_node::impl::set_failure(group& g, std::string why) {
  log(log_level::error, k_log, "state machine failed; the group stops applying on this node",
      {log_number("group", g.index), {"error", why}});
  g.failure = std::move(why);
  g.next_shed_ms = 0;
  const std::string answer = failed_why(g);
  for (batch* b : g.inflight) fail_batch(*b, raft_errc::failed, answer);
}

std::string raft_node::impl::failed_why(const group& g) {
  return fmt::format(
      "group {}: this replica's state machine failed ({}); its entries in flight "
      "may still be applied by the others",
      g.index, g.failure);
}

}  // namespace onceq::cluster
