// The broker facade: topic administration, consume, key lookups, the tick,
// metrics and recovery. produce/redrive live in produce.cpp, ack/nack/extend
// in settle.cpp; the rules themselves live in the modules.

#include "broker/broker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "broker/core.hpp"
#include "broker/delivery.hpp"
#include "broker/errors.hpp"
#include "broker/records.hpp"
#include "broker/recovery.hpp"
#include "broker/retention.hpp"
#include "broker/validation.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

// Lease expiries and pending messages falling due, as one txn. A failed
// read or write changes nothing: the timers go back to fire on the next tick.
void fire_timers(core& c, millis now) {
  auto due = c.timers.take_due(now);
  if (due.empty()) return;
  // In one order on every replica: the heap's order among timers due at the
  // same time follows the order they were pushed in, which a replica that
  // restarted (its timers pushed by recovery) does not share, and the order
  // of expiries decides, e.g., the offsets of their dead letters.
  std::sort(due.begin(), due.end(), [](const timer& a, const timer& b) {
    return std::tie(a.at, a.kind, a.topic, a.group, a.pos, a.last) <
           std::tie(b.at, b.kind, b.topic, b.group, b.pos, b.last);
  });
  txn tx;
  std::set<std::tuple<st::topic_id, st::group_id, position>> touched;
  bool ok = true;
  for (const auto& tm : due) {
    auto* t = c.topics.find(tm.topic);
    if (t == nullptr) continue;
    auto* g = t->find_group(tm.group);
    if (g == nullptr) continue;
    if (tm.kind == timer_kind::lease) {
      // Every open delivery of the timer's range still leased until
      // exactly tm.at (timers.hpp). The txn changes the group only when it
      // commits, so the range is walked as it is.
      if (tm.pos.partition >= g->parts.size()) continue;
      auto& open = g->parts[tm.pos.partition].open;
      const auto end = open.upper_bound(tm.last_offset());
      for (auto it = open.lower_bound(tm.pos.offset); ok && it != end; ++it) {
        const open_delivery& d = it->second;
        if (d.state != st::delivery_state::leased || d.lease_deadline_ms != tm.at) continue;
        const position pos{tm.pos.partition, it->first};
        if (!touched.emplace(tm.topic, tm.group, pos).second) continue;
        open_delivery next = d;
        next.last_error = "lease_expired";
        auto r = fail_attempt(c, *t, *g, pos, std::move(next), std::nullopt, false, now, tx);
        if (!r.ok()) {
          ok = false;
          break;
        }
        tx.then([g] { ++g->stats.lease_expired; });
      }
      if (!ok) break;
    } else {
      auto* d = g->find(tm.pos);
      if (d == nullptr) continue;
      if (d->state != st::delivery_state::pending || d->parked || d->not_before_ms > now) continue;
      tx.then([&c, t, g, pos = tm.pos] {
        g->parts[pos.partition].ready.insert(pos.offset);
        c.ready_topics.insert(t->rec.name);
      });
    }
  }
  if (ok && tx.commit(c.store).ok()) return;
  for (const auto& tm : due) c.timers.push(tm);
}

// The topic a GET /v1/keys or /v1/keys/history names, after the checks
// both share.
result<topic*> topic_of_key_query(core& c, const key_query& q) {
  ONCEQ_TRY(validate_topic_name(q.topic));
  ONCEQ_TRY(validate_label("group", q.group));
  if (q.key.empty()) return invalid("key must be a non-empty string");
  auto* t = c.topics.find(q.topic);
  if (t == nullptr) return topic_not_found(q.topic);
  return t;
}

}  // namespace

broker::broker(st::store& store, const clock& time, const message_inspector* inspector,
               broker_options opts)
    : c_(std::make_unique<core>(store, time, inspector, opts)) {}

broker::~broker() = default;

result<void> broker::writable() const {
  auto h = c_->store.health();
  if (!h.writable) return storage_unavailable("storage is not writable: " + h.reason);
  return {};
}

result<void> broker::recover() {
  auto& c = *c_;
  c.topics.clear();
  c.cache.clear();
  c.timers.clear();
  c.ready_topics.clear();
  c.committed_keys.clear();
  c.next_retention_ms = 0;
  return onceq::recover(c);
}

result<topic_created> broker::create_topic(const create_topic_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_topic_name(cmd.name));
  ONCEQ_TRY(validate_range("partitions", cmd.partitions, 1, c.opts.max_partitions));
  ONCEQ_TRY(validate_settings(cmd.settings));
  // The topic's lease is the consumers' default: it must be one they may use.
  ONCEQ_TRY(validate_range("lease_ms", cmd.settings.lease_ms, 1, c.opts.max_lease_ms));
  if (auto* t = c.topics.find(cmd.name)) {
    if (t->rec.partitions == static_cast<std::uint32_t>(cmd.partitions) &&
        to_api(t->rec.settings) == cmd.settings)
      return topic_created{cmd.name, t->rec.partitions, false};
    return make_error(errc::already_exists,
                      fmt::format("topic '{}' exists with a different configuration", cmd.name));
  }
  ONCEQ_TRY(writable());
  st::topic_record rec;
  rec.name = cmd.name;
  rec.partitions = static_cast<std::uint32_t>(cmd.partitions);
  rec.settings = to_record(cmd.settings);
  rec.created_at_ms = c.time.now_ms();
  txn tx;
  c.topics.create(std::move(rec), tx);
  ONCEQ_TRY(tx.commit(c.store));
  return topic_created{cmd.name, static_cast<std::uint32_t>(cmd.partitions), true};
}

std::vector<std::string> broker::list_topics() const {
  return c_->topics.names();
}

result<topic_info> broker::get_topic(std::string_view name) const {
  auto* t = c_->topics.find(name);
  if (t == nullptr) return topic_not_found(name);
  return t->info();
}

result<void> broker::delete_topic(std::string_view name) {
  auto& c = *c_;
  auto* t = c.topics.find(name);
  if (t == nullptr) return topic_not_found(name);
  ONCEQ_TRY(writable());
  auto id = t->rec.id;
  txn tx;
  auto& b = tx.batch();
  b.del(column::meta, st::keys::topic(name));
  for (const auto& prefix : {st::keys::group_prefix(id), st::keys::cursor_prefix(id),
                             st::keys::partition_start_prefix(id), st::keys::fence_prefix(id)})
    b.del_range(column::meta, prefix, st::keys::prefix_end(prefix));
  for (auto col : {column::messages, column::deliveries, column::keys, column::dedup})
    b.del_range(col, st::keys::topic_begin(id), st::keys::topic_end(id));
  tx.then([&c, t, name = std::string(name)] {
    for (auto& p : t->parts) c.cache.drop(p);
    c.topics.remove(name);
  });
  return tx.commit(c.store);
}

result<std::vector<delivery>> broker::consume(const consume_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  auto* t = c.topics.find(cmd.topic);
  if (t == nullptr) return invalid(fmt::format("unknown topic '{}'", cmd.topic));
  ONCEQ_TRY(validate_label("group", cmd.group));
  ONCEQ_TRY(validate_label("owner", cmd.owner));
  ONCEQ_TRY(validate_range("max_messages", cmd.max_messages, 1,
                           static_cast<std::int64_t>(c.opts.max_batch)));
  millis lease_ms = cmd.lease_ms.value_or(t->rec.settings.lease_ms);
  ONCEQ_TRY(validate_range("lease_ms", lease_ms, 1, c.opts.max_lease_ms));
  ONCEQ_TRY(writable());
  const auto now = c.time.now_ms();
  fire_timers(c, now);

  txn tx;
  auto* g = t->find_group(cmd.group);
  if (g == nullptr) {
    // A group starts at the oldest retained message (docs/API.md, Concepts).
    auto fresh = t->make_group(t->next_group_id, cmd.group);
    g = fresh.get();
    tx.batch().put(column::meta, st::keys::group(t->rec.id, g->name),
                   st::encode(st::group_record{t->rec.id, g->id, g->name}));
    for (std::uint32_t p = 0; p < g->parts.size(); ++p)
      put_cursor(tx, *t, *g, p, g->parts[p].cursor);
    // std::function needs a copyable callable: hand the group over by pointer.
    auto owned = std::make_shared<std::unique_ptr<group_state>>(std::move(fresh));
    tx.then([t, owned] { t->add_group(std::move(*owned)); });
  }
  auto out = plan_consume(c, *t, *g, cmd, lease_ms, now, tx);
  if (!out.ok()) return out;
  ONCEQ_TRY(tx.commit(c.store));
  return out;
}

result<key_info> broker::get_key(const key_query& q) {
  auto& c = *c_;
  auto found = topic_of_key_query(c, q);
  if (!found.ok()) return std::move(found).err();
  auto* t = *found;
  key_info info;
  auto* g = t->find_group(q.group);
  if (g == nullptr) return info;
  const auto now = c.time.now_ms();
  // Lapsed leases end first, so that a key is not shown as leased past its
  // deadline; if the store refuses that write (a replica's store refuses
  // every write outside its log's entries) the answer is still right: the
  // lease check below compares deadlines.
  fire_timers(c, now);
  auto scope = st::keys::idem_key(t->rec.id, g->id, q.tenant_id, q.key);
  if (const auto* h = g->keys.holder(scope)) {
    const auto* d = g->find(*h);
    const bool lapsed =
        d != nullptr && d->state == st::delivery_state::leased && d->lease_deadline_ms <= now;
    if (d != nullptr && !lapsed) {
      info.st = key_info::state::leased;
      info.owner = d->owner;
      info.partition = h->partition;
      info.offset = h->offset;
      info.attempts = d->attempts;
      info.lease_expires_at_ms = d->lease_deadline_ms;
      info.fencing_token = d->fencing_token;
      return info;
    }
  }
  auto k = key_table::live(c.store, scope, now);
  if (!k.ok()) {
    if (k.code() == errc::not_found) return info;
    return std::move(k).err();
  }
  info.st =
      k->state == st::key_state::committed ? key_info::state::committed : key_info::state::failed;
  info.owner = k->owner;
  info.partition = k->partition;
  info.offset = k->offset;
  info.attempts = k->attempts;
  info.fencing_token = k->fencing_token;
  if (k->state == st::key_state::committed) {
    info.committed_at_ms = k->committed_at_ms;
    info.expires_at_ms = k->expires_at_ms;
    info.result_json = std::move(k->result_json);
  }
  return info;
}

result<key_history> broker::get_key_history(const key_query& q) {
  auto& c = *c_;
  auto found = topic_of_key_query(c, q);
  if (!found.ok()) return std::move(found).err();
  auto* t = *found;
  if (!t->rec.settings.key_history)
    return make_error(
        errc::failed_precondition,
        fmt::format("topic '{}' keeps no key history (setting key_history)", q.topic));
  const auto now = c.time.now_ms();
  // The group's own events, and the topic's produce events of the key.
  std::vector<std::string> hkeys{st::keys::key_history(t->rec.id, 0, q.tenant_id, q.key)};
  if (auto* g = t->find_group(q.group))
    hkeys.push_back(st::keys::key_history(t->rec.id, g->id, q.tenant_id, q.key));
  std::vector<st::history_event> all;
  for (const auto& k : hkeys) {
    auto v = c.store.get(column::keys, k);
    if (!v.ok()) {
      if (v.code() == errc::not_found) continue;
      return std::move(v).err();
    }
    auto h = st::decode_history(*v);
    if (!h.ok()) return std::move(h).err();
    if (h->expires_at_ms != 0 && h->expires_at_ms <= now) continue;  // gone with its key
    for (auto& e : h->events) all.push_back(std::move(e));
  }
  // Each list is in time order; a stable sort keeps produce events before a
  // group's events of the same millisecond.
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.at_ms < b.at_ms; });
  if (all.size() > st::k_history_max)
    all.erase(all.begin(), all.end() - static_cast<std::ptrdiff_t>(st::k_history_max));
  key_history out;
  out.events.reserve(all.size());
  for (auto& e : all)
    out.events.push_back(key_event{
        .what = static_cast<key_event::kind>(static_cast<int>(e.kind) - 1),
        .at_ms = e.at_ms,
        .owner = std::move(e.owner),
        .partition = e.partition,
        .offset = e.offset,
        .attempts = e.attempts,
        .fencing_token = e.fencing_token,
        .reason = std::move(e.reason),
        .result_bytes = e.result_bytes,
    });
  return out;
}

void broker::tick() {
  auto& c = *c_;
  const auto now = c.time.now_ms();
  fire_timers(c, now);
  // Also when the clock went back more than a period (a stored schedule
  // from before an adjusted clock); a replica's clock never goes back.
  if (now >= c.next_retention_ms || c.next_retention_ms - now > k_retention_period_ms) {
    c.next_retention_ms = now + k_retention_period_ms;
    run_retention(c, now);
  }
}

std::optional<millis> broker::next_deadline() const {
  const auto& c = *c_;
  auto d = c.timers.next();
  if (c.topics.size() > 0 && (!d || c.next_retention_ms < *d)) d = c.next_retention_ms;
  return d;
}

std::vector<std::string> broker::take_ready_topics() {
  std::vector<std::string> out(c_->ready_topics.begin(), c_->ready_topics.end());
  c_->ready_topics.clear();
  return out;
}

std::vector<std::string> broker::take_committed_keys() {
  std::vector<std::string> out;
  out.swap(c_->committed_keys);
  return out;
}

std::vector<topic_info> broker::metrics() const {
  std::vector<topic_info> out;
  out.reserve(c_->topics.size());
  c_->topics.for_each([&](const topic& t) { out.push_back(t.info()); });
  return out;
}

std::string broker::describe_state() const {
  const auto& c = *c_;
  std::string out =
      fmt::format("next_topic_id={} timers={}\n", c.topics.next_id(), c.timers.size());
  c.topics.for_each([&](const topic& t) {
    out +=
        fmt::format("topic {} id={} partitions={} produced={} dups={} committed={} next_group={}\n",
                    t.rec.name, t.rec.id, t.rec.partitions, t.produced, t.produce_duplicates,
                    t.produce_already_committed, t.next_group_id);
    for (const auto& p : t.parts)
      out += fmt::format(" p{} start={} next={} bytes={}\n", p.index, p.start, p.next, p.bytes);
    for (const auto& [name, g] : t.groups) out += g->describe();
  });
  out += fmt::format("outbox next={}", c.outbox_next);
  for (const auto& [seq, created] : c.outbox) out += fmt::format(" {}@{}", seq, created);
  out += '\n';
  return out;
}

}  // namespace onceq
