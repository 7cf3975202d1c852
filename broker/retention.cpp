#include "broker/retention.hpp"

#include <algorithm>

#include "broker/delivery.hpp"

namespace onceq {

namespace st = storage;
using st::column;

void truncate(core& c, topic& t, std::uint32_t p, std::uint64_t upto, millis now, txn& tx) {
  auto& part = t.parts[p];
  if (upto <= part.start) return;
  const auto start = part.start;
  // Only topics with a byte cap count their bytes; a failed count leaves the
  // figure as it was (the cap errs on the strict side).
  std::uint64_t freed = 0;
  if (t.rec.settings.max_backlog_bytes > 0) {
    auto n = part.count_bytes(c.store, start, upto);
    if (n.ok()) freed = *n;
  }
  tx.batch().del_range(column::messages, st::keys::message(t.rec.id, p, start),
                       st::keys::message(t.rec.id, p, upto));
  for (auto& [name, g] : t.groups) {
    // A lease run keyed below upto goes with the range: its members at or
    // past upto still in the run's lease get records of their own first.
    const auto& ps = g->parts[p];
    for (auto r = ps.runs.begin(); r != ps.runs.end() && r->first < upto; ++r) {
      if (r->second.last < upto) continue;
      for (auto o = ps.open.lower_bound(upto); o != ps.open.end() && o->first <= r->second.last;
           ++o)
        if (o->second.run_first == r->first)
          put_delivery_record(tx, t, *g, position{p, o->first}, o->second);
    }
    tx.batch().del_range(column::deliveries, st::keys::delivery(t.rec.id, g->id, p, start),
                         st::keys::delivery(t.rec.id, g->id, p, upto));
    if (g->parts[p].cursor < upto) put_cursor(tx, t, *g, p, upto);
  }
  tx.batch().put(column::meta, st::keys::partition_start(t.rec.id, p), st::encode_u64(upto));
  tx.then([&c, tp = &t, p, upto, now, freed] {
    for (auto& [name, g] : tp->groups) {
      auto& ps = g->parts[p];
      while (!ps.open.empty() && ps.open.begin()->first < upto)
        drop_open(c, *tp, *g, position{p, ps.open.begin()->first}, now);
      ps.runs.erase(ps.runs.begin(), ps.runs.lower_bound(upto));
      ps.cursor = std::max(ps.cursor, upto);
    }
    auto& lp = tp->parts[p];
    lp.start = upto;
    lp.bytes -= std::min(lp.bytes, freed);
  });
}

namespace {

// Under replay_window_ms: the first offset in [from, upto) of t's partition
// p that some group ended (acked, auto-acked, dead-lettered) less than the
// window ago, or upto. Ends are in offset order nearly always, so each
// group's scan stops at its first record in steady state. A failed read
// keeps everything for the next run.
std::uint64_t kept_from(core& c, const topic& t, std::uint32_t p, std::uint64_t from,
                        std::uint64_t upto, millis now) {
  const millis window = t.rec.settings.replay_window_ms;
  for (const auto& [name, g] : t.groups) {
    if (upto <= from) break;
    std::uint64_t first = upto;
    bool bad = false;
    auto scanned = c.store.scan(column::deliveries, st::keys::delivery(t.rec.id, g->id, p, from),
                                st::keys::delivery(t.rec.id, g->id, p, upto),
                                [&](std::string_view k, std::string_view v) {
                                  // A lease run: leases, which have not ended.
                                  if (st::keys::is_lease_run(k)) return true;
                                  auto d = st::decode_delivery(v);
                                  auto dk = st::keys::parse_delivery(k);
                                  if (!d.ok() || !dk.ok()) {
                                    bad = true;
                                    return false;
                                  }
                                  if (d->ended_at_ms + window <= now) return true;
                                  first = dk->offset;
                                  return false;
                                });
    if (!scanned.ok() || bad) return from;
    upto = first;
  }
  return upto;
}

}  // namespace

void run_retention(core& c, millis now) {
  if (!c.store.health().writable) return;
  txn tx;
  c.topics.for_each([&](topic& t) {
    for (std::uint32_t p = 0; p < t.parts.size(); ++p) {
      auto& part = t.parts[p];
      std::uint64_t upto = part.start;
      // Acked by every group: below every group's lowest open offset.
      if (!t.groups.empty()) {
        std::uint64_t low = part.next;
        for (auto& [gn, g] : t.groups) low = std::min(low, g->parts[p].low_water());
        if (t.rec.settings.replay_window_ms > 0)
          low = kept_from(c, t, p, part.start, std::min(low, part.start + k_retention_batch), now);
        upto = std::max(upto, low);
      }
      // Older than retention_ms, acked or not.
      if (t.rec.settings.retention_ms > 0) {
        std::uint64_t aged = upto;
        std::size_t seen = 0;
        auto scanned = c.store.scan(column::messages, st::keys::message(t.rec.id, p, upto),
                                    st::keys::message(t.rec.id, p, part.next),
                                    [&](std::string_view k, std::string_view v) {
                                      auto m = st::decode_message(v);
                                      auto off = st::keys::parse_message_offset(k);
                                      if (!m.ok() || !off.ok()) return false;
                                      if (m->produced_at_ms + t.rec.settings.retention_ms > now)
                                        return false;
                                      aged = *off + 1;
                                      return ++seen < k_retention_batch;
                                    });
        if (scanned.ok()) upto = std::max(upto, aged);
      }
      upto = std::min(upto, part.start + k_retention_batch);
      truncate(c, t, p, upto, now, tx);
    }
  });
  // The next run's time goes with this run's writes (recover reads it).
  if (c.topics.size() > 0) {
    tx.batch().put(column::meta, st::keys::next_retention(),
                   st::encode_u64(static_cast<std::uint64_t>(c.next_retention_ms)));
  }
  // A failed write changes nothing; the next run tries again.
  [[maybe_unused]] auto ignored = tx.commit(c.store);
}

}  // namespace onceq
