// broker::replay: a range of a topic as one group sees it, and handing the
// messages that were acked without a committed key back to that group.

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "broker/broker.hpp"
#include "broker/core.hpp"
#include "broker/delivery.hpp"
#include "broker/errors.hpp"
#include "broker/key_table.hpp"
#include "broker/validation.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

constexpr std::string_view k_replay_error = "replay";

// The range of cmd, checked against t: which partitions, and per partition
// the offsets or the produce times it covers.
struct replay_range {
  bool by_time = false;
  millis from_ms = 0;
  millis to_ms = 0;
  std::uint64_t from_offset = 0;
  std::uint64_t to_offset = 0;
  std::uint32_t first = 0;  // partitions [first, last]
  std::uint32_t last = 0;
};

result<replay_range> range_of(const replay_cmd& cmd, const topic& t) {
  const bool times = cmd.from_ms || cmd.to_ms;
  const bool offsets = cmd.from_offset || cmd.to_offset;
  if (times && offsets)
    return invalid("a replay range is from_ms/to_ms or from_offset/to_offset, not both");
  if (!times && !offsets)
    return invalid(
        "a replay needs a range: from_ms and to_ms, or partition, from_offset and "
        "to_offset");
  replay_range r;
  const auto n = static_cast<std::int64_t>(t.parts.size());
  if (cmd.partition) ONCEQ_TRY(validate_range("partition", *cmd.partition, 0, n - 1));
  r.first = cmd.partition ? static_cast<std::uint32_t>(*cmd.partition) : 0;
  r.last = cmd.partition ? r.first : static_cast<std::uint32_t>(n - 1);
  if (times) {
    if (!cmd.from_ms || !cmd.to_ms) return invalid("a time range needs both from_ms and to_ms");
    if (*cmd.from_ms < 0 || *cmd.from_ms >= *cmd.to_ms)
      return invalid(
          fmt::format("from_ms ({}) must be >= 0 and below to_ms ({})", *cmd.from_ms, *cmd.to_ms));
    r.by_time = true;
    r.from_ms = *cmd.from_ms;
    r.to_ms = *cmd.to_ms;
  } else {
    if (!cmd.from_offset || !cmd.to_offset || !cmd.partition)
      return invalid("an offset range needs partition, from_offset and to_offset");
    if (*cmd.from_offset < 0 || *cmd.from_offset >= *cmd.to_offset)
      return invalid(fmt::format("from_offset ({}) must be >= 0 and below to_offset ({})",
                                 *cmd.from_offset, *cmd.to_offset));
    r.from_offset = static_cast<std::uint64_t>(*cmd.from_offset);
    r.to_offset = static_cast<std::uint64_t>(*cmd.to_offset);
  }
  if (cmd.cursor && (cmd.cursor->partition < r.first || cmd.cursor->partition > r.last))
    return invalid(
        fmt::format("cursor names partition {}, outside the range", cmd.cursor->partition));
  return r;
}

// One page being planned: classifies each message of the range for the
// group and, for a real replay, puts the would_deliver ones in the txn.
// Reads only; memory changes when the txn commits.
class replay_planner {
 public:
  replay_planner(core& c, topic& t, group_state& g, const replay_cmd& cmd, replay_range r,
                 millis now)
      : c_(c), t_(t), g_(g), cmd_(cmd), r_(r), now_(now) {
    reply_.dry_run = cmd.dry_run;
  }

  result<replay_reply> run(txn& tx) {
    for (std::uint32_t p = cmd_.cursor ? cmd_.cursor->partition : r_.first; p <= r_.last; ++p) {
      ONCEQ_TRY(page_of(p));
      if (reply_.next) break;
    }
    for (std::size_t i = 0; i < found_.size(); ++i) {
      auto item = classify(found_[i]);
      if (!item.ok()) return std::move(item).err();
      ++reply_.summary[static_cast<std::size_t>(item->outcome)];
      if (!cmd_.dry_run && item->outcome == replay_outcome::would_deliver) {
        hand_back(found_[i], tx);
        ++reply_.replayed;
      }
      reply_.messages.push_back(std::move(*item));
    }
    return std::move(reply_);
  }

 private:
  // A message of the range: its position and the fields the outcome needs
  // (the record without its value); no record: gone.
  struct found {
    position pos;
    std::optional<st::message_record> m;
  };

  bool full() const { return found_.size() >= static_cast<std::size_t>(cmd_.max_messages); }

  // Adds what partition p holds of the range from the cursor on, up to the
  // page's size; at the first message past it, sets next there.
  result<void> page_of(std::uint32_t p) {
    const auto& part = t_.parts[p];
    std::uint64_t lo = r_.by_time ? part.start : r_.from_offset;
    if (cmd_.cursor && cmd_.cursor->partition == p) lo = std::max(lo, cmd_.cursor->offset);
    const std::uint64_t hi = r_.by_time ? part.next : std::min(r_.to_offset, part.next);
    // Offsets retention removed: known gone without a read (an offset range
    // only; a time range cannot tell when they were produced).
    for (; lo < std::min(hi, part.start); ++lo) {
      if (full()) {
        reply_.next = replay_position{p, lo};
        return {};
      }
      found_.push_back(found{position{p, lo}, std::nullopt});
    }
    if (lo >= hi) return {};
    std::optional<error> bad;
    ONCEQ_TRY(c_.store.scan(column::messages, st::keys::message(t_.rec.id, p, lo),
                            st::keys::message(t_.rec.id, p, hi),
                            [&](std::string_view k, std::string_view v) {
                              auto m = st::decode_message(v);
                              auto off = st::keys::parse_message_offset(k);
                              if (!m.ok() || !off.ok()) {
                                bad = !m.ok() ? m.err() : off.err();
                                return false;
                              }
                              if (r_.by_time && m->produced_at_ms < r_.from_ms) return true;
                              if (r_.by_time && m->produced_at_ms >= r_.to_ms) return false;
                              if (full()) {
                                reply_.next = replay_position{p, *off};
                                return false;
                              }
                              m->value.clear();  // not needed: keep the page small
                              m->envelope_json.clear();
                              found_.push_back(found{position{p, *off}, std::move(*m)});
                              return true;
                            }));
    if (bad) return *bad;
    return {};
  }

  result<replay_item> classify(const found& f) {
    replay_item out;
    out.partition = f.pos.partition;
    out.offset = f.pos.offset;
    const auto retention = t_.rec.settings.retention_ms;
    if (!f.m || (retention > 0 && f.m->produced_at_ms + retention <= now_)) {
      out.outcome = replay_outcome::gone;
      return out;
    }
    const auto& m = *f.m;
    out.idempotency_key = m.idempotency_key;
    out.tenant_id = m.tenant_id;
    out.produced_at_ms = m.produced_at_ms;
    if (f.pos.offset >= g_.parts[f.pos.partition].cursor) {
      out.outcome = replay_outcome::pending;  // never delivered to the group
      return out;
    }
    if (const auto* d = g_.find(f.pos)) {
      out.attempts = d->attempts;
      if (d->state == st::delivery_state::leased) {
        out.outcome = replay_outcome::in_flight;
        out.owner = d->owner;
      } else {
        out.outcome = replay_outcome::pending;
      }
      return out;
    }
    // Ended: the record says how (ownerless or none: auto-acked, superseded,
    // or acked and its record gone with an older retention run).
    auto v = c_.store.get(column::deliveries,
                          st::keys::delivery(t_.rec.id, g_.id, f.pos.partition, f.pos.offset));
    if (!v.ok() && v.code() != errc::not_found) return std::move(v).err();
    std::optional<st::delivery_record> rec;
    if (v.ok()) {
      auto d = st::decode_delivery(*v);
      if (!d.ok()) return std::move(d).err();
      rec = std::move(*d);
      out.attempts = rec->attempts;
      if (rec->state == st::delivery_state::dead) {
        out.outcome = replay_outcome::dead_lettered;
        return out;
      }
    }
    const auto scope = scope_of(t_, g_, m);
    if (!scope.empty()) {
      auto k = key_table::live(c_.store, scope, now_);
      if (!k.ok() && k.code() != errc::not_found) return std::move(k).err();
      if (k.ok() && k->state == st::key_state::committed) {
        out.outcome = replay_outcome::already_committed;
        out.committed = committed_key{k->result_json, k->committed_at_ms, k->owner};
        return out;
      }
      // No record, or one that names no owner: nobody acked it.
      if ((!rec || rec->owner.empty()) && supersedes(t_)) {
        auto newer = newer_with_key(c_, scope, f.pos, now_);
        if (!newer.ok()) return std::move(newer).err();
        if (*newer) {
          out.outcome = replay_outcome::superseded;
          return out;
        }
      }
    }
    out.outcome = replay_outcome::would_deliver;
    return out;
  }

  // The message at f.pos becomes pending again for the group, as if never
  // delivered: attempts 0, due now, last_error "replay".
  void hand_back(const found& f, txn& tx) {
    open_delivery d;
    d.fill_from(*f.m, scope_of(t_, g_, *f.m));
    d.state = st::delivery_state::pending;
    d.last_error = std::string(k_replay_error);
    put_delivery(tx, t_, g_, f.pos, d);
    auto ev = history_event_at(st::history_kind::replayed, now_, f.pos);
    ev.reason = std::string(k_replay_error);
    note_history(tx, t_, d.scope, key_ttl_of(t_, d), std::move(ev));
    tx.then([&c = c_, t = &t_, g = &g_, pos = f.pos, d = std::move(d), now = now_]() mutable {
      auto& slot = g->parts[pos.partition].open[pos.offset];
      slot = std::move(d);
      if (g->schedule(t->rec.id, pos, slot, now, c.timers)) c.ready_topics.insert(t->rec.name);
    });
  }

  core& c_;
  topic& t_;
  group_state& g_;
  const replay_cmd& cmd_;
  replay_range r_;
  millis now_;
  std::vector<found> found_;
  replay_reply reply_;
};

}  // namespace

result<replay_reply> broker::replay(const replay_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  ONCEQ_TRY(validate_label("group", cmd.group));
  ONCEQ_TRY(validate_range("max_messages", cmd.max_messages, 1,
                           static_cast<std::int64_t>(c.opts.max_batch)));
  auto* t = c.topics.find(cmd.topic);
  if (t == nullptr) return topic_not_found(cmd.topic);
  auto* g = t->find_group(cmd.group);
  if (g == nullptr)
    return make_error(errc::not_found,
                      fmt::format("group '{}' not found in topic '{}'", cmd.group, cmd.topic));
  auto r = range_of(cmd, *t);
  if (!r.ok()) return std::move(r).err();
  if (!cmd.dry_run) ONCEQ_TRY(writable());
  txn tx;
  auto reply = replay_planner(c, *t, *g, cmd, *r, c.time.now_ms()).run(tx);
  if (!reply.ok() || cmd.dry_run) return reply;
  ONCEQ_TRY(tx.commit(c.store));
  return reply;
}

}  // namespace onceq
