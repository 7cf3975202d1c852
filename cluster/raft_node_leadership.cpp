// raft_node: barrier, transfer, rebalance, the start of a term, and the status published after
// every loop iteration (raft_node_impl.hpp).

#include "cluster/raft_node_impl.hpp"

namespace onceq::cluster {

result<void> raft_node::impl::barrier(unsigned g, op_cb cb) {
  if (g >= groups_.size()) return no_group(g);
  group* gp = groups_[g].get();
  return post([this, gp, cb = std::move(cb)]() mutable { start_barrier(*gp, std::move(cb)); });
}

result<void> raft_node::impl::read(unsigned g, bool fresh, op_cb cb) {
  if (g >= groups_.size()) return no_group(g);
  group* gp = groups_[g].get();
  return post([this, gp, fresh, cb = std::move(cb)]() mutable {
    group& grp = *gp;
    if (grp.closing) return deliver(cb, closing_answer(grp));
    if (!grp.failure.empty()) {
      return deliver(cb,
                     fail(raft_errc::failed, fmt::format("group {}: {}", grp.index, grp.failure)));
    }
    if (!grp.raft_ready) {
      return deliver(cb,
                     fail(raft_errc::not_leader,
                          fmt::format("group {}: this node holds no replica of it", grp.index)));
    }
    if (fresh && (raft_state(&grp.r) != RAFT_LEADER || grp.ready_term != grp.r.current_term ||
                  grp.r.transfer != nullptr)) {
      op_result r = fail(raft_errc::not_leader,
                         fmt::format("group {}: this node does not lead it", grp.index));
      if (raft_state(&grp.r) != RAFT_LEADER) r.leader = leader_name(grp);
      return deliver(cb, std::move(r));
    }
    deliver(cb, op_result{});
  });
}

result<void> raft_node::impl::transfer(unsigned g, std::string_view to_node, op_cb cb) {
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

result<void> raft_node::impl::rebalance() {
  return post([this] {
    for (auto& g : groups_) {
      const ::raft_id to = cfg_.preferred_leader(g->index);
      if (!running(*g) || raft_state(&g->r) != RAFT_LEADER || to == cfg_.self_raft_id() ||
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

std::string raft_node::impl::leader_name(group& g) {
  if (!g.raft_ready) return {};
  ::raft_id id = 0;
  const char* address = nullptr;
  raft_leader(&g.r, &id, &address);
  const node_config* n = cfg_.node_of(id);
  return n != nullptr ? n->id : std::string();
}

void raft_node::impl::start_barrier(group& g, op_cb cb) {
  if (g.closing) return deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
  if (!g.raft_ready || raft_state(&g.r) != RAFT_LEADER) {
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
    deliver(done,
            fail(code_of(rv), fmt::format("group {}: raft_barrier: {}", g.index, raft_strerror(rv)),
                 rv == RAFT_NOTLEADER ? leader_name(g) : std::string()));
  }
}

void raft_node::impl::on_barrier(struct raft_barrier* req, int status) {
  auto* op = static_cast<barrier_op*>(req->data);
  op_cb cb = std::move(op->cb);
  delete op;
  if (status == 0) return deliver(cb, op_result{});
  deliver(cb, fail(code_of(status), fmt::format("barrier: {}", raft_strerror(status))));
}

void raft_node::impl::start_transfer(group& g, ::raft_id target, op_cb cb) {
  if (g.closing) return deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
  if (!g.raft_ready || raft_state(&g.r) != RAFT_LEADER) {
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

void raft_node::impl::on_transfer(struct raft_transfer* req) {
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

bool raft_node::impl::settle_transfer(group& g, transfer_op& op) {
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

void raft_node::impl::open_term(group& g) {
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

void raft_node::impl::after_iteration() {
  for (auto& g : groups_) {
    if (!running(*g)) continue;
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
    note_role(*g);
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

void raft_node::impl::note_role(group& g) {
  const int state = raft_state(&g.r);
  ::raft_id leader = 0;
  const char* address = nullptr;
  raft_leader(&g.r, &leader, &address);
  if (state == g.logged_state && g.r.current_term == g.logged_term && leader == g.logged_leader) {
    return;
  }
  g.logged_state = state;
  g.logged_term = g.r.current_term;
  g.logged_leader = leader;
  const node_config* n = cfg_.node_of(leader);
  log(log_level::info, k_log,
      state == RAFT_LEADER      ? "leads the group"
      : state == RAFT_CANDIDATE ? "stands for election"
                                : "follows",
      {log_number("group", g.index),
       log_number("term", g.r.current_term),
       {"leader", n != nullptr ? n->id : std::string()},
       log_number("last_index", raft_last_index(&g.r)),
       log_number("commit_index", g.r.commit_index),
       log_number("last_applied", raft_last_applied(&g.r))});
}

void raft_node::impl::publish() {
  std::lock_guard lock(status_mu_);
  for (auto& g : groups_) {
    published& p = published_[g->index];
    if (!g->raft_ready || g->closed) continue;
    p.open = true;
    // Rebuilt only when the configuration changed (no allocation per turn).
    const auto& conf = g->r.configuration;
    auto role = [](int r) {
      return r == RAFT_VOTER     ? member_role::voter
             : r == RAFT_STANDBY ? member_role::standby
                                 : member_role::spare;
    };
    bool same = p.members.size() == conf.n;
    for (unsigned i = 0; same && i < conf.n; ++i) {
      same =
          p.members[i].id == conf.servers[i].id && p.members[i].role == role(conf.servers[i].role);
    }
    if (!same) {
      p.members.clear();
      for (unsigned i = 0; i < conf.n; ++i) {
        p.members.push_back(member{conf.servers[i].id, role(conf.servers[i].role), 0});
      }
    }
    const bool leading = raft_state(&g->r) == RAFT_LEADER;
    for (unsigned i = 0; i < conf.n; ++i) {
      p.members[i].match_index = leading ? g->r.leader_state.progress[i].match_index : 0;
    }
    const char* address = nullptr;
    raft_leader(&g->r, &p.leader, &address);
    p.is_leader = raft_state(&g->r) == RAFT_LEADER;
    if (g->r.current_term != p.term) ++p.terms_seen;
    p.heard.clear();
    if (p.is_leader) {
      for (unsigned i = 0; i < g->r.configuration.n; ++i) {
        const ::raft_id id = g->r.configuration.servers[i].id;
        if (id == cfg_.self_raft_id() || g->r.leader_state.progress[i].recent_recv) {
          p.heard.push_back(id);
        }
      }
    }
    p.leader_ready = p.is_leader && g->ready_term == g->r.current_term;
    p.term = g->r.current_term;
    p.commit_index = g->r.commit_index;
    p.last_applied = raft_last_applied(&g->r);
    p.last_index = raft_last_index(&g->r);
    p.proposals = g->proposals;
    p.apply_calls = g->apply_calls;
    p.restores = g->restores;
    p.restored_bytes = g->restored_bytes;
    if (p.failure != g->failure) p.failure = g->failure;
  }
}

}  // namespace onceq::cluster
