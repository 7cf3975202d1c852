// broker::ack_batch, nack and extend: the commands that finish or prolong a
// delivery, after fencing (broker/delivery.hpp).

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "broker/broker.hpp"
#include "broker/core.hpp"
#include "broker/delivery.hpp"
#include "broker/errors.hpp"
#include "broker/key_table.hpp"
#include "broker/step.hpp"
#include "broker/validation.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

// Commits tx (its batch is empty: only counters) and returns e.
template <class T = void>
result<T> rejected(core& c, txn& tx, error e) {
  [[maybe_unused]] auto ignored = tx.commit(c.store);  // no write: cannot fail
  return e;
}

// A set of at most one ack batch's entries: a sorted vector, reserved once,
// instead of a node per entry.
template <class T>
class small_set {
 public:
  explicit small_set(std::size_t n) { v_.reserve(n); }
  bool contains(const T& x) const { return std::binary_search(v_.begin(), v_.end(), x); }
  void insert(T x) {
    auto it = std::lower_bound(v_.begin(), v_.end(), x);
    if (it == v_.end() || *it != x) v_.insert(it, std::move(x));
  }

 private:
  std::vector<T> v_;
};

// The group an ack batch names, if it exists (to count a rejection after
// its staged changes were rolled back).
group_state* loc_group(core& c, const ack_batch_cmd& cmd) {
  auto* t = c.topics.find(cmd.topic);
  return t == nullptr ? nullptr : t->find_group(cmd.group);
}

// The committed record of the key of the message at pos, if a delivery of
// that message committed it; none if the message is gone or has no key.
result<std::optional<st::key_record>> committed_here(core& c, const topic& t, const group_state& g,
                                                     position pos, millis now) {
  using answer = std::optional<st::key_record>;
  auto m = t.parts[pos.partition].read(c.store, pos.offset);
  if (!m.ok()) return m.code() == errc::not_found ? result<answer>(answer{}) : std::move(m).err();
  const auto scope = scope_of(t, g, *m);
  if (scope.empty()) return answer{};
  auto k = key_table::live(c.store, scope, now);
  if (!k.ok()) return k.code() == errc::not_found ? result<answer>(answer{}) : std::move(k).err();
  if (k->state != st::key_state::committed || k->partition != pos.partition ||
      k->offset != pos.offset)
    return answer{};
  return answer{std::move(*k)};
}

// What the ack that committed the key of the message at pos produced, if
// the key is committed by that delivery (fencing_token) and says.
result<std::optional<std::vector<step_produced>>> produced_by(core& c, const topic& t,
                                                              const group_state& g, position pos,
                                                              std::uint64_t fencing_token,
                                                              millis now) {
  using answer = std::optional<std::vector<step_produced>>;
  auto k = committed_here(c, t, g, pos, now);
  if (!k.ok()) return std::move(k).err();
  if (!*k || (*k)->fencing_token != fencing_token) return answer{};
  return answer{step_produced_of((*k)->produced)};
}

// The key record that shows owner acked the delivery at pos (with a's
// fences), where no delivery record was kept: a keyed first lease acked
// with the last of its lease run leaves only its key record, which names
// the same owner, attempts and fencing token (docs/DESIGN.md, "Lease
// runs").
result<std::optional<st::key_record>> acked_by_key(core& c, const topic& t, const group_state& g,
                                                   position pos, const std::string& owner,
                                                   const ack_item& a, millis now) {
  auto k = committed_here(c, t, g, pos, now);
  if (!k.ok() || !*k) return k;
  const auto& kr = **k;
  if (kr.owner != owner || (a.attempts && *a.attempts != kr.attempts) ||
      (a.fencing_token && *a.fencing_token != kr.fencing_token))
    return std::optional<st::key_record>{};
  return k;
}

}  // namespace

result<ack_outcome> broker::ack(const ack_cmd& cmd) {
  ack_batch_cmd batch{cmd.ref.topic,
                      cmd.ref.group,
                      cmd.ref.owner,
                      {ack_item{cmd.ref.partition, cmd.ref.offset, cmd.ref.attempts,
                                cmd.result_json, cmd.ref.fencing_token, cmd.produce}}};
  auto r = ack_batch(batch);
  if (!r.ok()) return std::move(r).err();
  auto& o = r->front();
  if (o.code != errc::ok) return make_error(o.code, o.message);
  return std::move(o);
}

result<std::vector<ack_outcome>> broker::ack_batch(const ack_batch_cmd& cmd) {
  auto& c = *c_;
  if (cmd.acks.empty() || cmd.acks.size() > c.opts.max_batch)
    return make_error(errc::invalid_argument,
                      fmt::format("an ack carries 1..{} acks", c.opts.max_batch));
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  if (c.topics.find(cmd.topic) == nullptr) return topic_not_found(cmd.topic);
  ONCEQ_TRY(writable());
  const auto now = c.time.now_ms();
  std::vector<ack_outcome> out;
  out.reserve(cmd.acks.size());
  txn tx;
  // Each ack puts its delivery and its key, and has one effect.
  tx.reserve(2 * cmd.acks.size(), cmd.acks.size());
  // What this batch has done so far, which memory does not show until commit.
  small_set<position> acked(cmd.acks.size());
  // Views of the open deliveries' scopes: the group's deliveries change
  // only when the txn commits, after the last look.
  small_set<std::string_view> committed(cmd.acks.size());
  // The acked records of keyed first leases, by lease run (partition, first
  // member), not encoded yet: if this batch acks every member its run still
  // speaks for, their key records say what those records would, and the
  // run goes instead (docs/DESIGN.md, "Lease runs").
  struct run_ack {
    std::uint64_t offset;
    st::delivery_record record;
  };
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::vector<run_ack>> run_acks;
  for (const auto& a : cmd.acks) {
    ack_outcome o{a.partition, a.offset, errc::ok, {}, {}};
    delivery_ref ref{cmd.topic, cmd.group,  cmd.owner,      a.partition,
                     a.offset,  a.attempts, a.fencing_token};
    const auto sp = tx.mark();
    std::optional<std::pair<std::uint64_t, run_ack>> in_run;  // (run, its ack) if it succeeds
    auto one = [&]() -> result<void> {
      auto loc = locate(c, ref, tx);
      if (!loc.ok()) return std::move(loc).err();
      auto* t = loc->t;
      auto* g = loc->g;
      const auto pos = loc->pos;
      if (loc->d == nullptr || acked.contains(pos)) {
        // Acked already, auto-acked, dead-lettered or deleted: only the same
        // owner's repeated ack of the same delivery succeeds.
        auto v = c.store.get(column::deliveries,
                             st::keys::delivery(t->rec.id, g->id, pos.partition, pos.offset));
        if (!v.ok() && v.code() != errc::not_found) return std::move(v).err();
        if (!v.ok() && !acked.contains(pos)) {
          auto k = acked_by_key(c, *t, *g, pos, cmd.owner, a, now);
          if (!k.ok()) return std::move(k).err();
          if (*k) {
            if (!a.produce.empty()) o.produced = step_produced_of((*k)->produced);
            return {};
          }
        }
        if (v.ok()) {
          auto d = st::decode_delivery(*v);
          if (d.ok() && d->state == st::delivery_state::acked && d->owner == cmd.owner &&
              (!a.attempts || *a.attempts == d->attempts) &&
              (!a.fencing_token || *a.fencing_token == d->fencing_token)) {
            // A repeat of an ack that produced: what it produced, if the
            // key's commit says (nothing is produced again).
            if (!a.produce.empty()) {
              auto list = produced_by(c, *t, *g, pos, d->fencing_token, now);
              if (!list.ok()) return std::move(list).err();
              o.produced = std::move(*list);
            }
            return {};
          }
        }
        return reject_stale(*g, tx,
                            "the delivery is no longer open (acked by another delivery, "
                            "auto-acked or dead-lettered)");
      }
      const auto& d = *loc->d;
      ONCEQ_TRY(check_holder(*loc, ref, tx));
      // The step's next messages, in this txn (refused: the ack too).
      std::vector<step_produced> made;
      if (!a.produce.empty()) {
        if (!d.scope.empty() && committed.contains(d.scope))
          return reject_stale(*g, tx,
                              "the message's idempotency key was committed by another delivery");
        auto staged = stage_steps(c, a.produce, step_source{d.scope, pos}, now, tx);
        if (!staged.ok()) return std::move(staged).err();
        made = std::move(*staged);
      }
      if (!d.scope.empty()) {
        // While this delivery holds the key's lease nobody else can commit
        // it (and it was not committed when delivered): only a lapsed
        // delivery needs to look.
        const auto* h = g->keys.holder(d.scope);
        bool holding = d.state == st::delivery_state::leased && h != nullptr && *h == pos;
        if (committed.contains(d.scope))
          return reject_stale(*g, tx,
                              "the message's idempotency key was committed by another delivery");
        if (!holding) {
          auto k = key_table::live(c.store, d.scope, now);
          if (!k.ok() && k.code() != errc::not_found) return std::move(k).err();
          if (k.ok() && k->state == st::key_state::committed)
            return reject_stale(*g, tx,
                                "the message's idempotency key was committed by another delivery");
        }
        // d's owner is cmd.owner: check_holder passed.
        st::key_record kr = key_record_of(*t, d, pos, st::key_state::committed, now);
        kr.result_json = a.result_json;
        kr.produced = produced_refs(made);
        auto ttl = key_ttl_of(*t, d);
        tx.batch().put(column::keys, d.scope, st::encode(kr));
        committed.insert(std::string_view(d.scope));
        auto ev = delivery_event(st::history_kind::committed, now, pos, d);
        ev.result_bytes = a.result_json.size();
        note_history(tx, *t, d.scope, ttl, std::move(ev));
        for (const auto& p : made) {
          if (p.pending) continue;  // noted when its target shard takes it
          auto pe =
              history_event_at(st::history_kind::produced, now, position{p.partition, p.offset});
          pe.reason = p.topic;
          note_history(tx, *t, d.scope, ttl, std::move(pe));
        }
      }
      if (!a.produce.empty()) o.produced = std::move(made);
      // Kept (until retention) so that the same owner's repeated ack is a no-op.
      auto rec = d.record();
      rec.state = st::delivery_state::acked;
      rec.ended_at_ms = now;
      if (!d.scope.empty() && d.run_first != open_delivery::k_no_run &&
          t->rec.settings.replay_window_ms == 0) {
        in_run.emplace(d.run_first, run_ack{pos.offset, std::move(rec)});
      } else {
        tx.batch().put(column::deliveries,
                       st::keys::delivery(t->rec.id, g->id, pos.partition, pos.offset),
                       st::encode(rec));
      }
      acked.insert(pos);
      tx.then([&c, t, g, pos, scope = d.scope, now]() mutable {
        ++g->stats.acked;
        const auto* od = g->find(pos);
        const std::string okey = od == nullptr ? std::string() : od->okey;
        g->close(pos);
        bool ready = g->release_key(t->rec.id, scope, pos, now, c.timers);
        // The next message of its ordering key, if any, is due now.
        ready = g->release_order(t->rec.id, okey, pos, now, c.timers) || ready;
        if (ready) c.ready_topics.insert(t->rec.name);
        // Last, so that the scope moves instead of being copied.
        if (!scope.empty()) c.committed_keys.push_back(std::move(scope));
      });
      return {};
    };
    auto r = one();
    if (!r.ok()) {
      // A failed read fails the whole batch: nothing of it is applied.
      if (r.code() != errc::failed_precondition && r.code() != errc::invalid_argument &&
          r.code() != errc::not_found && r.code() != errc::resource_exhausted)
        return std::move(r).err();
      // This ack is refused whole: none of what it staged is written (its
      // rejection still counts).
      const bool stale = r.code() == errc::failed_precondition;
      tx.rollback(sp);
      if (stale)
        tx.then([g = loc_group(c, cmd)] {
          if (g != nullptr) ++g->stats.stale_acks_rejected;
        });
      o.code = r.code();
      o.message = r.err().message;
      o.produced.reset();
    } else if (in_run) {
      run_acks[{a.partition, in_run->first}].push_back(std::move(in_run->second));
    }
    out.push_back(std::move(o));
  }
  // Only acks that located the batch's topic and group got here.
  const topic* t = run_acks.empty() ? nullptr : c.topics.find(cmd.topic);
  const group_state* g = t == nullptr ? nullptr : t->find_group(cmd.group);
  for (const auto& [at, acks] : run_acks) {
    const auto& [p, first] = at;
    const auto& runs = g->parts[p].runs;
    if (auto r = runs.find(first); r != runs.end() && r->second.open == acks.size()) {
      tx.batch().del(column::deliveries, st::keys::lease_run(t->rec.id, g->id, p, first));
      continue;
    }
    for (const auto& k : acks)
      tx.batch().put(column::deliveries, st::keys::delivery(t->rec.id, g->id, p, k.offset),
                     st::encode(k.record));
  }
  ONCEQ_TRY(tx.commit(c.store));
  return out;
}

result<void> broker::nack(const nack_cmd& cmd) {
  auto& c = *c_;
  if (cmd.delay_ms) ONCEQ_TRY(validate_range("delay_ms", *cmd.delay_ms, 0, c.opts.max_delay_ms));
  ONCEQ_TRY(writable());
  txn tx;
  auto loc = locate(c, cmd.ref, tx);
  if (!loc.ok()) return rejected(c, tx, std::move(loc).err());
  if (loc->d == nullptr)
    return rejected(c, tx, reject_stale(*loc->g, tx, "the delivery is no longer open"));
  if (auto r = check_holder(*loc, cmd.ref, tx); !r.ok()) return rejected(c, tx, std::move(r).err());
  const auto now = c.time.now_ms();
  open_delivery d = *loc->d;
  d.last_error = cmd.reason.empty() ? "nack" : cmd.reason;
  ONCEQ_TRY(fail_attempt(c, *loc->t, *loc->g, loc->pos, std::move(d), cmd.delay_ms, true, now, tx));
  tx.then([g = loc->g] { ++g->stats.nacked; });
  return tx.commit(c.store);
}

result<millis> broker::extend(const extend_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_range("lease_ms", cmd.lease_ms, 1, c.opts.max_lease_ms));
  ONCEQ_TRY(writable());
  txn tx;
  auto loc = locate(c, cmd.ref, tx);
  if (!loc.ok()) return rejected<millis>(c, tx, std::move(loc).err());
  if (loc->d == nullptr)
    return rejected<millis>(c, tx, reject_stale(*loc->g, tx, "the delivery is no longer open"));
  if (auto r = check_holder(*loc, cmd.ref, tx); !r.ok())
    return rejected<millis>(c, tx, std::move(r).err());
  const auto now = c.time.now_ms();
  auto* t = loc->t;
  auto* g = loc->g;
  const auto pos = loc->pos;
  open_delivery d = *loc->d;
  // Lapsed, and nobody received it since: the owner takes it back.
  const bool retake = d.state != st::delivery_state::leased;
  d.state = st::delivery_state::leased;
  d.lease_deadline_ms = now + cmd.lease_ms;
  d.not_before_ms = 0;
  put_delivery(tx, *t, *g, pos, d);
  const auto deadline = d.lease_deadline_ms;
  tx.then([&c, t, g, pos, d = std::move(d), retake]() mutable {
    auto& ps = g->parts[pos.partition];
    if (retake) {
      ps.ready.erase(pos.offset);
      ++g->stats.inflight;
      if (!d.scope.empty()) g->keys.lease(d.scope, pos);
    }
    ps.open[pos.offset] = std::move(d);
    c.timers.push(
        timer{ps.open[pos.offset].lease_deadline_ms, timer_kind::lease, t->rec.id, g->id, pos});
  });
  ONCEQ_TRY(tx.commit(c.store));
  return deadline;
}

}  // namespace onceq
