#include "broker/delivery.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "base/hash.hpp"
#include "broker/errors.hpp"
#include "broker/records.hpp"
#include "broker/validation.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

millis backoff_of(const topic& t, const open_delivery& d) {
  return retry_delay(d.attempts, d.backoff_ms >= 0 ? d.backoff_ms : t.rec.settings.backoff_ms,
                     d.max_backoff_ms >= 0 ? d.max_backoff_ms : t.rec.settings.max_backoff_ms);
}

// One consume being planned: what it has taken so far, without touching the
// group (the group changes when the txn commits).
class consume_planner {
 public:
  consume_planner(core& c, topic& t, group_state& g, const consume_cmd& cmd, millis lease_ms,
                  millis now, txn& tx)
      : c_(c), t_(t), g_(g), cmd_(cmd), lease_ms_(lease_ms), now_(now), tx_(tx) {
    const auto n = t.parts.size();
    cursor_.resize(n);
    ready_at_.resize(n);
    for (std::size_t p = 0; p < n; ++p) {
      cursor_[p] = g.parts[p].cursor;
      ready_at_[p] = g.parts[p].ready.begin();
    }
    fence_ = g.fence;
    open_run_.assign(n, k_no_run);
    lease_runs_.resize(n);
    const auto max = static_cast<std::uint64_t>(cmd.max_messages);
    want_ = max;
    // The consumer's own deadline: nothing is delivered at or after it.
    if (cmd.deadline_ms && *cmd.deadline_ms <= now) want_ = 0;
    if (t.rec.settings.max_inflight > 0) {
      auto cap = static_cast<std::uint64_t>(t.rec.settings.max_inflight);
      want_ = std::min(want_, cap > g.stats.inflight ? cap - g.stats.inflight : 0);
    }
    // At most a delivery record, an effect and an answer a message it may
    // take, the cursors, the lease runs and the fence (nothing for a
    // consume that finds nothing).
    std::uint64_t avail = 0;
    for (std::size_t p = 0; p < n; ++p)
      avail += g.parts[p].ready.size() + (t.parts[p].next - cursor_[p]);
    if (const auto expect = std::min(want_, avail); expect > 0) {
      tx.reserve(expect + 2 * n + 1, expect + n + 1);
      out_.reserve(expect);
    }
  }

  result<std::vector<delivery>> run() {
    const auto n = static_cast<std::uint32_t>(t_.parts.size());
    // Round robin, one message per partition per round, so that one busy
    // partition does not starve the others. The first partition follows
    // from the group's last fencing token (one per delivery, stored with
    // it), not from a counter in memory: a consume that delivers nothing
    // changes nothing, and a replica restarted from its store takes the
    // same partitions as one that never stopped (docs/REPLICATION.md).
    bool progress = true;
    std::uint32_t rr = static_cast<std::uint32_t>(g_.fence % n);
    while (progress && out_.size() < want_) {
      progress = false;
      for (std::uint32_t i = 0; i < n && out_.size() < want_; ++i) {
        auto r = take_one((rr + i) % n);
        if (!r.ok()) return std::move(r).err();
        progress = progress || *r;
      }
      rr = (rr + 1) % n;
    }
    // Cursors that moved are written once, not once per message taken.
    auto* g = &g_;
    for (std::uint32_t p = 0; p < n; ++p) {
      if (cursor_[p] == g_.parts[p].cursor) continue;
      put_cursor(tx_, t_, g_, p, cursor_[p]);
      tx_.then([g, p, c = cursor_[p]] { g->parts[p].cursor = c; });
    }
    put_lease_runs();
    push_lease_timers();
    if (fence_ != g_.fence) {
      // In the batch of the deliveries that use them: a token is never
      // handed out twice, whatever crashes or expiries come after.
      tx_.batch().put(column::meta, st::keys::fence(t_.rec.id, g_.id), st::encode_u64(fence_));
      tx_.then([g, f = fence_] { g->fence = f; });
    }
    return std::move(out_);
  }

 private:
  // Delivers at most one message of partition p: redeliveries first (they
  // are older), then the next fresh offset. Held-back messages are set aside
  // so that they never block the partition.
  result<bool> take_one(std::uint32_t p) {
    auto& ps = g_.parts[p];
    auto& part = t_.parts[p];
    for (;;) {
      std::uint64_t off;
      if (ready_at_[p] != ps.ready.end()) {
        off = *ready_at_[p]++;
        tx_.then([ps = &ps, off] { ps->ready.erase(off); });
        auto it = ps.open.find(off);
        if (it == ps.open.end() || it->second.state != st::delivery_state::pending ||
            it->second.parked || it->second.order_parked)
          continue;
      } else if (cursor_[p] < part.next) {
        off = cursor_[p]++;
        // This partition's share of the consume, so that round robin over
        // many partitions does not read far ahead on each.
        ONCEQ_TRY(
            part.read_ahead(c_.store, off, message_count{(want_ - out_.size()) / t_.parts.size()}));
      } else {
        return false;
      }
      auto r = try_deliver(position{p, off});
      if (!r.ok() || *r) return r;
    }
  }

  // Tries to hand the message at pos to the owner; true if it was.
  result<bool> try_deliver(position pos) {
    auto* g = &g_;
    auto* t = &t_;
    auto& ps = g_.parts[pos.partition];
    auto m = t_.parts[pos.partition].read(c_.store, pos.offset);
    if (!m.ok() && m.code() != errc::not_found) return std::move(m).err();
    const auto retention = t_.rec.settings.retention_ms;
    if (!m.ok() || (retention > 0 && m->produced_at_ms + retention <= now_)) {
      // Deleted or expired: never delivered again, whatever the retention
      // run's pace.
      const auto it = ps.open.find(pos.offset);
      const open_delivery* od = it == ps.open.end() ? nullptr : &it->second;
      if (od != nullptr && !od->okey.empty()) order_table::release(order_view(od->okey), pos);
      // A fresh offset (no open delivery) has no record to end.
      if (od != nullptr) put_ownerless_end(tx_, t_, g_, pos, *od, now_);
      tx_.then([&c = c_, t, g, pos, now = now_] { drop_open(c, *t, *g, pos, now); });
      return false;
    }
    auto existing = ps.open.find(pos.offset);
    const bool fresh = existing == ps.open.end();
    open_delivery d = fresh ? open_delivery{} : existing->second;
    if (!d.known) d.fill_from(*m, scope_of(t_, g_, *m));
    d.okey = order_key_of(t_, *m);
    if (!d.okey.empty()) {
      // Ordering: one delivery of the key at a time, in position order. An
      // earlier message holds the key: this one waits, off the partition's
      // way. Else it holds the key from now on, through its delay, backoff
      // and redeliveries, until it ends.
      auto& e = order_view(d.okey);
      if (e.holder && *e.holder != pos) {
        order_table::park(e, pos);
        d.order_parked = true;
        // A fresh offset needs its record (the cursor moves past it); an
        // open one has it already, and parking is not stored (recovery
        // parks again): rewriting it would be a write that changes nothing,
        // which moves a replica's applied position (one replica parks here
        // while one that restarted finds it parked already).
        if (fresh) put_delivery(tx_, t_, g_, pos, d);
        tx_.then([g, pos, d = std::move(d)]() mutable {
          auto okey = d.okey;
          g->parts[pos.partition].open[pos.offset] = std::move(d);
          g->order.park(okey, pos);
        });
        return false;
      }
      if (!e.holder) {
        order_table::hold(e, pos);
        tx_.then([g, okey = d.okey, pos] { g->order.hold(okey, pos); });
      }
    }

    if (m->deliver_at_ms > now_ && d.not_before_ms < m->deliver_at_ms) {
      d.not_before_ms = m->deliver_at_ms;
      put_delivery(tx_, t_, g_, pos, d);
      tx_.then([&c = c_, t, g, pos, d = std::move(d), now = now_]() mutable {
        auto& slot = g->parts[pos.partition].open[pos.offset];
        slot = std::move(d);
        if (g->schedule(t->rec.id, pos, slot, now, c.timers)) c.ready_topics.insert(t->rec.name);
      });
      return false;
    }
    if (!d.scope.empty() && supersedes(t_)) {
      auto r = superseded(pos, d, fresh);
      if (!r.ok() || *r) return r.ok() ? result<bool>(false) : std::move(r).err();
    }
    if (!d.scope.empty()) {
      auto mine = leased_.find(d.scope);
      if (g_.keys.held_by_other(d.scope, pos) || (mine != leased_.end() && mine->second != pos)) {
        d.parked = true;
        if (fresh) put_delivery(tx_, t_, g_, pos, d);  // as for order_parked above
        tx_.then([g, pos, d = std::move(d)]() mutable {
          auto scope = d.scope;
          g->parts[pos.partition].open[pos.offset] = std::move(d);
          g->keys.park(scope, pos);
        });
        return false;
      }
      auto k = key_table::live(c_.store, d.scope, now_);
      if (k.ok() && k->state == st::key_state::committed) {
        // Auto-ack: a message whose key is committed is never delivered.
        // Under replay_window_ms its end is recorded, so that retention
        // keeps it for the window like an acked one.
        if (t_.rec.settings.replay_window_ms > 0 || !fresh)
          put_ownerless_end(tx_, t_, g_, pos, d, now_);
        auto ev = history_event_at(st::history_kind::duplicate_auto_acked, now_, pos);
        ev.attempts = d.attempts;
        ev.fencing_token = k->fencing_token;  // the delivery's that committed the key
        note_history(tx_, t_, d.scope, key_ttl_of(t_, d), std::move(ev));
        if (!d.okey.empty()) order_table::release(order_view(d.okey), pos);
        tx_.then([&c = c_, t, g, pos, okey = d.okey, now = now_] {
          ++g->stats.auto_acked;
          g->close(pos);
          if (g->release_order(t->rec.id, okey, pos, now, c.timers))
            c.ready_topics.insert(t->rec.name);
        });
        return false;
      }
      if (!k.ok() && k.code() != errc::not_found) return std::move(k).err();
      leased_[d.scope] = pos;
    }
    d.state = st::delivery_state::leased;
    d.owner = cmd_.owner;
    ++d.attempts;
    d.lease_deadline_ms = now_ + lease_ms_;
    d.not_before_ms = 0;
    d.fencing_token = ++fence_;
    if (fresh && d.attempts == 1 && d.last_error.empty()) {
      // A first lease: one record per partition for the whole consume.
      auto& run = lease_runs_[pos.partition];
      run.push_back({pos.offset, d.fencing_token});
      d.run_first = run.front().offset;
    } else {
      put_delivery(tx_, t_, g_, pos, d);
    }
    note_leased(pos);
    if (!d.scope.empty())
      note_history(tx_, t_, d.scope, key_ttl_of(t_, d),
                   delivery_event(st::history_kind::leased, now_, pos, d));

    delivery out;
    out.topic = t_.rec.name;
    out.partition = pos.partition;
    out.offset = pos.offset;
    out.attempts = d.attempts;
    out.key = std::move(m->key);
    out.value = std::move(m->value);
    out.last_error = d.last_error;
    out.envelope_json = std::move(m->envelope_json);
    out.dlq = std::move(m->dlq);
    out.lease_expires_at_ms = d.lease_deadline_ms;
    out.fencing_token = d.fencing_token;
    out_.push_back(std::move(out));

    tx_.then([g, pos, d = std::move(d)]() mutable {
      auto& slot = g->parts[pos.partition].open[pos.offset];
      slot = std::move(d);
      if (!slot.scope.empty()) g->keys.lease(slot.scope, pos);
      ++g->stats.inflight;
      ++g->stats.delivered;
      if (slot.attempts > 1) ++g->stats.redelivered;
    });
    return true;
  }

  // key_conflict supersede: the message at pos is acknowledged as superseded
  // when a newer message with its key was stored (keys::latest_of). True if
  // it was.
  result<bool> superseded(position pos, const open_delivery& d, bool fresh) {
    auto newer = newer_with_key(c_, d.scope, pos, now_);
    if (!newer.ok() || !*newer) return newer;
    if (!fresh) put_ownerless_end(tx_, t_, g_, pos, d, now_);
    auto ev = history_event_at(st::history_kind::superseded, now_, pos);
    ev.attempts = d.attempts;
    ev.reason = "superseded";
    note_history(tx_, t_, d.scope, key_ttl_of(t_, d), std::move(ev));
    auto* g = &g_;
    auto* t = &t_;
    if (!d.okey.empty()) order_table::release(order_view(d.okey), pos);
    tx_.then([&c = c_, t, g, pos, okey = d.okey, now = now_] {
      ++g->stats.superseded;
      drop_open(c, *t, *g, pos, now);
      // A fresh message has no open delivery for drop_open to end.
      if (g->release_order(t->rec.id, okey, pos, now, c.timers)) c.ready_topics.insert(t->rec.name);
    });
    return true;
  }

  // Key's entry in the ordering table as this consume's txn leaves it: the
  // group's, then the same steps its effects will take.
  order_table::entry& order_view(const std::string& key) {
    auto it = order_view_.find(key);
    if (it == order_view_.end()) it = order_view_.emplace(key, g_.order.get(key)).first;
    return it->second;
  }

  // Every lease this consume makes ends at now_ + lease_ms_, so one timer
  // covers a run of them (timers.hpp): one per partition for fresh
  // messages, whose offsets follow each other. A lease more than
  // k_timer_gap past its partition's open run, or before it, starts a new
  // run, so that a timer never walks far past what it leased (a
  // redelivery far behind the fresh ones).
  void note_leased(position pos) {
    static constexpr std::uint64_t k_timer_gap = 16;
    auto& open = open_run_[pos.partition];
    if (open != k_no_run) {
      auto& r = runs_[open];
      if (pos.offset >= r.pos.offset && pos.offset <= r.last_offset() + k_timer_gap) {
        r.last = std::max(r.last_offset(), pos.offset);
        return;
      }
    }
    open = runs_.size();
    runs_.push_back(timer{now_ + lease_ms_, timer_kind::lease, t_.rec.id, g_.id, pos, pos.offset});
  }

  // The first leases, a record per partition (storage::lease_run_record):
  // a drained message costs one delivery record (its ack's), not two, and
  // none when its key's record says it all (broker::ack_batch).
  void put_lease_runs() {
    for (std::uint32_t p = 0; p < lease_runs_.size(); ++p) {
      auto& members = lease_runs_[p];
      if (members.empty()) continue;
      const auto first = members.front().offset;
      const group_partition::run_span span{members.back().offset, members.size()};
      tx_.batch().put(
          column::deliveries, st::keys::lease_run(t_.rec.id, g_.id, p, first),
          st::encode(st::lease_run_record{cmd_.owner, now_ + lease_ms_, std::move(members)}));
      tx_.then([g = &g_, p, first, span] { g->parts[p].runs.emplace(first, span); });
    }
  }

  void push_lease_timers() {
    if (runs_.empty()) return;
    tx_.then([&c = c_, runs = std::move(runs_)] {
      for (const auto& r : runs) c.timers.push(r);
    });
  }

  core& c_;
  topic& t_;
  group_state& g_;
  const consume_cmd& cmd_;
  millis lease_ms_;
  millis now_;
  txn& tx_;
  std::uint64_t want_ = 0;
  std::uint64_t fence_ = 0;  // the last token this consume handed out
  std::vector<std::uint64_t> cursor_;
  std::vector<std::set<std::uint64_t>::const_iterator> ready_at_;
  // The lease timers this consume will push, and per partition the index
  // of the run its next lease may extend.
  static constexpr std::size_t k_no_run = static_cast<std::size_t>(-1);
  std::vector<timer> runs_;
  std::vector<std::size_t> open_run_;
  // Per partition, the fresh messages this consume leased, in offset order.
  std::vector<std::vector<st::lease_run_record::member>> lease_runs_;
  std::unordered_map<std::string, position, string_hash, std::equal_to<>>
      leased_;                                            // keys leased by this consume
  std::map<std::string, order_table::entry> order_view_;  // ordering keys it touched
  std::vector<delivery> out_;
};

// Moves the message at pos to dlq.<topic> and marks the delivery dead. The
// key, if any, is left failed.
result<void> dead_letter(core& c, topic& t, group_state& g, position pos, open_delivery& d,
                         millis now, txn& tx) {
  auto m = t.parts[pos.partition].read(c.store, pos.offset);
  if (!m.ok() && m.code() != errc::not_found) return std::move(m).err();
  if (m.ok()) {  // not_found: retention deleted it, nothing to copy
    auto* dt = &ensure_dlq_topic(c, t, tx);
    st::message_record copy = std::move(*m);
    copy.dlq = st::dlq_origin{t.rec.name, pos.partition, pos.offset, d.attempts, d.last_error, now};
    copy.deliver_at_ms = 0;
    auto off = tx.append_offset(dt->parts[0]);
    tx.batch().put(column::messages, st::keys::message(dt->rec.id, 0, off), st::encode(copy));
    tx.then([&c, dt] {
      ++dt->produced;
      c.ready_topics.insert(dt->rec.name);
    });
  }
  d.state = st::delivery_state::dead;
  auto rec = d.record();
  rec.ended_at_ms = now;
  tx.batch().put(column::deliveries, st::keys::delivery(t.rec.id, g.id, pos.partition, pos.offset),
                 st::encode(rec));
  return {};
}

}  // namespace

result<std::vector<delivery>> plan_consume(core& c, topic& t, group_state& g,
                                           const consume_cmd& cmd, millis lease_ms, millis now,
                                           txn& tx) {
  return consume_planner(c, t, g, cmd, lease_ms, now, tx).run();
}

error reject_stale(group_state& g, txn& tx, std::string message) {
  tx.then([g = &g] { ++g->stats.stale_acks_rejected; });
  return fenced(std::move(message));
}

result<located> locate(core& c, const delivery_ref& ref, txn& tx) {
  ONCEQ_TRY(validate_topic_name(ref.topic));
  ONCEQ_TRY(validate_label("group", ref.group));
  ONCEQ_TRY(validate_label("owner", ref.owner));
  auto* t = c.topics.find(ref.topic);
  if (t == nullptr) return topic_not_found(ref.topic);
  if (ref.partition >= t->parts.size())
    return make_error(
        errc::invalid_argument,
        fmt::format("partition {} out of range (topic has {})", ref.partition, t->parts.size()));
  auto* g = t->find_group(ref.group);
  if (g == nullptr) return fenced("the message was never delivered to this group");
  auto& ps = g->parts[ref.partition];
  if (ref.offset >= ps.cursor)
    return reject_stale(*g, tx, "the message was never delivered to this group");
  position pos{ref.partition, ref.offset};
  return located{t, g, pos, g->find(pos)};
}

result<void> check_holder(const located& l, const delivery_ref& ref, txn& tx) {
  const auto& d = *l.d;
  if (d.owner != ref.owner || d.attempts == 0)
    return reject_stale(*l.g, tx, fmt::format("delivery is not held by owner '{}'", ref.owner));
  if (ref.attempts && *ref.attempts != d.attempts)
    return reject_stale(*l.g, tx,
                        fmt::format("stale delivery: attempts {} but the current delivery is {}",
                                    *ref.attempts, d.attempts));
  if (ref.fencing_token && *ref.fencing_token != d.fencing_token)
    return reject_stale(*l.g, tx,
                        fmt::format("stale fencing token {}: the current delivery's is {}",
                                    *ref.fencing_token, d.fencing_token));
  // A lapsed delivery can still be finished by its owner if nobody else got
  // the message since; but not if another delivery holds its key now.
  if (d.parked || (!d.scope.empty() && l.g->keys.held_by_other(d.scope, l.pos)))
    return reject_stale(*l.g, tx, "the message's idempotency key is leased by another delivery");
  return {};
}

result<void> fail_attempt(core& c, topic& t, group_state& g, position pos, open_delivery d,
                          std::optional<millis> delay, bool nacked, millis now, txn& tx) {
  const bool was_leased = d.state == st::delivery_state::leased;
  d.state = st::delivery_state::pending;
  const auto max = max_attempts_of(t, d);
  const bool exhausted = max > 0 && d.attempts >= max;
  if (!d.scope.empty() && (nacked || exhausted)) {
    // A committed key (by another message) must not be overwritten.
    auto k = key_table::live(c.store, d.scope, now);
    if (!k.ok() && k.code() != errc::not_found) return std::move(k).err();
    if (!k.ok()) {
      tx.batch().put(column::keys, d.scope,
                     st::encode(key_record_of(t, d, pos, st::key_state::failed, now)));
    }
  }
  if (!d.scope.empty() && (nacked || was_leased)) {
    auto kind = nacked ? st::history_kind::nacked : st::history_kind::lease_expired;
    auto ev = delivery_event(kind, now, pos, d);
    ev.reason = d.last_error;
    note_history(tx, t, d.scope, key_ttl_of(t, d), std::move(ev));
  }
  if (!d.scope.empty() && exhausted) {
    auto ev = delivery_event(st::history_kind::failed, now, pos, d);
    ev.reason = "dead-lettered";
    note_history(tx, t, d.scope, key_ttl_of(t, d), std::move(ev));
  }
  auto* tp = &t;
  auto* g_ = &g;
  if (exhausted) {
    ONCEQ_TRY(dead_letter(c, t, g, pos, d, now, tx));
    tx.then([&c, tp, g_, pos, scope = d.scope, okey = d.okey, now] {
      ++g_->stats.dead_lettered;
      g_->close(pos);
      bool ready = g_->release_key(tp->rec.id, scope, pos, now, c.timers);
      // Dead-lettering releases the next message of its ordering key.
      ready = g_->release_order(tp->rec.id, okey, pos, now, c.timers) || ready;
      if (ready) c.ready_topics.insert(tp->rec.name);
    });
    return {};
  }
  d.not_before_ms = now + (delay ? *delay : backoff_of(t, d));
  put_delivery(tx, t, g, pos, d);
  tx.then([&c, tp, g_, pos, d = std::move(d), was_leased, now]() mutable {
    if (was_leased && g_->stats.inflight > 0) --g_->stats.inflight;
    auto scope = d.scope;
    auto& slot = g_->parts[pos.partition].open[pos.offset];
    slot = std::move(d);
    bool ready = g_->schedule(tp->rec.id, pos, slot, now, c.timers);
    ready = g_->release_key(tp->rec.id, scope, pos, now, c.timers) || ready;
    if (ready) c.ready_topics.insert(tp->rec.name);
  });
  return {};
}

std::string scope_of(const topic& t, const group_state& g, const st::message_record& m) {
  return m.idempotency_key.empty()
             ? std::string()
             : st::keys::idem_key(t.rec.id, g.id, m.tenant_id, m.idempotency_key);
}

std::string order_key_of(const topic& t, const st::message_record& m) {
  if (t.rec.settings.ordering != static_cast<std::uint8_t>(topic_settings::ordering_mode::key) ||
      !m.key)
    return {};
  // Never "" for a message with a key (even an empty one).
  std::string k = m.tenant_id;
  k += '\0';
  k += *m.key;
  return k;
}

bool supersedes(const topic& t) {
  return t.rec.settings.key_conflict ==
         static_cast<std::uint8_t>(topic_settings::conflict::supersede);
}

result<bool> newer_with_key(core& c, const std::string& scope, position pos, millis now) {
  auto v = c.store.get(column::keys, st::keys::latest_of(scope));
  if (!v.ok()) return v.code() == errc::not_found ? result<bool>(false) : std::move(v).err();
  auto l = st::decode_latest(*v);
  if (!l.ok()) return std::move(l).err();
  if (l->expires_at_ms != 0 && l->expires_at_ms <= now) return false;
  return position{l->partition, l->offset} != pos;
}

void drop_open(core& c, topic& t, group_state& g, position pos, millis now) {
  auto* d = g.find(pos);
  if (d == nullptr) return;
  auto scope = d->scope;
  auto okey = d->okey;
  g.close(pos);
  bool ready = g.release_key(t.rec.id, scope, pos, now, c.timers);
  ready = g.release_order(t.rec.id, okey, pos, now, c.timers) || ready;
  if (ready) c.ready_topics.insert(t.rec.name);
}

topic& ensure_dlq_topic(core& c, const topic& t, txn& tx) {
  std::string name = dlq_topic_of(t.rec.name);
  if (auto* d = c.topics.find(name, tx)) return *d;
  st::topic_record rec;
  rec.name = name;
  rec.partitions = 1;
  rec.settings = t.rec.settings;
  rec.settings.max_attempts = 0;
  // A DLQ takes every dead letter: the origin's backpressure caps are not its own.
  rec.settings.max_backlog_messages = 0;
  rec.settings.max_backlog_bytes = 0;
  rec.created_at_ms = c.time.now_ms();
  return c.topics.create(std::move(rec), tx);
}

void put_delivery_record(txn& tx, const topic& t, const group_state& g, position pos,
                         const open_delivery& d) {
  tx.batch().put(column::deliveries, st::keys::delivery(t.rec.id, g.id, pos.partition, pos.offset),
                 st::encode(d.record()));
}

void put_delivery(txn& tx, const topic& t, group_state& g, position pos, open_delivery& d) {
  put_delivery_record(tx, t, g, pos, d);
  if (d.run_first == open_delivery::k_no_run) return;
  // A record of its own from now on: its run no longer speaks for it.
  tx.then([ps = &g.parts[pos.partition],
           first = std::exchange(d.run_first, open_delivery::k_no_run)] { ps->leave_run(first); });
}

void put_ownerless_end(txn& tx, const topic& t, const group_state& g, position pos,
                       const open_delivery& d, millis now) {
  auto rec = d.record();
  rec.state = st::delivery_state::acked;
  rec.owner.clear();  // nobody's ack: a lapsed owner's late ack stays refused
  rec.ended_at_ms = now;
  tx.batch().put(column::deliveries, st::keys::delivery(t.rec.id, g.id, pos.partition, pos.offset),
                 st::encode(rec));
}

void put_cursor(txn& tx, const topic& t, const group_state& g, std::uint32_t p,
                std::uint64_t cursor) {
  tx.batch().put(column::meta, st::keys::cursor(t.rec.id, g.id, p), st::encode_u64(cursor));
}

void note_history(txn& tx, const topic& t, const std::string& scope, millis key_ttl,
                  st::history_event ev) {
  if (!t.rec.settings.key_history || scope.empty()) return;
  const millis expires = key_ttl == 0 ? 0 : ev.at_ms + key_ttl;
  tx.record(st::keys::history_of(scope), expires, std::move(ev));
}

st::history_event history_event_at(st::history_kind kind, millis at, position pos) {
  st::history_event ev;
  ev.kind = kind;
  ev.at_ms = at;
  ev.partition = pos.partition;
  ev.offset = pos.offset;
  return ev;
}

st::history_event delivery_event(st::history_kind kind, millis at, position pos,
                                 const open_delivery& d) {
  st::history_event ev = history_event_at(kind, at, pos);
  ev.owner = d.owner;
  ev.attempts = d.attempts;
  ev.fencing_token = d.fencing_token;
  return ev;
}

st::key_record key_record_of(const topic& t, const open_delivery& d, position pos,
                             st::key_state state, millis now) {
  st::key_record kr;
  kr.state = state;
  kr.owner = d.owner;
  kr.partition = pos.partition;
  kr.offset = pos.offset;
  kr.attempts = d.attempts;
  kr.fencing_token = d.fencing_token;
  if (state == st::key_state::committed) kr.committed_at_ms = now;
  auto ttl = key_ttl_of(t, d);
  kr.expires_at_ms = ttl == 0 ? 0 : now + ttl;
  return kr;
}

std::int64_t max_attempts_of(const topic& t, const open_delivery& d) {
  return d.max_attempts >= 0 ? d.max_attempts : t.rec.settings.max_attempts;
}

millis key_ttl_of(const topic& t, const open_delivery& d) {
  return d.key_ttl_ms >= 0 ? d.key_ttl_ms : t.rec.settings.key_ttl_ms;
}

}  // namespace onceq
