#include "cmd/placement_agent.hpp"

#include <algorithm>
#include <future>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "base/log.hpp"

namespace onceq::cmd {

namespace {

constexpr std::string_view k_log = "placement";
// How long a proposal to the meta group may take to be applied here.
constexpr auto k_submit_timeout = std::chrono::seconds(5);
// A move's target is promoted once its log is at most this many entries
// behind the leader's.
constexpr std::uint64_t k_promote_lag = 64;

using cluster::member;
using cluster::member_change;
using cluster::member_role;
using cluster::meta_command;
using cluster::raft_id;

const member* find(const std::vector<member>& conf, raft_id id) {
  for (const auto& m : conf) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

bool holds(const std::vector<raft_id>& ids, raft_id id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

placement_agent::placement_agent(const cluster::cluster_config& cfg, cluster::raft_node& raft,
                                 cluster::meta_machine& meta, unsigned meta_group, options opts,
                                 const clock& time, send_fn send)
    : cfg_(cfg),
      raft_(raft),
      meta_(meta),
      meta_group_(meta_group),
      opts_(std::move(opts)),
      clock_(time),
      send_(std::move(send)),
      self_(cfg.self_raft_id()),
      work_(meta_group + 1) {}

placement_agent::~placement_agent() {
  stop();
}

void placement_agent::start() {
  thread_ = std::thread([this] { run(); });
}

void placement_agent::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void placement_agent::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      tick();
    } catch (const std::exception& e) {
      log(log_level::error, k_log, "placement tick failed", {{"error", e.what()}});
    }
    lock.lock();
    // A step that finished starts the next tick at once (a move is a
    // chain of steps).
    wake_.wait_for(lock, opts_.tick, [this] { return stopping_ || kick_; });
    kick_ = false;
  }
}

result<void> placement_agent::submit_local(const std::string& entry) {
  auto done = std::make_shared<std::promise<cluster::op_result>>();
  auto answer = done->get_future();
  auto queued = raft_.propose(meta_group_, entry,
                              [done](cluster::op_result r) { done->set_value(std::move(r)); });
  if (!queued.ok()) return std::move(queued).err();
  if (answer.wait_for(k_submit_timeout) != std::future_status::ready) {
    return make_error(errc::unavailable, "the meta group did not apply the change in time");
  }
  cluster::op_result r = answer.get();
  if (r.code == cluster::raft_errc::not_leader) {
    error e = make_error(errc::unavailable,
                         r.leader.empty() ? std::string("the meta group has no leader")
                                          : fmt::format("the meta group is led by {}", r.leader));
    if (auto id = cfg_.raft_id_of(r.leader)) e.leader = static_cast<unsigned>(*id);
    e.retry_after_ms = 1'000;
    return e;
  }
  if (!r.ok()) return make_error(errc::unavailable, fmt::format("meta group: {}", r.message));
  if (r.reply != cluster::k_meta_ok) return make_error(errc::failed_precondition, r.reply);
  return {};
}

result<void> placement_agent::submit(const meta_command& c) {
  const std::string entry = cluster::encode(c);
  if (raft_.leads(meta_group_)) return submit_local(entry);
  auto st = raft_.status(meta_group_);
  if (!st.ok() || st->leader.empty() || st->leader == cfg_.self().id) {
    error e =
        make_error(errc::unavailable, "the meta group has no leader (an election is under way)");
    e.retry_after_ms = 1'000;
    return e;
  }
  return send_(st->leader, entry);
}

std::uint64_t placement_agent::leader_hint(unsigned g) const {
  const cluster::meta_state s = meta_.state();
  if (g >= s.shards.size()) return 0;
  const auto& e = s.shards[g];
  raft_id hint = e.leader;
  if (hint == 0 || hint == self_ || !holds(e.replicas, hint)) {
    hint = 0;
    for (raft_id r : e.replicas) {
      if (r != self_) {
        hint = r;
        break;
      }
    }
  }
  return hint;
}

bool placement_agent::holds_replica(unsigned g) const {
  const cluster::meta_state s = meta_.state();
  return g < s.shards.size() && holds(s.shards[g].replicas, self_);
}

void placement_agent::tick() {
  const std::uint64_t now = static_cast<std::uint64_t>(clock_.now_ms());
  cluster::meta_state s = meta_.state();
  // The meta leader's state is current (it applied a barrier of its term
  // before it reads as ready).
  if (auto ms = raft_.status(meta_group_); ms.ok()) control(s, *ms, now);
  if (!caught_up_) {
    // A restart replays the meta log from its start (or last snapshot):
    // the state passes through placements long gone, under which a group
    // this node holds today looks moved away (and would be wiped) or a
    // group long moved away looks placed here at version 1 (and would be
    // bootstrapped anew). Nothing happens before a barrier.
    if (!barrier().ok()) return;
    caught_up_ = true;
    log(log_level::info, k_log, "caught up with the meta group; placing from now on", {});
    s = meta_.state();
  }
  for (unsigned g = 0; g < meta_group_ && g < s.shards.size(); ++g) reconcile(g, s, now);
}

result<void> placement_agent::barrier() {
  meta_command c;
  c.op = meta_command::kind::sync;
  c.node = self_;
  while (c.nonce == 0) c.nonce = nonce_rng_();
  if (auto r = submit(c); !r.ok()) return r;
  const auto deadline = std::chrono::steady_clock::now() + k_submit_timeout;
  for (;;) {
    const std::uint64_t seen = meta_.applied();
    {
      const cluster::meta_state s = meta_.state();
      if (self_ >= 1 && self_ <= s.nodes.size() && s.nodes[self_ - 1].synced == c.nonce) return {};
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return make_error(errc::unavailable, "this node did not apply its meta sync in time");
    }
    // A snapshot restored here moves no applied index: look again soon.
    meta_.wait_past(seen, std::chrono::milliseconds(100));
  }
}

void placement_agent::wipe_if_left(unsigned g, std::uint64_t now) {
  if (!barrier().ok()) {
    std::lock_guard lock(work_mu_);
    work_[g].next_try_ms = now + static_cast<std::uint64_t>(opts_.retry_after.count());
    return;
  }
  const cluster::meta_state s = meta_.state();
  const cluster::shard_entry& e = s.shards[g];
  set_wipe_pending(g, false);
  // Placed here again meanwhile: the next tick opens the group on the
  // directory it kept.
  if (holds(e.replicas, self_) || (e.moving && e.moving->to == self_)) return;
  begin(g, now);
  auto done = [this, g](cluster::op_result r) {
    if (!r.ok()) set_wipe_pending(g, true);  // tried again
    end(g, r, "wipe the raft directory of a group this node left");
  };
  if (auto r = raft_.close_group(g, true, std::move(done)); !r.ok()) {
    set_wipe_pending(g, true);
    end(g, cluster::op_result{cluster::raft_errc::failed, {}, {}, r.err().message}, "wipe");
  }
}

void placement_agent::set_wipe_pending(unsigned g, bool pending) {
  std::lock_guard lock(work_mu_);
  work_[g].wipe_pending = pending;
}

void placement_agent::control(const cluster::meta_state& s, const cluster::group_status& ms,
                              std::uint64_t now) {
  if (!ms.is_leader || !ms.leader_ready) {
    meta_term_ = 0;
    return;
  }
  if (meta_term_ != ms.term) {
    // A new term: the leader listens to every node afresh before it calls
    // one down.
    meta_term_ = ms.term;
    live_.leader_since_ms = now;
    live_.last_heard_ms.assign(cfg_.nodes().size(), 0);
  }
  // The registry has an entry per node of the file: grown by a replicated
  // command when the file (this leader's) lists more nodes.
  if (s.nodes.size() < cfg_.nodes().size()) {
    meta_command grow;
    grow.op = meta_command::kind::grow;
    grow.node = cfg_.nodes().size();
    if (auto r = submit(grow); !r.ok()) {
      log(log_level::warn, k_log, "the node registry did not grow", {{"error", r.err().message}});
    } else {
      log(log_level::info, k_log, "the node registry grew",
          {log_number("nodes", cfg_.nodes().size())});
    }
    return;
  }
  if (live_.last_heard_ms.size() < s.nodes.size()) live_.last_heard_ms.resize(s.nodes.size(), 0);
  // Every node of the file follows the meta group's log: one added to the
  // file of a running cluster (started with --join) joins as a standby.
  grow_meta_group(ms, now);
  for (const auto& name : ms.heard) {
    if (auto id = cfg_.raft_id_of(name); id && *id >= 1 && *id <= live_.last_heard_ms.size()) {
      live_.last_heard_ms[*id - 1] = now;
    }
  }
  live_.last_heard_ms[self_ - 1] = now;
  for (const meta_command& c : cluster::plan(s, live_, now, opts_.placement)) {
    if (auto r = submit(c); !r.ok()) {
      log(log_level::warn, k_log, "a placement change was not applied",
          {{"entry", cluster::encode(c)}, {"error", r.err().message}});
      break;  // the next tick plans again from what was applied
    }
    log(log_level::info, k_log, "placement changed", {{"entry", cluster::encode(c)}});
  }
}

void placement_agent::grow_meta_group(const cluster::group_status& ms, std::uint64_t now) {
  {
    std::lock_guard lock(work_mu_);
    if (work_[meta_group_].busy || now < work_[meta_group_].next_try_ms) return;
  }
  for (std::size_t i = 0; i < cfg_.nodes().size(); ++i) {
    const raft_id id = i + 1;
    const member* m = find(ms.members, id);
    if (m != nullptr && m->role != member_role::spare) continue;
    const auto op = m == nullptr ? member_change::kind::add : member_change::kind::standby;
    begin(meta_group_, now);
    const std::string what =
        m == nullptr ? "add a node to the meta group" : "let the node follow the meta group's log";
    if (auto r = raft_.change(meta_group_, member_change{op, id}, done_cb(meta_group_, what));
        !r.ok()) {
      end(meta_group_, cluster::op_result{cluster::raft_errc::failed, {}, {}, r.err().message},
          what);
    }
    return;  // one change at a time
  }
}

void placement_agent::begin(unsigned g, std::uint64_t now) {
  std::lock_guard lock(work_mu_);
  work_[g].busy = true;
  work_[g].next_try_ms = now;
}

void placement_agent::end(unsigned g, const cluster::op_result& r, std::string_view what) {
  const std::uint64_t now = static_cast<std::uint64_t>(clock_.now_ms());
  {
    std::lock_guard lock(work_mu_);
    work_[g].busy = false;
    if (!r.ok()) {
      work_[g].next_try_ms = now + static_cast<std::uint64_t>(opts_.retry_after.count());
    }
  }
  if (!r.ok()) {
    log(log_level::info, k_log, "a placement step did not happen; it is tried again",
        {log_number("shard", g), {"step", std::string(what)}, {"reason", r.message}});
  } else {
    log(log_level::info, k_log, "placement step done",
        {log_number("shard", g), {"step", std::string(what)}});
  }
  {
    std::lock_guard lock(mu_);
    kick_ = true;
  }
  wake_.notify_all();
}

cluster::op_cb placement_agent::done_cb(unsigned g, std::string what) {
  return [this, g, what = std::move(what)](cluster::op_result r) { end(g, r, what); };
}

void placement_agent::reconcile(unsigned g, const cluster::meta_state& s, std::uint64_t now) {
  {
    std::lock_guard lock(work_mu_);
    if (work_[g].busy || now < work_[g].next_try_ms) return;
  }
  auto got = raft_.status(g);
  if (!got.ok()) return;
  const cluster::group_status& st = *got;
  const cluster::shard_entry& e = s.shards[g];
  const bool full = cfg_.full_replication();
  if (!s.placed) {
    // Before the first placement only a file whose every node holds every
    // shard runs its groups (opened at start).
    return;
  }
  const bool replica = holds(e.replicas, self_);
  const bool target = e.moving && e.moving->to == self_;
  if ((replica || target) && !st.open) {
    // The first placement bootstraps its replicas; a move's target (or a
    // replica whose directory was lost) waits for the leader to add it.
    std::vector<member> boot;
    if (replica && e.version == 1 && !full) {
      for (raft_id r : e.replicas) boot.push_back(member{r, member_role::voter});
    }
    begin(g, now);
    set_wipe_pending(g, false);  // placed here again before it was wiped
    if (auto r = raft_.open_group(g, std::move(boot), done_cb(g, "open")); !r.ok()) {
      end(g, cluster::op_result{cluster::raft_errc::failed, {}, {}, r.err().message}, "open");
    }
    return;
  }
  if (!replica && !target && !full) {
    // The placement moved the shard away: the move that did so was
    // committed after raft removed this node from the group. The group
    // closes first and its directory is wiped only after a barrier shows
    // the shard still placed elsewhere: closed, this node cannot be made a
    // voter again meanwhile, and a state this node applied late (a move
    // back here already committed) cannot wipe a voter's log.
    if (st.open) {
      begin(g, now);
      set_wipe_pending(g, true);
      if (auto r = raft_.close_group(g, false, done_cb(g, "close a group this node left"));
          !r.ok()) {
        end(g, cluster::op_result{cluster::raft_errc::failed, {}, {}, r.err().message}, "close");
      }
      return;
    }
    bool pending = false;
    {
      std::lock_guard lock(work_mu_);
      pending = work_[g].wipe_pending;
    }
    if (pending) wipe_if_left(g, now);
    return;
  }
  if (!st.is_leader || !st.leader_ready) return;
  bool report = false;
  {
    std::lock_guard lock(work_mu_);
    if ((e.leader != self_ || e.leader_term < st.term) && work_[g].reported_term != st.term) {
      work_[g].reported_term = st.term;
      report = true;
    }
  }
  if (report) {
    meta_command c;
    c.op = meta_command::kind::leader;
    c.shard = g;
    c.node = self_;
    c.term = st.term;
    if (auto r = submit(c); !r.ok() && r.code() != errc::failed_precondition) {
      std::lock_guard lock(work_mu_);
      work_[g].reported_term = 0;  // tried again next tick
    }
  }
  drive(g, e, st, now);
}

void placement_agent::drive(unsigned g, const cluster::shard_entry& e,
                            const cluster::group_status& st, std::uint64_t now) {
  const auto& conf = st.members;
  if (conf.empty()) return;
  auto change = [&](member_change::kind op, raft_id id, std::string what) {
    begin(g, now);
    if (auto r = raft_.change(g, member_change{op, id}, done_cb(g, what)); !r.ok()) {
      end(g, cluster::op_result{cluster::raft_errc::failed, {}, {}, r.err().message}, what);
    }
  };
  auto hand_over = [&](raft_id to, std::string what) {
    {
      std::lock_guard lock(work_mu_);
      if (now <
          work_[g].last_transfer_ms + static_cast<std::uint64_t>(opts_.transfer_every.count()))
        return;
      work_[g].last_transfer_ms = now;
    }
    const cluster::node_config* n = cfg_.node_of(to);
    begin(g, now);
    if (auto r = raft_.transfer(g, n != nullptr ? n->id : std::string(), done_cb(g, what));
        !r.ok()) {
      end(g, cluster::op_result{cluster::raft_errc::failed, {}, {}, r.err().message}, what);
    }
  };
  auto record = [&](meta_command c) {
    const std::uint64_t seen = meta_.applied();
    auto r = submit(c);
    if (r.ok()) {
      // Applied on the meta leader: wait (briefly) until this node's copy
      // has it too, so that the next tick does not take the step again.
      meta_.wait_past(seen, std::chrono::milliseconds(500));
      std::lock_guard lock(mu_);
      kick_ = true;  // the next step at once
      return;
    }
    // Refused: most often this node's copy of the meta state is a moment
    // behind (the step was recorded already); look again shortly.
    const bool stale = r.code() == errc::failed_precondition;
    log(stale ? log_level::debug : log_level::info, k_log, "a move's step was not recorded",
        {log_number("shard", g), {"entry", cluster::encode(c)}, {"error", r.err().message}});
    std::lock_guard lock(work_mu_);
    work_[g].next_try_ms =
        now + (stale ? 100 : static_cast<std::uint64_t>(opts_.retry_after.count()));
  };

  if (e.moving) {
    const cluster::shard_move& m = *e.moving;
    if (m.state == cluster::move_state::adding) {
      const member* to = find(conf, m.to);
      if (to == nullptr) return change(member_change::kind::add, m.to, "add the target");
      if (to->role == member_role::spare) {
        return change(member_change::kind::standby, m.to, "let the target follow the log");
      }
      if (to->role == member_role::standby) {
        // It catches up as a standby (however long a large shard takes);
        // raft's own catch-up before the promotion then has little left
        // to send, well within its rounds.
        if (to->match_index + k_promote_lag < st.last_index) return;
        return change(member_change::kind::promote, m.to, "promote the caught-up target");
      }
      meta_command c;
      c.op = meta_command::kind::move_step;
      c.shard = g;
      c.version = e.version;
      c.step = cluster::move_state::removing;
      return record(c);
    }
    if (m.from != 0 && find(conf, m.from) != nullptr) {
      if (m.from == self_) return hand_over(m.to, "hand the leadership to the target");
      return change(member_change::kind::remove, m.from, "remove the source");
    }
    meta_command c;
    c.op = meta_command::kind::move_done;
    c.at_ms = now;
    c.shard = g;
    c.version = e.version;
    c.from = m.from;
    c.to = m.to;
    c.replicas = e.replicas;
    auto at = std::find(c.replicas.begin(), c.replicas.end(), m.from);
    if (m.from != 0 && at != c.replicas.end()) {
      *at = m.to;
    } else {
      c.replicas.push_back(m.to);
    }
    return record(c);
  }
  // No move: a member the placement does not list (a cancelled move's
  // target) leaves the group.
  for (const member& m : conf) {
    if (holds(e.replicas, m.id)) continue;
    if (m.id == self_)
      return hand_over(e.replicas.empty() ? 0 : e.replicas.front(), "hand over before leaving");
    return change(member_change::kind::remove, m.id, "remove a member the placement does not list");
  }
  // The preferred leader, when it is a voter here and this node is not it.
  if (!e.replicas.empty() && e.replicas.front() != self_) {
    const member* pref = find(conf, e.replicas.front());
    const cluster::node_config* node = cfg_.node_of(e.replicas.front());
    const bool heard =
        node != nullptr && std::find(st.heard.begin(), st.heard.end(), node->id) != st.heard.end();
    if (pref != nullptr && pref->role == member_role::voter && heard) {
      hand_over(e.replicas.front(), "hand the leadership to the preferred leader");
    }
  }
}

}  // namespace onceq::cmd
