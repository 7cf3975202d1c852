#include "broker/group_state.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace onceq {

namespace st = storage;

void open_delivery::fill_from(const st::message_record& m, std::string key_scope) {
  known = true;
  scope = std::move(key_scope);
  key_ttl_ms = m.key_ttl_ms;
  max_attempts = m.max_attempts;
  backoff_ms = m.backoff_ms;
  max_backoff_ms = m.max_backoff_ms;
  produced_at_ms = m.produced_at_ms;
}

open_delivery* group_state::find(position p) {
  auto& ps = parts[p.partition];
  auto it = ps.open.find(p.offset);
  return it == ps.open.end() ? nullptr : &it->second;
}

void group_state::close(position p) {
  auto& ps = parts[p.partition];
  auto it = ps.open.find(p.offset);
  if (it == ps.open.end()) return;
  if (it->second.state == st::delivery_state::leased && stats.inflight > 0) --stats.inflight;
  ps.leave_run(it->second.run_first);
  ps.ready.erase(p.offset);
  ps.open.erase(it);
}

bool group_state::schedule(st::topic_id topic, position p, open_delivery& d, millis now,
                           timer_queue& timers) {
  d.state = st::delivery_state::pending;
  if (d.parked || d.order_parked) return false;
  auto& ready = parts[p.partition].ready;
  if (d.not_before_ms <= now) {
    ready.insert(p.offset);
    return true;
  }
  // Not ready before its time, even if it was (a nack's delay on a message
  // that waited in `ready` after its lease lapsed): its timer readies it.
  // A replica that restarted rebuilds `ready` from the records alone, so a
  // stale entry kept here would deliver early on one replica only.
  ready.erase(p.offset);
  timers.push(timer{d.not_before_ms, timer_kind::due, topic, id, p});
  return false;
}

bool group_state::release_key(st::topic_id topic, const std::string& scope, position p, millis now,
                              timer_queue& timers) {
  bool ready = false;
  for (const auto& w : keys.release(scope, p)) {
    auto* d = find(w);
    if (d == nullptr || !d->parked) continue;
    d->parked = false;
    ready = schedule(topic, w, *d, now, timers) || ready;
  }
  return ready;
}

bool group_state::release_order(st::topic_id topic, const std::string& okey, position p, millis now,
                                timer_queue& timers) {
  if (okey.empty()) return false;
  auto next = order.release(okey, p);
  open_delivery* d = nullptr;
  // Parked deliveries are open (an ending one leaves the queue), so the
  // loop takes the first; it only guards against a stale entry.
  while (next && (d = find(*next)) == nullptr) next = order.release(okey, *next);
  if (!next) return false;
  d->order_parked = false;
  return schedule(topic, *next, *d, now, timers);
}

group_stats group_state::snapshot(const std::vector<std::uint64_t>& partition_next) const {
  auto gs = stats;
  std::uint64_t waiting = 0;
  millis oldest = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const auto& ps = parts[p];
    waiting += partition_next[p] > ps.cursor ? partition_next[p] - ps.cursor : 0;
    waiting += ps.open.size();
    // The lowest open offset is the oldest unacked message of its partition.
    if (!ps.open.empty()) {
      const auto& d = ps.open.begin()->second;
      if (d.known && (oldest == 0 || d.produced_at_ms < oldest)) oldest = d.produced_at_ms;
    }
  }
  gs.backlog = waiting >= gs.inflight ? waiting - gs.inflight : 0;
  gs.oldest_unacked_produced_at_ms = oldest;
  return gs;
}

std::string group_state::describe() const {
  std::string out = fmt::format(
      "  group {} id={} fence={}\n   stats inflight={} delivered={} redelivered={} acked={} "
      "auto_acked={} nacked={} lease_expired={} dead_lettered={} stale={} superseded={}\n",
      name, id, fence, stats.inflight, stats.delivered, stats.redelivered, stats.acked,
      stats.auto_acked, stats.nacked, stats.lease_expired, stats.dead_lettered,
      stats.stale_acks_rejected, stats.superseded);
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const auto& ps = parts[p];
    out += fmt::format("   p{} cursor={} ready=[{}]", p, ps.cursor, fmt::join(ps.ready, ","));
    if (!ps.runs.empty()) {
      out += " runs=[";
      for (const auto& [first, span] : ps.runs)
        out += fmt::format("{}{}-{}/{}", first == ps.runs.begin()->first ? "" : ",", first,
                           span.last, span.open);
      out += "]";
    }
    out += "\n";
    for (const auto& [off, d] : ps.open)
      out += fmt::format(
          "    open {} state={} owner={} attempts={} lease={} nb={} err={} parked={} "
          "token={}{}\n",
          off, static_cast<int>(d.state), d.owner, d.attempts, d.lease_deadline_ms, d.not_before_ms,
          d.last_error, d.parked, d.fencing_token, d.order_parked ? " order_parked" : "");
  }
  out += keys.describe();
  out += order.describe();
  return out;
}

}  // namespace onceq
