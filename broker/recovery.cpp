#include "broker/recovery.hpp"

#include "broker/delivery.hpp"
#include "broker/step.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

namespace onceq {

namespace st = storage;
using st::column;

namespace {

// Scans [begin, end) and stops at the first record fn rejects.
template <class Fn>
result<void> scan_records(st::store& store, column c, std::string_view begin, std::string_view end,
                          Fn&& fn) {
  std::optional<error> bad;
  ONCEQ_TRY(store.scan(c, begin, end, [&](std::string_view k, std::string_view v) {
    result<void> r = fn(k, v);
    if (r.ok()) return true;
    bad = std::move(r).err();
    return false;
  }));
  if (bad) return *bad;
  return {};
}

template <class Fn>
result<void> scan_prefix(st::store& store, column c, const std::string& prefix, Fn&& fn) {
  return scan_records(store, c, prefix, st::keys::prefix_end(prefix), std::forward<Fn>(fn));
}

result<void> recover_partitions(core& c, topic& t) {
  const auto id = t.rec.id;
  ONCEQ_TRY(scan_prefix(c.store, column::meta, st::keys::partition_start_prefix(id),
                        [&](std::string_view k, std::string_view v) -> result<void> {
                          auto p = st::keys::parse_partition_start(k);
                          if (!p.ok()) return std::move(p).err();
                          auto off = st::decode_u64(v);
                          if (!off.ok()) return std::move(off).err();
                          if (*p < t.parts.size()) t.parts[*p].start = *off;
                          return {};
                        }));
  for (auto& part : t.parts) {
    part.next = part.start;
    part.tail_base = part.start;
    auto last = c.store.last_key(
        column::messages, st::keys::message(id, part.index, 0),
        st::keys::message(id, part.index, std::numeric_limits<std::uint64_t>::max()));
    if (last.ok()) {
      auto off = st::keys::parse_message_offset(*last);
      if (!off.ok()) return std::move(off).err();
      part.next = std::max(part.next, *off + 1);
    } else if (last.code() != errc::not_found) {
      return std::move(last).err();
    }
    if (t.rec.settings.max_backlog_bytes > 0) {
      auto n = part.count_bytes(c.store, part.start, part.next);
      if (!n.ok()) return std::move(n).err();
      part.bytes = *n;
    }
  }
  return {};
}

result<void> recover_groups(core& c, topic& t) {
  const auto id = t.rec.id;
  ONCEQ_TRY(scan_prefix(c.store, column::meta, st::keys::group_prefix(id),
                        [&](std::string_view, std::string_view v) -> result<void> {
                          auto g = st::decode_group(v);
                          if (!g.ok()) return std::move(g).err();
                          auto& added = t.add_group(t.make_group(g->id, g->name));
                          auto f = c.store.get(column::meta, st::keys::fence(id, g->id));
                          if (f.ok()) {
                            auto last = st::decode_u64(*f);
                            if (!last.ok()) return std::move(last).err();
                            added.fence = *last;
                          } else if (f.code() != errc::not_found) {
                            return std::move(f).err();
                          }
                          return {};
                        }));
  return scan_prefix(c.store, column::meta, st::keys::cursor_prefix(id),
                     [&](std::string_view k, std::string_view v) -> result<void> {
                       auto ck = st::keys::parse_cursor(k);
                       if (!ck.ok()) return std::move(ck).err();
                       auto off = st::decode_u64(v);
                       if (!off.ok()) return std::move(off).err();
                       auto* g = t.find_group(ck->group);
                       if (g != nullptr && ck->partition < t.parts.size())
                         g->parts[ck->partition].cursor = *off;
                       return {};
                     });
}

// Open deliveries: leases, pending redeliveries, attempts, held keys.
result<void> recover_deliveries(core& c, topic& t, millis now) {
  struct loaded {
    st::keys::delivery_key key;
    st::delivery_record rec;
    std::uint64_t run_first = open_delivery::k_no_run;
    std::uint64_t run_last = 0;  // the run's last member (run_first set)
  };
  std::vector<loaded> open;
  // Lease runs: keys sort by group, partition and offset, a run's right
  // after its first member's own record, and the runs of a partition never
  // overlap. So one run is read at a time, and the scan marks the members
  // it passes that have a record of their own; the others are the run's
  // leases.
  struct run_read {
    st::keys::delivery_key key;  // offset: the first member's
    st::lease_run_record rec;
    std::vector<bool> own;
    std::size_t next = 0;  // the first member the scan has not passed
  };
  std::optional<run_read> run;
  std::optional<st::keys::delivery_key> last_own;  // the last record of a delivery's own
  auto same_partition = [](const st::keys::delivery_key& a, const st::keys::delivery_key& b) {
    return a.group == b.group && a.partition == b.partition;
  };
  auto finish_run = [&] {
    if (!run) return;
    const auto& k = run->key;
    for (std::size_t i = 0; i < run->rec.members.size(); ++i) {
      if (run->own[i]) continue;
      const auto& m = run->rec.members[i];
      st::delivery_record r;
      r.state = st::delivery_state::leased;
      r.owner = run->rec.owner;
      r.attempts = 1;
      r.lease_deadline_ms = run->rec.lease_deadline_ms;
      r.fencing_token = m.fencing_token;
      open.push_back(loaded{{k.topic, k.group, k.partition, m.offset},
                            std::move(r),
                            k.offset,
                            run->rec.members.back().offset});
    }
    run.reset();
  };
  ONCEQ_TRY(scan_records(
      c.store, column::deliveries, st::keys::topic_begin(t.rec.id), st::keys::topic_end(t.rec.id),
      [&](std::string_view k, std::string_view v) -> result<void> {
        if (st::keys::is_lease_run(k)) {
          finish_run();
          auto rk = st::keys::parse_lease_run(k);
          if (!rk.ok()) return std::move(rk).err();
          auto rr = st::decode_lease_run(v);
          if (!rr.ok()) return std::move(rr).err();
          if (rr->members.front().offset != rk->offset)
            return make_error(errc::internal, "corrupt record: lease run");
          const auto n = rr->members.size();
          run = run_read{*rk, std::move(*rr), std::vector<bool>(n), 0};
          run->own[0] =
              last_own && same_partition(*last_own, *rk) && last_own->offset == rk->offset;
          return {};
        }
        auto dk = st::keys::parse_delivery(k);
        if (!dk.ok()) return std::move(dk).err();
        if (run && (!same_partition(run->key, *dk) || dk->offset > run->rec.members.back().offset))
          finish_run();
        if (run) {
          const auto& ms = run->rec.members;
          while (run->next < ms.size() && ms[run->next].offset < dk->offset) ++run->next;
          if (run->next < ms.size() && ms[run->next].offset == dk->offset)
            run->own[run->next] = true;
        }
        last_own = *dk;
        auto dr = st::decode_delivery(v);
        if (!dr.ok()) return std::move(dr).err();
        if (dr->state == st::delivery_state::pending || dr->state == st::delivery_state::leased)
          open.push_back(loaded{*dk, std::move(*dr)});
        return {};
      }));
  finish_run();
  // Ordering keys: per group and key, the open deliveries in position order.
  std::map<std::pair<group_state*, std::string>, std::vector<position>> ordered;
  std::vector<std::pair<group_state*, position>> loaded_at;
  for (auto& l : open) {
    auto* g = t.find_group(l.key.group);
    if (g == nullptr || l.key.partition >= t.parts.size()) continue;
    position pos{l.key.partition, l.key.offset};
    auto m = t.parts[pos.partition].read(c.store, pos.offset);
    if (!m.ok() && m.code() != errc::not_found) return std::move(m).err();
    if (!m.ok()) continue;  // deleted by retention; the record goes with the next run
    auto& d = g->parts[pos.partition].open[pos.offset];
    d.state = l.rec.state;
    d.owner = std::move(l.rec.owner);
    d.attempts = l.rec.attempts;
    d.lease_deadline_ms = l.rec.lease_deadline_ms;
    d.not_before_ms = l.rec.not_before_ms;
    d.last_error = std::move(l.rec.last_error);
    d.fencing_token = l.rec.fencing_token;
    d.run_first = l.run_first;
    if (l.run_first != open_delivery::k_no_run) {
      auto& span = g->parts[pos.partition].runs[l.run_first];
      span.last = l.run_last;
      ++span.open;
    }
    d.fill_from(*m, m->idempotency_key.empty()
                        ? std::string()
                        : st::keys::idem_key(t.rec.id, g->id, m->tenant_id, m->idempotency_key));
    d.okey = order_key_of(t, *m);
    if (!d.okey.empty()) ordered[{g, d.okey}].push_back(pos);
    loaded_at.emplace_back(g, pos);
  }
  // The holder of a key is the one that was delivered or waits for its
  // delay (only the holder ever is: the others were parked before either),
  // else the lowest: the one a release would have woken. The others wait.
  for (auto& [gk, ps] : ordered) {
    auto* g = gk.first;
    std::sort(ps.begin(), ps.end());
    auto holder = ps.front();
    for (const auto& p : ps) {
      const auto* d = g->find(p);
      if (d->attempts > 0 || d->not_before_ms > 0) {
        holder = p;
        break;
      }
    }
    g->order.hold(gk.second, holder);
    for (const auto& p : ps) {
      if (p == holder) continue;
      g->find(p)->order_parked = true;
      g->order.park(gk.second, p);
    }
  }
  for (const auto& [g, pos] : loaded_at) {
    auto& d = *g->find(pos);
    if (d.state == st::delivery_state::leased) {
      ++g->stats.inflight;
      if (!d.scope.empty()) g->keys.lease(d.scope, pos);
      c.timers.push(timer{d.lease_deadline_ms, timer_kind::lease, t.rec.id, g->id, pos});
    } else {
      g->schedule(t.rec.id, pos, d, now, c.timers);
    }
  }
  return {};
}

}  // namespace

result<void> recover(core& c) {
  auto now = c.time.now_ms();
  if (auto n = c.store.get(column::meta, st::keys::next_topic_id()); n.ok()) {
    auto v = st::decode_u64(*n);
    if (!v.ok()) return std::move(v).err();
    c.topics.set_next_id(static_cast<st::topic_id>(*v));
  } else if (n.code() != errc::not_found) {
    return std::move(n).err();
  }
  if (auto n = c.store.get(column::meta, st::keys::next_retention()); n.ok()) {
    auto v = st::decode_u64(*n);
    if (!v.ok()) return std::move(v).err();
    c.next_retention_ms = static_cast<millis>(*v);
  } else if (n.code() != errc::not_found) {
    return std::move(n).err();
  }
  std::vector<st::topic_record> recs;
  ONCEQ_TRY(scan_prefix(c.store, column::meta, st::keys::topic_prefix(),
                        [&](std::string_view, std::string_view v) -> result<void> {
                          auto r = st::decode_topic(v);
                          if (!r.ok()) return std::move(r).err();
                          recs.push_back(std::move(*r));
                          return {};
                        }));
  for (auto& rec : recs) {
    auto& t = c.topics.add(std::move(rec));
    ONCEQ_TRY(recover_partitions(c, t));
    ONCEQ_TRY(recover_groups(c, t));
    ONCEQ_TRY(recover_deliveries(c, t, now));
  }
  ONCEQ_TRY(recover_outbox(c));
  c.ready_topics.clear();
  return {};
}

}  // namespace onceq
