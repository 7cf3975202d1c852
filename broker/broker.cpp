#include "broker/broker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "broker/validation.hpp"
#include "storage/schema.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

constexpr std::string_view k_dlq_prefix = "dlq.";
constexpr millis k_retention_period_ms = 1000;     // how often tick() runs retention
constexpr std::size_t k_retention_batch = 10'000;  // messages deleted per topic per run

error fenced(std::string message) {
  return make_error(errc::failed_precondition, std::move(message));
}
error invalid(std::string message) {
  return make_error(errc::invalid_argument, std::move(message));
}

// An open delivery of one message to one group: below the group's cursor
// and not acked. Caches what ack/nack/expiry need from the message so that
// they do not read it again.
struct open_delivery {
  st::delivery_state state = st::delivery_state::pending;
  std::string owner;
  std::int64_t attempts = 0;
  millis lease_deadline_ms = 0;
  millis not_before_ms = 0;
  std::string last_error;
  bool parked = false;  // waiting for its key to be released
  bool known = false;   // the fields below were filled from the message
  std::string scope;    // storage key of its idempotency key; "" if none
  std::int64_t key_ttl_ms = -1;
  std::int64_t max_attempts = -1;
  std::int64_t backoff_ms = -1;
  std::int64_t max_backoff_ms = -1;
  millis produced_at_ms = 0;

  st::delivery_record record() const {
    return st::delivery_record{state,         owner,     attempts, lease_deadline_ms,
                               not_before_ms, last_error};
  }
};

struct part_state {
  std::uint64_t cursor = 0;                     // next offset this group has never seen
  std::map<std::uint64_t, open_delivery> open;  // offsets < cursor not acked
  std::set<std::uint64_t> ready;                // open, pending, due and not parked
};

struct key_holder {
  std::uint32_t partition;
  std::uint64_t offset;
};

struct group {
  st::group_id id = 0;
  std::string name;
  std::vector<part_state> parts;
  group_stats stats;
  std::unordered_map<std::string, key_holder> leased_keys;          // scope -> holding delivery
  std::unordered_map<std::string, std::vector<key_holder>> parked;  // scope -> waiting
  std::uint32_t next_partition = 0;                                 // round robin
};

struct partition {
  std::uint64_t start = 0;  // first retained offset
  std::uint64_t next = 0;   // next offset to assign
  // The message cache's share of this partition: records of the offsets
  // [tail_base, tail_base + tail.size()), the newest ones.
  std::uint64_t tail_base = 0;
  std::deque<st::message_record> tail;
  // Read-ahead for consumers behind the cache: one scan reads a run of
  // messages instead of one point lookup each. Messages are immutable, so
  // it stays valid until replaced (retention is checked against start).
  std::uint64_t ahead_base = 0;
  std::vector<std::optional<st::message_record>> ahead;
};

std::size_t cached_size(const st::message_record& m) {
  return sizeof(m) + m.value.size() + m.envelope_json.size() + m.idempotency_key.size() +
         m.tenant_id.size() + (m.key ? m.key->size() : 0);
}

struct topic {
  st::topic_record rec;
  std::vector<partition> parts;
  std::map<std::string, std::unique_ptr<group>, std::less<>> groups;
  std::unordered_map<st::group_id, group*> groups_by_id;
  st::group_id next_group_id = 1;
  std::uint64_t produced = 0;
  std::uint64_t produce_duplicates = 0;
};

enum class timer_kind : std::uint8_t { lease, due };

struct timer {
  millis at;
  timer_kind kind;
  st::topic_id topic;
  st::group_id group;
  std::uint32_t partition;
  std::uint64_t offset;
  friend bool operator>(const timer& a, const timer& b) { return a.at > b.at; }
};

}  // namespace

struct broker::state {
  state(st::store& s, const clock& c, broker_options o) : store(s), time(c), opts(o) {}

  st::store& store;
  const clock& time;
  broker_options opts;
  bool failed = false;  // a write failed: refuse every further change

  std::map<std::string, std::unique_ptr<topic>, std::less<>> topics;
  std::unordered_map<st::topic_id, topic*> topics_by_id;
  st::topic_id next_topic_id = 1;
  std::priority_queue<timer, std::vector<timer>, std::greater<>> timers;
  std::set<std::string> ready_topics;
  std::vector<std::string> committed_keys;
  millis next_retention_ms = 0;

  // Message cache: (topic, partition, offset) in produce order, for
  // eviction; entries whose record is gone already are skipped.
  struct cached {
    st::topic_id topic;
    std::uint32_t partition;
    std::uint64_t offset;
  };
  std::deque<cached> cache_order;
  std::size_t cache_bytes = 0;

  // Read-ahead per partition: at least min messages (one RocksDB iterator
  // per 25 messages was a visible cost draining a large backlog), at most
  // max, and no more than bytes of records past the first.
  static constexpr std::uint64_t k_read_ahead_min = 128;
  static constexpr std::uint64_t k_read_ahead_max = 1000;
  static constexpr std::size_t k_read_ahead_bytes = 512u << 10;

  void fill_read_ahead(topic& t, std::uint32_t p, std::uint64_t from, std::uint64_t want) {
    auto& part = t.parts[p];
    if (from >= part.tail_base && from - part.tail_base < part.tail.size()) return;  // cached
    if (from >= part.ahead_base && from - part.ahead_base < part.ahead.size()) return;
    // This partition's share of the consume, so that round robin over many
    // partitions does not read far ahead on each.
    want = std::clamp<std::uint64_t>(want / t.parts.size(), k_read_ahead_min, k_read_ahead_max);
    auto upto = std::min(part.next, from + want);
    if (part.tail_base > from) upto = std::min(upto, part.tail_base);
    if (upto <= from) return;
    part.ahead_base = from;
    part.ahead.clear();
    part.ahead.resize(upto - from);
    std::size_t bytes = 0;
    std::uint64_t end = upto;  // one past the last offset the scan covered
    auto scanned = store.scan(column::messages, st::keys::message(t.rec.id, p, from),
                              st::keys::message(t.rec.id, p, upto),
                              [&](std::string_view k, std::string_view v) {
                                auto off = st::keys::parse_message_offset(k);
                                auto m = st::decode_message(v);
                                if (off.ok() && m.ok() && *off >= from && *off < upto)
                                  part.ahead[*off - from] = std::move(*m);
                                bytes += v.size();
                                if (bytes < k_read_ahead_bytes || !off.ok()) return true;
                                end = std::min(upto, *off + 1);
                                return false;
                              });
    // A failed scan leaves holes: those offsets fall back to point lookups.
    if (!scanned.ok()) {
      part.ahead.clear();
    } else if (end < upto) {
      part.ahead.resize(end - from);  // the next consume reads on from end
    }
  }

  void cache_append(topic& t, std::uint32_t p, std::uint64_t off, st::message_record m) {
    if (opts.message_cache_bytes == 0) return;
    auto& part = t.parts[p];
    if (part.tail_base + part.tail.size() != off) {
      cache_drop(t, p);
      part.tail_base = off;
    }
    cache_bytes += cached_size(m);
    part.tail.push_back(std::move(m));
    cache_order.push_back(cached{t.rec.id, p, off});
    while (cache_bytes > opts.message_cache_bytes && !cache_order.empty()) {
      auto c = cache_order.front();
      cache_order.pop_front();
      auto it = topics_by_id.find(c.topic);
      if (it == topics_by_id.end()) continue;
      auto& victim = it->second->parts[c.partition];
      if (victim.tail.empty() || victim.tail_base != c.offset) continue;
      cache_bytes -= std::min(cache_bytes, cached_size(victim.tail.front()));
      victim.tail.pop_front();
      ++victim.tail_base;
    }
  }

  // Forgets a partition's cached records.
  void cache_drop(topic& t, std::uint32_t p) {
    auto& part = t.parts[p];
    for (const auto& m : part.tail) cache_bytes -= std::min(cache_bytes, cached_size(m));
    part.tail.clear();
    part.tail_base = part.next;
  }

  // ---- helpers -------------------------------------------------------

  result<void> write(const st::batch& b) {
    if (failed) return make_error(errc::unavailable, "storage is not writable");
    if (b.empty()) return {};
    auto r = store.write(b);
    if (!r.ok()) {
      failed = true;
      return make_error(errc::unavailable, "storage write failed: " + r.err().message);
    }
    return {};
  }

  result<void> writable() const {
    if (failed) return make_error(errc::unavailable, "storage is not writable");
    return {};
  }

  topic* find_topic(std::string_view name) {
    auto it = topics.find(name);
    return it == topics.end() ? nullptr : it->second.get();
  }

  result<topic*> topic_for_url(std::string_view name) {
    if (auto* t = find_topic(name)) return t;
    return make_error(errc::not_found, fmt::format("topic '{}' not found", name));
  }

  // Produce and consume name an unknown topic with 400 (spec: error table).
  result<topic*> topic_for_body(std::string_view name) {
    ONCEQ_TRY(validate_topic_name(name));
    if (auto* t = find_topic(name)) return t;
    return invalid(fmt::format("unknown topic '{}'", name));
  }

  static group* find_group(topic& t, std::string_view name) {
    auto it = t.groups.find(name);
    return it == t.groups.end() ? nullptr : it->second.get();
  }

  group& add_group(topic& t, st::group_id id, std::string name) {
    auto g = std::make_unique<group>();
    g->id = id;
    g->name = std::move(name);
    g->parts.resize(t.parts.size());
    for (std::size_t p = 0; p < t.parts.size(); ++p) g->parts[p].cursor = t.parts[p].start;
    auto* raw = g.get();
    t.groups_by_id[id] = raw;
    t.groups.emplace(raw->name, std::move(g));
    t.next_group_id = std::max(t.next_group_id, id + 1);
    return *raw;
  }

  // A group starts at the oldest retained message (spec: Concepts / Group).
  group& ensure_group(topic& t, std::string_view name, st::batch& b) {
    if (auto* g = find_group(t, name)) return *g;
    auto& g = add_group(t, t.next_group_id, std::string(name));
    b.put(column::meta, st::keys::group(t.rec.id, g.name),
          st::encode(st::group_record{t.rec.id, g.id, g.name}));
    for (std::uint32_t p = 0; p < g.parts.size(); ++p)
      b.put(column::meta, st::keys::cursor(t.rec.id, g.id, p), st::encode_u64(g.parts[p].cursor));
    return g;
  }

  result<st::message_record> read_message(const topic& t, std::uint32_t p, std::uint64_t off) {
    const auto& part = t.parts[p];
    if (off < part.start) return make_error(errc::not_found, "message deleted by retention");
    if (off >= part.tail_base && off - part.tail_base < part.tail.size())
      return part.tail[off - part.tail_base];
    if (off >= part.ahead_base && off - part.ahead_base < part.ahead.size() &&
        part.ahead[off - part.ahead_base])
      return *part.ahead[off - part.ahead_base];
    auto v = store.get(column::messages, st::keys::message(t.rec.id, p, off));
    if (!v.ok()) return std::move(v).err();
    return st::decode_message(*v);
  }

  void fill_from_message(const topic& t, const group& g, open_delivery& d,
                         const st::message_record& m) {
    d.known = true;
    d.scope = m.idempotency_key.empty()
                  ? std::string()
                  : st::keys::idem_key(t.rec.id, g.id, m.tenant_id, m.idempotency_key);
    d.key_ttl_ms = m.key_ttl_ms;
    d.max_attempts = m.max_attempts;
    d.backoff_ms = m.backoff_ms;
    d.max_backoff_ms = m.max_backoff_ms;
    d.produced_at_ms = m.produced_at_ms;
  }

  static std::int64_t max_attempts_of(const topic& t, const open_delivery& d) {
    return d.max_attempts >= 0 ? d.max_attempts : t.rec.settings.max_attempts;
  }
  static millis key_ttl_of(const topic& t, const open_delivery& d) {
    return d.key_ttl_ms >= 0 ? d.key_ttl_ms : t.rec.settings.key_ttl_ms;
  }
  static millis backoff_of(const topic& t, const open_delivery& d) {
    return retry_delay(d.attempts, d.backoff_ms >= 0 ? d.backoff_ms : t.rec.settings.backoff_ms,
                       d.max_backoff_ms >= 0 ? d.max_backoff_ms : t.rec.settings.max_backoff_ms);
  }

  // A committed key that has not expired, if any.
  result<st::key_record> live_key(std::string_view scope, millis now) {
    auto v = store.get(column::keys, scope);
    if (!v.ok()) return std::move(v).err();
    auto k = st::decode_key(*v);
    if (!k.ok()) return k;
    if (k->expires_at_ms != 0 && k->expires_at_ms <= now)
      return make_error(errc::not_found, "key expired");
    return k;
  }

  void put_delivery(st::batch& b, const topic& t, const group& g, std::uint32_t p,
                    std::uint64_t off, const open_delivery& d) {
    b.put(column::deliveries, st::keys::delivery(t.rec.id, g.id, p, off), st::encode(d.record()));
  }

  void put_cursor(st::batch& b, const topic& t, const group& g, std::uint32_t p) {
    b.put(column::meta, st::keys::cursor(t.rec.id, g.id, p), st::encode_u64(g.parts[p].cursor));
  }

  // Makes a pending delivery deliverable at not_before_ms (now: ready set).
  void schedule_pending(topic& t, group& g, std::uint32_t p, std::uint64_t off, open_delivery& d,
                        millis now) {
    d.state = st::delivery_state::pending;
    if (d.parked) return;
    if (d.not_before_ms <= now) {
      g.parts[p].ready.insert(off);
      ready_topics.insert(t.rec.name);
    } else {
      timers.push(timer{d.not_before_ms, timer_kind::due, t.rec.id, g.id, p, off});
    }
  }

  // The key held by (p, off) is free again: deliveries parked on it become
  // ready (each is checked again on delivery: it may now be auto-acked).
  void release_key(topic& t, group& g, const std::string& scope, std::uint32_t p, std::uint64_t off,
                   millis now) {
    if (scope.empty()) return;
    auto it = g.leased_keys.find(scope);
    if (it != g.leased_keys.end() && it->second.partition == p && it->second.offset == off)
      g.leased_keys.erase(it);
    auto pk = g.parked.find(scope);
    if (pk == g.parked.end()) return;
    auto waiting = std::move(pk->second);
    g.parked.erase(pk);
    for (const auto& w : waiting) {
      auto& ps = g.parts[w.partition];
      auto d = ps.open.find(w.offset);
      if (d == ps.open.end() || !d->second.parked) continue;
      d->second.parked = false;
      schedule_pending(t, g, w.partition, w.offset, d->second, now);
    }
  }

  // Fencing shared by ack, nack and extend (spec: POST /v1/ack).
  struct located {
    topic* t;
    group* g;
    std::map<std::uint64_t, open_delivery>::iterator it;  // open.end(): no open delivery
  };
  result<located> locate(const delivery_ref& ref) {
    ONCEQ_TRY(validate_topic_name(ref.topic));
    ONCEQ_TRY(validate_label("group", ref.group));
    ONCEQ_TRY(validate_label("owner", ref.owner));
    auto t = topic_for_url(ref.topic);
    if (!t.ok()) return std::move(t).err();
    if (ref.partition >= (*t)->parts.size())
      return invalid(fmt::format("partition {} out of range (topic has {})", ref.partition,
                                 (*t)->parts.size()));
    auto* g = find_group(**t, ref.group);
    if (g == nullptr) return fenced("the message was never delivered to this group");
    auto& ps = g->parts[ref.partition];
    if (ref.offset >= ps.cursor) {
      ++g->stats.stale_acks_rejected;
      return fenced("the message was never delivered to this group");
    }
    return located{*t, g, ps.open.find(ref.offset)};
  }

  // The open delivery must be this owner's latest and not taken over by anyone.
  result<void> check_holder(group& g, const delivery_ref& ref, const open_delivery& d) {
    if (d.owner != ref.owner || d.attempts == 0) {
      ++g.stats.stale_acks_rejected;
      return fenced(fmt::format("delivery is not held by owner '{}'", ref.owner));
    }
    if (ref.attempts && *ref.attempts != d.attempts) {
      ++g.stats.stale_acks_rejected;
      return fenced(fmt::format("stale delivery: attempts {} but the current delivery is {}",
                                *ref.attempts, d.attempts));
    }
    if (d.parked) {
      ++g.stats.stale_acks_rejected;
      return fenced("the message's idempotency key is leased by another delivery");
    }
    return {};
  }

  // A lapsed delivery can still be finished by its owner if nobody else got
  // the message since; but not if another delivery holds its key now.
  result<void> check_key_free(group& g, const open_delivery& d, std::uint32_t p,
                              std::uint64_t off) {
    if (d.scope.empty()) return {};
    auto it = g.leased_keys.find(d.scope);
    if (it != g.leased_keys.end() && (it->second.partition != p || it->second.offset != off)) {
      ++g.stats.stale_acks_rejected;
      return fenced("the message's idempotency key is leased by another delivery");
    }
    return {};
  }

  void close_delivery(group& g, std::uint32_t p, std::uint64_t off) {
    auto& ps = g.parts[p];
    auto it = ps.open.find(off);
    if (it == ps.open.end()) return;
    if (it->second.state == st::delivery_state::leased && g.stats.inflight > 0) --g.stats.inflight;
    ps.ready.erase(off);
    ps.open.erase(it);
  }

  // Ends an open delivery whose message is gone (retention, DLQ redrive):
  // no longer in flight, and its key, if it held one, is free again.
  void drop_open(topic& t, group& g, std::uint32_t p, std::uint64_t off, millis now) {
    auto& ps = g.parts[p];
    auto it = ps.open.find(off);
    if (it == ps.open.end()) return;
    auto scope = it->second.scope;
    close_delivery(g, p, off);
    release_key(t, g, scope, p, off, now);
  }

  // Moves the message to dlq.<topic> and marks the delivery dead. The key,
  // if any, is left failed.
  result<void> dead_letter(topic& t, group& g, std::uint32_t p, std::uint64_t off, open_delivery& d,
                           millis now, st::batch& b) {
    auto m = read_message(t, p, off);
    if (m.ok()) {
      auto* dlq = ensure_dlq_topic(t, b);
      st::message_record copy = std::move(*m);
      copy.dlq = st::dlq_origin{t.rec.name, p, off, d.attempts, d.last_error, now};
      copy.deliver_at_ms = 0;
      auto& dp = dlq->parts[0];
      b.put(column::messages, st::keys::message(dlq->rec.id, 0, dp.next), st::encode(copy));
      ++dp.next;
      ++dlq->produced;
      ready_topics.insert(dlq->rec.name);
    }
    d.state = st::delivery_state::dead;
    b.put(column::deliveries, st::keys::delivery(t.rec.id, g.id, p, off), st::encode(d.record()));
    ++g.stats.dead_lettered;
    return {};
  }

  topic* ensure_dlq_topic(topic& t, st::batch& b) {
    std::string name = std::string(k_dlq_prefix) + t.rec.name;
    if (auto* d = find_topic(name)) return d;
    st::topic_record rec;
    rec.id = next_topic_id++;
    rec.name = name;
    rec.partitions = 1;
    rec.settings = t.rec.settings;
    rec.settings.max_attempts = 0;
    rec.created_at_ms = time.now_ms();
    b.put(column::meta, st::keys::topic(name), st::encode(rec));
    b.put(column::meta, st::keys::next_topic_id(), st::encode_u64(next_topic_id));
    return &add_topic(std::move(rec));
  }

  topic& add_topic(st::topic_record rec) {
    auto t = std::make_unique<topic>();
    t->rec = std::move(rec);
    t->parts.resize(t->rec.partitions);
    auto* raw = t.get();
    topics_by_id[raw->rec.id] = raw;
    topics.emplace(raw->rec.name, std::move(t));
    next_topic_id = std::max(next_topic_id, raw->rec.id + 1);
    return *raw;
  }

  // A failed attempt (nack or lease expiry): retry later or dead-letter.
  // The key becomes failed after a nack or the last attempt; a lease that
  // merely ran out returns it to available (spec: Concepts).
  result<void> fail_attempt(topic& t, group& g, std::uint32_t p, std::uint64_t off,
                            open_delivery& d, std::optional<millis> delay, bool nacked, millis now,
                            st::batch& b) {
    if (d.state == st::delivery_state::leased && g.stats.inflight > 0) --g.stats.inflight;
    d.state = st::delivery_state::pending;
    std::string scope = d.scope;
    auto max = max_attempts_of(t, d);
    bool exhausted = max > 0 && d.attempts >= max;
    if (!scope.empty() && (nacked || exhausted)) {
      st::key_record k;
      k.state = st::key_state::failed;
      k.owner = d.owner;
      k.partition = p;
      k.offset = off;
      k.attempts = d.attempts;
      auto ttl = key_ttl_of(t, d);
      k.expires_at_ms = ttl == 0 ? 0 : now + ttl;
      // A committed key (by another message) must not be overwritten.
      if (!live_key(scope, now).ok()) b.put(column::keys, scope, st::encode(k));
    }
    if (exhausted) {
      ONCEQ_TRY(dead_letter(t, g, p, off, d, now, b));
      close_delivery(g, p, off);
    } else {
      d.not_before_ms = now + (delay ? *delay : backoff_of(t, d));
      put_delivery(b, t, g, p, off, d);
      schedule_pending(t, g, p, off, d, now);
    }
    release_key(t, g, scope, p, off, now);
    return {};
  }

  // ---- consume ---------------------------------------------------------

  // Tries to hand offset off of partition p to owner. Returns true if it was
  // delivered (appended to out).
  result<bool> try_deliver(topic& t, group& g, std::uint32_t p, std::uint64_t off,
                           const consume_cmd& cmd, millis lease_ms, millis now, st::batch& b,
                           std::vector<delivery>& out) {
    auto& ps = g.parts[p];
    auto m = read_message(t, p, off);
    if (!m.ok() && m.code() != errc::not_found) return std::move(m).err();
    const auto retention = t.rec.settings.retention_ms;
    if (!m.ok() || (retention > 0 && m->produced_at_ms + retention <= now)) {
      // Deleted or expired: never delivered again, whatever the retention
      // run's pace.
      drop_open(t, g, p, off, now);
      b.del(column::deliveries, st::keys::delivery(t.rec.id, g.id, p, off));
      return false;
    }
    auto [it, fresh] = ps.open.try_emplace(off);
    auto& d = it->second;
    if (!d.known) fill_from_message(t, g, d, *m);
    if (m->deliver_at_ms > now && d.not_before_ms < m->deliver_at_ms) {
      d.not_before_ms = m->deliver_at_ms;
      put_delivery(b, t, g, p, off, d);
      schedule_pending(t, g, p, off, d, now);
      return false;
    }
    if (!d.scope.empty()) {
      auto held = g.leased_keys.find(d.scope);
      if (held != g.leased_keys.end() &&
          (held->second.partition != p || held->second.offset != off)) {
        d.parked = true;
        g.parked[d.scope].push_back(key_holder{p, off});
        put_delivery(b, t, g, p, off, d);
        return false;
      }
      auto k = live_key(d.scope, now);
      if (k.ok() && k->state == st::key_state::committed) {
        // Auto-ack: a message whose key is committed is never delivered.
        ++g.stats.auto_acked;
        if (!fresh) b.del(column::deliveries, st::keys::delivery(t.rec.id, g.id, p, off));
        close_delivery(g, p, off);
        return false;
      }
      if (!k.ok() && k.code() != errc::not_found) return std::move(k).err();
    }
    d.state = st::delivery_state::leased;
    d.owner = cmd.owner;
    ++d.attempts;
    d.lease_deadline_ms = now + lease_ms;
    d.not_before_ms = 0;
    if (!d.scope.empty()) g.leased_keys[d.scope] = key_holder{p, off};
    put_delivery(b, t, g, p, off, d);
    timers.push(timer{d.lease_deadline_ms, timer_kind::lease, t.rec.id, g.id, p, off});
    ++g.stats.inflight;
    ++g.stats.delivered;
    if (d.attempts > 1) ++g.stats.redelivered;
    delivery out_d;
    out_d.topic = t.rec.name;
    out_d.partition = p;
    out_d.offset = off;
    out_d.attempts = d.attempts;
    out_d.key = std::move(m->key);
    out_d.value = std::move(m->value);
    out_d.last_error = d.last_error;
    out_d.envelope_json = std::move(m->envelope_json);
    out_d.dlq = std::move(m->dlq);
    out_d.lease_expires_at_ms = d.lease_deadline_ms;
    out.push_back(std::move(out_d));
    return true;
  }

  // Delivers at most one message of partition p: redeliveries first (they are
  // older), then the next fresh offset. Held-back messages are set aside so
  // that they never block the partition.
  result<bool> take_one(topic& t, group& g, std::uint32_t p, const consume_cmd& cmd,
                        millis lease_ms, millis now, st::batch& b, std::vector<delivery>& out) {
    auto& ps = g.parts[p];
    const auto& part = t.parts[p];
    for (;;) {
      std::uint64_t off;
      if (!ps.ready.empty()) {
        off = *ps.ready.begin();
        ps.ready.erase(ps.ready.begin());
        auto it = ps.open.find(off);
        if (it == ps.open.end() || it->second.state != st::delivery_state::pending ||
            it->second.parked)
          continue;
      } else if (ps.cursor < part.next) {
        off = ps.cursor++;  // consume() writes the moved cursors once
        fill_read_ahead(t, p, off, static_cast<std::uint64_t>(cmd.max_messages) - out.size());
      } else {
        return false;
      }
      auto r = try_deliver(t, g, p, off, cmd, lease_ms, now, b, out);
      if (!r.ok()) return r;
      if (*r) return true;
    }
  }

  // ---- timers ----------------------------------------------------------

  void fire_timers(millis now) {
    if (failed) return;
    st::batch b;
    while (!timers.empty() && timers.top().at <= now) {
      timer tm = timers.top();
      timers.pop();
      auto ti = topics_by_id.find(tm.topic);
      if (ti == topics_by_id.end()) continue;
      auto& t = *ti->second;
      auto gi = t.groups_by_id.find(tm.group);
      if (gi == t.groups_by_id.end()) continue;
      auto& g = *gi->second;
      auto& ps = g.parts[tm.partition];
      auto it = ps.open.find(tm.offset);
      if (it == ps.open.end()) continue;
      auto& d = it->second;
      if (tm.kind == timer_kind::lease) {
        if (d.state != st::delivery_state::leased || d.lease_deadline_ms != tm.at) continue;
        d.last_error = "lease_expired";
        ++g.stats.lease_expired;
        // Ignoring the error is deliberate: it can only be a failed read,
        // and the delivery stays as it was for the next tick.
        [[maybe_unused]] auto ignored =
            fail_attempt(t, g, tm.partition, tm.offset, d, std::nullopt, false, now, b);
      } else {
        if (d.state != st::delivery_state::pending || d.parked || d.not_before_ms > now) continue;
        ps.ready.insert(tm.offset);
        ready_topics.insert(t.rec.name);
      }
    }
    // Ignoring a failed write here is deliberate: write() poisons the state
    // and every later command answers UNAVAILABLE.
    [[maybe_unused]] auto ignored = write(b);
  }

  // ---- retention -------------------------------------------------------

  // Deletes the messages of partition p below upto, with every group's
  // delivery records for them; open deliveries there end (unacked messages
  // dropped by age, or moved out of a DLQ) and cursors move past them.
  void truncate(topic& t, std::uint32_t p, std::uint64_t upto, millis now, st::batch& b) {
    auto& part = t.parts[p];
    if (upto <= part.start) return;
    b.del_range(column::messages, st::keys::message(t.rec.id, p, part.start),
                st::keys::message(t.rec.id, p, upto));
    for (auto& [name, g] : t.groups) {
      b.del_range(column::deliveries, st::keys::delivery(t.rec.id, g->id, p, part.start),
                  st::keys::delivery(t.rec.id, g->id, p, upto));
      auto& ps = g->parts[p];
      while (!ps.open.empty() && ps.open.begin()->first < upto)
        drop_open(t, *g, p, ps.open.begin()->first, now);
      if (ps.cursor < upto) {
        ps.cursor = upto;
        put_cursor(b, t, *g, p);
      }
    }
    part.start = upto;
    b.put(column::meta, st::keys::partition_start(t.rec.id, p), st::encode_u64(upto));
  }

  // Deletes messages acked by every group, and messages older than the
  // topic's retention_ms, a bounded number per run.
  void run_retention(millis now) {
    if (failed) return;
    st::batch b;
    for (auto& [name, tp] : topics) {
      auto& t = *tp;
      for (std::uint32_t p = 0; p < t.parts.size(); ++p) {
        auto& part = t.parts[p];
        std::uint64_t upto = part.start;
        // Acked by every group: below every group's lowest open offset.
        if (!t.groups.empty()) {
          std::uint64_t low = part.next;
          for (auto& [gn, g] : t.groups) {
            auto& ps = g->parts[p];
            std::uint64_t gl =
                ps.open.empty() ? ps.cursor : std::min(ps.cursor, ps.open.begin()->first);
            low = std::min(low, gl);
          }
          upto = std::max(upto, low);
        }
        // Older than retention_ms, acked or not.
        if (t.rec.settings.retention_ms > 0) {
          std::uint64_t aged = upto;
          auto begin = st::keys::message(t.rec.id, p, upto);
          auto end = st::keys::message(t.rec.id, p, part.next);
          std::size_t seen = 0;
          auto scanned =
              store.scan(column::messages, begin, end, [&](std::string_view k, std::string_view v) {
                auto m = st::decode_message(v);
                auto off = st::keys::parse_message_offset(k);
                if (!m.ok() || !off.ok()) return false;
                if (m->produced_at_ms + t.rec.settings.retention_ms > now) return false;
                aged = *off + 1;
                return ++seen < k_retention_batch;
              });
          if (scanned.ok()) upto = std::max(upto, aged);
        }
        upto = std::min(upto, part.start + k_retention_batch);
        if (upto <= part.start) continue;
        truncate(t, p, upto, now, b);
      }
    }
    [[maybe_unused]] auto ignored = write(b);  // see fire_timers
  }
};

// ---- public ------------------------------------------------------------

broker::broker(st::store& store, const clock& time, broker_options opts)
    : s_(std::make_unique<state>(store, time, opts)) {}

broker::~broker() = default;

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
}  // namespace

result<void> broker::recover() {
  auto& s = *s_;
  auto now = s.time.now_ms();
  if (auto n = s.store.get(column::meta, st::keys::next_topic_id()); n.ok()) {
    auto v = st::decode_u64(*n);
    if (!v.ok()) return std::move(v).err();
    s.next_topic_id = static_cast<st::topic_id>(*v);
  }
  std::vector<st::topic_record> recs;
  ONCEQ_TRY(scan_prefix(s.store, column::meta, st::keys::topic_prefix(),
                        [&](std::string_view, std::string_view v) -> result<void> {
                          auto r = st::decode_topic(v);
                          if (!r.ok()) return std::move(r).err();
                          recs.push_back(std::move(*r));
                          return {};
                        }));
  for (auto& rec : recs) {
    auto& t = s.add_topic(std::move(rec));
    auto id = t.rec.id;
    ONCEQ_TRY(scan_prefix(s.store, column::meta, st::keys::partition_start_prefix(id),
                          [&](std::string_view k, std::string_view v) -> result<void> {
                            auto p = st::keys::parse_partition_start(k);
                            auto off = st::decode_u64(v);
                            if (!p.ok()) return std::move(p).err();
                            if (!off.ok()) return std::move(off).err();
                            if (*p < t.parts.size()) t.parts[*p].start = *off;
                            return {};
                          }));
    for (std::uint32_t p = 0; p < t.parts.size(); ++p) {
      auto& part = t.parts[p];
      part.next = part.start;
      part.tail_base = part.start;
      auto last =
          s.store.last_key(column::messages, st::keys::message(id, p, 0),
                           st::keys::message(id, p, std::numeric_limits<std::uint64_t>::max()));
      if (last.ok()) {
        auto off = st::keys::parse_message_offset(*last);
        if (!off.ok()) return std::move(off).err();
        part.next = std::max(part.next, *off + 1);
      }
    }
    ONCEQ_TRY(scan_prefix(s.store, column::meta, st::keys::group_prefix(id),
                          [&](std::string_view, std::string_view v) -> result<void> {
                            auto g = st::decode_group(v);
                            if (!g.ok()) return std::move(g).err();
                            s.add_group(t, g->id, g->name);
                            return {};
                          }));
    ONCEQ_TRY(scan_prefix(s.store, column::meta, st::keys::cursor_prefix(id),
                          [&](std::string_view k, std::string_view v) -> result<void> {
                            auto c = st::keys::parse_cursor(k);
                            auto off = st::decode_u64(v);
                            if (!c.ok()) return std::move(c).err();
                            if (!off.ok()) return std::move(off).err();
                            auto gi = t.groups_by_id.find(c->group);
                            if (gi != t.groups_by_id.end() && c->partition < t.parts.size())
                              gi->second->parts[c->partition].cursor = *off;
                            return {};
                          }));
    // Open deliveries: leases, pending redeliveries, attempts, held keys.
    struct loaded {
      st::keys::delivery_key key;
      st::delivery_record rec;
    };
    std::vector<loaded> open;
    ONCEQ_TRY(scan_records(
        s.store, column::deliveries, st::keys::topic_begin(id), st::keys::topic_end(id),
        [&](std::string_view k, std::string_view v) -> result<void> {
          auto dk = st::keys::parse_delivery(k);
          if (!dk.ok()) return std::move(dk).err();
          auto dr = st::decode_delivery(v);
          if (!dr.ok()) return std::move(dr).err();
          if (dr->state == st::delivery_state::pending || dr->state == st::delivery_state::leased)
            open.push_back(loaded{*dk, std::move(*dr)});
          return {};
        }));
    for (auto& l : open) {
      auto gi = t.groups_by_id.find(l.key.group);
      if (gi == t.groups_by_id.end() || l.key.partition >= t.parts.size()) continue;
      auto& g = *gi->second;
      auto p = l.key.partition;
      auto off = l.key.offset;
      auto m = s.read_message(t, p, off);
      if (!m.ok()) continue;  // deleted by retention; the record goes with the next run
      auto& d = g.parts[p].open[off];
      d.state = l.rec.state;
      d.owner = std::move(l.rec.owner);
      d.attempts = l.rec.attempts;
      d.lease_deadline_ms = l.rec.lease_deadline_ms;
      d.not_before_ms = l.rec.not_before_ms;
      d.last_error = std::move(l.rec.last_error);
      s.fill_from_message(t, g, d, *m);
      if (d.state == st::delivery_state::leased) {
        ++g.stats.inflight;
        if (!d.scope.empty()) g.leased_keys[d.scope] = key_holder{p, off};
        s.timers.push(timer{d.lease_deadline_ms, timer_kind::lease, id, g.id, p, off});
      } else {
        s.schedule_pending(t, g, p, off, d, now);
      }
    }
  }
  s.ready_topics.clear();
  return {};
}

result<topic_created> broker::create_topic(const create_topic_cmd& cmd) {
  auto& s = *s_;
  ONCEQ_TRY(validate_topic_name(cmd.name));
  ONCEQ_TRY(validate_range("partitions", cmd.partitions, 1, s.opts.max_partitions));
  ONCEQ_TRY(validate_settings(cmd.settings));
  // The topic's lease is the consumers' default: it must be one they may use.
  ONCEQ_TRY(validate_range("lease_ms", cmd.settings.lease_ms, 1, s.opts.max_lease_ms));
  ONCEQ_TRY(s.writable());
  if (auto* t = s.find_topic(cmd.name)) {
    if (t->rec.partitions == static_cast<std::uint32_t>(cmd.partitions) &&
        t->rec.settings == cmd.settings)
      return topic_created{cmd.name, t->rec.partitions, false};
    return make_error(errc::already_exists,
                      fmt::format("topic '{}' exists with a different configuration", cmd.name));
  }
  st::topic_record rec;
  rec.id = s.next_topic_id;
  rec.name = cmd.name;
  rec.partitions = static_cast<std::uint32_t>(cmd.partitions);
  rec.settings = cmd.settings;
  rec.created_at_ms = s.time.now_ms();
  st::batch b;
  b.put(column::meta, st::keys::topic(rec.name), st::encode(rec));
  b.put(column::meta, st::keys::next_topic_id(), st::encode_u64(rec.id + 1));
  ONCEQ_TRY(s.write(b));
  s.add_topic(std::move(rec));
  return topic_created{cmd.name, static_cast<std::uint32_t>(cmd.partitions), true};
}

std::vector<std::string> broker::list_topics() const {
  std::vector<std::string> out;
  out.reserve(s_->topics.size());
  for (const auto& [name, t] : s_->topics) out.push_back(name);
  return out;  // std::map keeps them sorted
}

namespace {
topic_info info_of(const topic& t) {
  topic_info info;
  info.name = t.rec.name;
  info.partitions = t.rec.partitions;
  info.settings = t.rec.settings;
  info.produced = t.produced;
  info.produce_duplicates = t.produce_duplicates;
  for (const auto& [name, g] : t.groups) {
    auto gs = g->stats;
    std::uint64_t waiting = 0;
    millis oldest = 0;
    for (std::size_t p = 0; p < g->parts.size(); ++p) {
      const auto& ps = g->parts[p];
      waiting += t.parts[p].next > ps.cursor ? t.parts[p].next - ps.cursor : 0;
      waiting += ps.open.size();
      // The lowest open offset is the oldest unacked message of its partition.
      if (!ps.open.empty()) {
        const auto& d = ps.open.begin()->second;
        if (d.known && (oldest == 0 || d.produced_at_ms < oldest)) oldest = d.produced_at_ms;
      }
    }
    gs.backlog = waiting >= gs.inflight ? waiting - gs.inflight : 0;
    gs.oldest_unacked_produced_at_ms = oldest;
    info.groups.emplace(name, gs);
  }
  return info;
}
}  // namespace

result<topic_info> broker::get_topic(std::string_view name) const {
  auto it = s_->topics.find(name);
  if (it == s_->topics.end())
    return make_error(errc::not_found, fmt::format("topic '{}' not found", name));
  return info_of(*it->second);
}

result<void> broker::delete_topic(std::string_view name) {
  auto& s = *s_;
  auto t = s.topic_for_url(name);
  if (!t.ok()) return std::move(t).err();
  ONCEQ_TRY(s.writable());
  auto id = (*t)->rec.id;
  st::batch b;
  b.del(column::meta, st::keys::topic(name));
  for (const auto& prefix : {st::keys::group_prefix(id), st::keys::cursor_prefix(id),
                             st::keys::partition_start_prefix(id)})
    b.del_range(column::meta, prefix, st::keys::prefix_end(prefix));
  for (auto c : {column::messages, column::deliveries, column::keys, column::dedup})
    b.del_range(c, st::keys::topic_begin(id), st::keys::topic_end(id));
  ONCEQ_TRY(s.write(b));
  for (std::uint32_t p = 0; p < (*t)->parts.size(); ++p) s.cache_drop(**t, p);
  s.topics_by_id.erase(id);
  s.topics.erase(s.topics.find(name));
  return {};
}

namespace {
constexpr std::size_t k_no_slot = static_cast<std::size_t>(-1);
}  // namespace

result<produce_reply> broker::produce(const produce_cmd& cmd) {
  auto& s = *s_;
  auto tr = s.topic_for_body(cmd.topic);
  if (!tr.ok()) return std::move(tr).err();
  auto& t = **tr;
  if (cmd.messages.empty() || cmd.messages.size() > s.opts.max_batch)
    return invalid(fmt::format("a produce carries 1..{} messages", s.opts.max_batch));
  ONCEQ_TRY(s.writable());
  auto now = s.time.now_ms();
  const auto window = t.rec.settings.dedup_window_ms;
  constexpr auto k_max_ms = std::numeric_limits<std::int64_t>::max() / 4;

  produce_reply reply;
  reply.results.reserve(cmd.messages.size());
  std::vector<std::uint64_t> next(t.parts.size());
  for (std::size_t p = 0; p < t.parts.size(); ++p) next[p] = t.parts[p].next;
  std::unordered_map<std::string, produced> seen;  // dedup ids within this request
  std::vector<std::pair<produced, st::message_record>> fresh;
  fresh.reserve(cmd.messages.size());
  st::batch b;
  std::uint64_t stored = 0, dups = 0;

  // Each message's dedup id (its msg_id, else one derived from the
  // Idempotency-Key header), and the stored dedup records of all of them,
  // read in one batch.
  std::vector<std::string> dedup_ids(cmd.messages.size());
  std::vector<std::string> dedup_keys;
  std::vector<std::size_t> dedup_slot(cmd.messages.size(), k_no_slot);
  for (std::size_t i = 0; i < cmd.messages.size(); ++i) {
    const auto& m = cmd.messages[i];
    std::string& id = dedup_ids[i];
    id = m.msg_id;
    if (id.empty() && !cmd.idempotency_header.empty())
      id = cmd.messages.size() == 1 ? cmd.idempotency_header
                                    : fmt::format("{}#{}", cmd.idempotency_header, i);
    if (id.empty() || window <= 0) continue;
    dedup_slot[i] = dedup_keys.size();
    dedup_keys.push_back(st::keys::dedup(t.rec.id, id));
  }
  auto stored_dedup = s.store.multi_get(column::dedup, dedup_keys);

  for (std::size_t i = 0; i < cmd.messages.size(); ++i) {
    const auto& m = cmd.messages[i];
    auto where = [&](std::string_view field) {
      return cmd.messages.size() == 1 ? std::string(field)
                                      : fmt::format("messages[{}].{}", i, field);
    };
    if (m.value.empty()) return invalid(where("value") + " must be a non-empty string");
    if (m.partition_override &&
        (*m.partition_override < 0 ||
         *m.partition_override >= static_cast<std::int64_t>(t.parts.size())))
      return invalid(fmt::format("{} must be between 0 and {}",
                                 where("envelope.partition_override"), t.parts.size() - 1));
    if (m.deadline_ms && *m.deadline_ms < now)
      return invalid(where("envelope.deadline") + " has passed");
    if (m.key_ttl_ms)
      ONCEQ_TRY(validate_range(where("envelope.key_ttl_ms"), *m.key_ttl_ms, 0, k_max_ms));
    if (m.delay_ms)
      ONCEQ_TRY(validate_range(where("envelope.delay_ms"), *m.delay_ms, 0, s.opts.max_delay_ms));
    if (m.retry.max_attempts)
      ONCEQ_TRY(validate_range(where("envelope.retry_policy.max_attempts"), *m.retry.max_attempts,
                               0, 1'000'000));
    if (m.retry.backoff_ms)
      ONCEQ_TRY(validate_range(where("envelope.retry_policy.backoff_ms"), *m.retry.backoff_ms, 0,
                               k_max_ms));
    if (m.retry.max_backoff_ms)
      ONCEQ_TRY(validate_range(where("envelope.retry_policy.max_backoff_ms"),
                               *m.retry.max_backoff_ms, 0, k_max_ms));

    const std::string& dedup_id = dedup_ids[i];
    std::string dedup_key;
    if (dedup_slot[i] != k_no_slot) {
      if (auto it = seen.find(dedup_id); it != seen.end()) {
        reply.results.push_back(produced{it->second.partition, it->second.offset, true});
        ++dups;
        continue;
      }
      dedup_key = std::move(dedup_keys[dedup_slot[i]]);
      auto& v = stored_dedup[dedup_slot[i]];
      if (v.ok()) {
        auto d = st::decode_dedup(*v);
        if (!d.ok()) return std::move(d).err();
        // The window counts from the first stored produce and does not slide.
        if (now < d->stored_at_ms + window) {
          produced dup{d->partition, d->offset, true};
          seen.emplace(dedup_id, dup);
          reply.results.push_back(dup);
          ++dups;
          continue;
        }
      } else if (v.code() != errc::not_found) {
        return std::move(v).err();
      }
    }

    std::uint32_t p = 0;
    if (m.partition_override) {
      p = static_cast<std::uint32_t>(*m.partition_override);
    } else if (m.key && !m.key->empty()) {
      p = static_cast<std::uint32_t>(partition_hash(*m.key) % t.parts.size());
    }
    std::uint64_t off = next[p]++;
    st::message_record rec;
    rec.produced_at_ms = now;
    rec.deliver_at_ms = m.delay_ms && *m.delay_ms > 0 ? now + *m.delay_ms : 0;
    rec.key = m.key;
    rec.value = m.value;
    rec.envelope_json = m.envelope_json;
    rec.idempotency_key = m.idempotency_key;
    rec.tenant_id = m.tenant_id;
    rec.key_ttl_ms = m.key_ttl_ms.value_or(-1);
    rec.max_attempts = m.retry.max_attempts.value_or(-1);
    rec.backoff_ms = m.retry.backoff_ms.value_or(-1);
    rec.max_backoff_ms = m.retry.max_backoff_ms.value_or(-1);
    b.put(column::messages, st::keys::message(t.rec.id, p, off), st::encode(rec));
    produced res{p, off, false};
    fresh.emplace_back(res, std::move(rec));
    if (!dedup_key.empty()) {
      b.put(column::dedup, dedup_key, st::encode(st::dedup_record{now + window, p, off, now}));
      seen.emplace(dedup_id, res);
    }
    reply.results.push_back(res);
    ++stored;
  }
  ONCEQ_TRY(s.write(b));
  for (auto& [where, rec] : fresh) s.cache_append(t, where.partition, where.offset, std::move(rec));
  for (std::size_t p = 0; p < t.parts.size(); ++p) t.parts[p].next = next[p];
  t.produced += stored;
  t.produce_duplicates += dups;
  if (stored > 0) s.ready_topics.insert(t.rec.name);
  return reply;
}

result<std::vector<delivery>> broker::consume(const consume_cmd& cmd) {
  auto& s = *s_;
  auto tr = s.topic_for_body(cmd.topic);
  if (!tr.ok()) return std::move(tr).err();
  auto& t = **tr;
  ONCEQ_TRY(validate_label("group", cmd.group));
  ONCEQ_TRY(validate_label("owner", cmd.owner));
  ONCEQ_TRY(validate_range("max_messages", cmd.max_messages, 1,
                           static_cast<std::int64_t>(s.opts.max_batch)));
  millis lease_ms = cmd.lease_ms.value_or(t.rec.settings.lease_ms);
  ONCEQ_TRY(validate_range("lease_ms", lease_ms, 1, s.opts.max_lease_ms));
  ONCEQ_TRY(s.writable());
  auto now = s.time.now_ms();
  s.fire_timers(now);

  st::batch b;
  auto& g = s.ensure_group(t, cmd.group, b);
  std::vector<delivery> out;
  const auto n = static_cast<std::uint32_t>(t.parts.size());
  // Round robin over partitions, one message per partition per round, so
  // that one busy partition does not starve the others.
  // Cursors as they were: those that moved are written once at the end,
  // not once per message taken.
  std::vector<std::uint64_t> cursors(n);
  for (std::uint32_t p = 0; p < n; ++p) cursors[p] = g.parts[p].cursor;
  bool progress = true;
  while (progress && out.size() < static_cast<std::size_t>(cmd.max_messages)) {
    progress = false;
    for (std::uint32_t i = 0; i < n && out.size() < static_cast<std::size_t>(cmd.max_messages);
         ++i) {
      auto p = (g.next_partition + i) % n;
      auto r = s.take_one(t, g, p, cmd, lease_ms, now, b, out);
      if (!r.ok()) return std::move(r).err();
      progress = progress || *r;
    }
    g.next_partition = (g.next_partition + 1) % n;
  }
  for (std::uint32_t p = 0; p < n; ++p) {
    if (g.parts[p].cursor != cursors[p]) s.put_cursor(b, t, g, p);
  }
  ONCEQ_TRY(s.write(b));
  return out;
}

result<void> broker::ack(const ack_cmd& cmd) {
  ack_batch_cmd batch{
      cmd.ref.topic,
      cmd.ref.group,
      cmd.ref.owner,
      {ack_item{cmd.ref.partition, cmd.ref.offset, cmd.ref.attempts, cmd.result_json}}};
  auto r = ack_batch(batch);
  if (!r.ok()) return std::move(r).err();
  auto& o = r->front();
  if (o.code != errc::ok) return make_error(o.code, o.message);
  return {};
}

result<std::vector<ack_outcome>> broker::ack_batch(const ack_batch_cmd& cmd) {
  auto& s = *s_;
  if (cmd.acks.empty() || cmd.acks.size() > s.opts.max_batch)
    return invalid(fmt::format("an ack carries 1..{} acks", s.opts.max_batch));
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  ONCEQ_TRY(s.topic_for_url(cmd.topic));
  ONCEQ_TRY(s.writable());
  auto now = s.time.now_ms();
  std::vector<ack_outcome> out;
  out.reserve(cmd.acks.size());
  st::batch b;
  for (const auto& a : cmd.acks) {
    ack_outcome o{a.partition, a.offset, errc::ok, {}};
    delivery_ref ref{cmd.topic, cmd.group, cmd.owner, a.partition, a.offset, a.attempts};
    auto one = [&]() -> result<void> {
      auto loc = s.locate(ref);
      if (!loc.ok()) return std::move(loc).err();
      auto& [t, g, it] = *loc;
      auto& ps = g->parts[a.partition];
      if (it == ps.open.end()) {
        // Acked already, auto-acked, dead-lettered or deleted: only the same
        // owner's repeated ack of the same delivery succeeds.
        auto v = s.store.get(column::deliveries,
                             st::keys::delivery(t->rec.id, g->id, a.partition, a.offset));
        if (v.ok()) {
          auto d = st::decode_delivery(*v);
          if (d.ok() && d->state == st::delivery_state::acked && d->owner == cmd.owner &&
              (!a.attempts || *a.attempts == d->attempts))
            return {};
        }
        ++g->stats.stale_acks_rejected;
        return fenced(
            "the delivery is no longer open (acked by another delivery, auto-acked or "
            "dead-lettered)");
      }
      auto& d = it->second;
      ONCEQ_TRY(s.check_holder(*g, ref, d));
      ONCEQ_TRY(s.check_key_free(*g, d, a.partition, a.offset));
      if (!d.scope.empty()) {
        // While this delivery holds the key's lease nobody else can commit
        // it (and it was not committed when delivered): only a lapsed
        // delivery needs to look.
        auto held = g->leased_keys.find(d.scope);
        bool holding = d.state == st::delivery_state::leased && held != g->leased_keys.end() &&
                       held->second.partition == a.partition && held->second.offset == a.offset;
        auto k = holding ? result<st::key_record>(make_error(errc::not_found, "held"))
                         : s.live_key(d.scope, now);
        if (k.ok() && k->state == st::key_state::committed) {
          ++g->stats.stale_acks_rejected;
          return fenced("the message's idempotency key was committed by another delivery");
        }
        st::key_record kr;
        kr.state = st::key_state::committed;
        kr.owner = cmd.owner;
        kr.partition = a.partition;
        kr.offset = a.offset;
        kr.attempts = d.attempts;
        kr.committed_at_ms = now;
        auto ttl = state::key_ttl_of(*t, d);
        kr.expires_at_ms = ttl == 0 ? 0 : now + ttl;
        kr.result_json = a.result_json;
        b.put(column::keys, d.scope, st::encode(kr));
        s.committed_keys.push_back(d.scope);
      }
      // Kept (until retention) so that the same owner's repeated ack is a no-op.
      auto rec = d.record();
      rec.state = st::delivery_state::acked;
      b.put(column::deliveries, st::keys::delivery(t->rec.id, g->id, a.partition, a.offset),
            st::encode(rec));
      ++g->stats.acked;
      auto scope = d.scope;
      s.close_delivery(*g, a.partition, a.offset);
      s.release_key(*t, *g, scope, a.partition, a.offset, now);
      return {};
    };
    auto r = one();
    if (!r.ok()) {
      o.code = r.code();
      o.message = r.err().message;
    }
    out.push_back(std::move(o));
  }
  ONCEQ_TRY(s.write(b));
  return out;
}

result<void> broker::nack(const nack_cmd& cmd) {
  auto& s = *s_;
  if (cmd.delay_ms) ONCEQ_TRY(validate_range("delay_ms", *cmd.delay_ms, 0, s.opts.max_delay_ms));
  ONCEQ_TRY(s.writable());
  auto loc = s.locate(cmd.ref);
  if (!loc.ok()) return std::move(loc).err();
  auto& [t, g, it] = *loc;
  if (it == g->parts[cmd.ref.partition].open.end()) {
    ++g->stats.stale_acks_rejected;
    return fenced("the delivery is no longer open");
  }
  auto& d = it->second;
  ONCEQ_TRY(s.check_holder(*g, cmd.ref, d));
  ONCEQ_TRY(s.check_key_free(*g, d, cmd.ref.partition, cmd.ref.offset));
  auto now = s.time.now_ms();
  st::batch b;
  d.last_error = cmd.reason.empty() ? "nack" : cmd.reason;
  ++g->stats.nacked;
  ONCEQ_TRY(
      s.fail_attempt(*t, *g, cmd.ref.partition, cmd.ref.offset, d, cmd.delay_ms, true, now, b));
  return s.write(b);
}

result<millis> broker::extend(const extend_cmd& cmd) {
  auto& s = *s_;
  ONCEQ_TRY(validate_range("lease_ms", cmd.lease_ms, 1, s.opts.max_lease_ms));
  ONCEQ_TRY(s.writable());
  auto loc = s.locate(cmd.ref);
  if (!loc.ok()) return std::move(loc).err();
  auto& [t, g, it] = *loc;
  auto p = cmd.ref.partition;
  auto off = cmd.ref.offset;
  if (it == g->parts[p].open.end()) {
    ++g->stats.stale_acks_rejected;
    return fenced("the delivery is no longer open");
  }
  auto& d = it->second;
  ONCEQ_TRY(s.check_holder(*g, cmd.ref, d));
  ONCEQ_TRY(s.check_key_free(*g, d, p, off));
  auto now = s.time.now_ms();
  if (d.state != st::delivery_state::leased) {
    // Lapsed, and nobody received it since: the owner takes it back.
    g->parts[p].ready.erase(off);
    d.state = st::delivery_state::leased;
    ++g->stats.inflight;
    if (!d.scope.empty()) g->leased_keys[d.scope] = key_holder{p, off};
  }
  d.lease_deadline_ms = now + cmd.lease_ms;
  d.not_before_ms = 0;
  s.timers.push(timer{d.lease_deadline_ms, timer_kind::lease, t->rec.id, g->id, p, off});
  st::batch b;
  s.put_delivery(b, *t, *g, p, off, d);
  ONCEQ_TRY(s.write(b));
  return d.lease_deadline_ms;
}

result<key_info> broker::get_key(const key_query& q) {
  auto& s = *s_;
  ONCEQ_TRY(validate_topic_name(q.topic));
  ONCEQ_TRY(validate_label("group", q.group));
  if (q.key.empty()) return invalid("key must be a non-empty string");
  auto tr = s.topic_for_url(q.topic);
  if (!tr.ok()) return std::move(tr).err();
  auto& t = **tr;
  key_info info;
  auto* g = state::find_group(t, q.group);
  if (g == nullptr) return info;
  auto now = s.time.now_ms();
  s.fire_timers(now);
  auto scope = st::keys::idem_key(t.rec.id, g->id, q.tenant_id, q.key);
  if (auto held = g->leased_keys.find(scope); held != g->leased_keys.end()) {
    auto& ps = g->parts[held->second.partition];
    if (auto d = ps.open.find(held->second.offset); d != ps.open.end()) {
      info.st = key_info::state::leased;
      info.owner = d->second.owner;
      info.partition = held->second.partition;
      info.offset = held->second.offset;
      info.attempts = d->second.attempts;
      info.lease_expires_at_ms = d->second.lease_deadline_ms;
      return info;
    }
  }
  auto k = s.live_key(scope, now);
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
  if (k->state == st::key_state::committed) {
    info.committed_at_ms = k->committed_at_ms;
    info.expires_at_ms = k->expires_at_ms;
    info.result_json = std::move(k->result_json);
  }
  return info;
}

result<std::int64_t> broker::redrive(const redrive_cmd& cmd) {
  auto& s = *s_;
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  auto max = cmd.max_messages.value_or(std::numeric_limits<std::int64_t>::max());
  ONCEQ_TRY(validate_range("max_messages", max, 1, std::numeric_limits<std::int64_t>::max()));
  max = std::min<std::int64_t>(max, static_cast<std::int64_t>(s.opts.max_batch) * 100);
  auto tr = s.topic_for_url(cmd.topic);
  if (!tr.ok()) return std::move(tr).err();
  auto& t = **tr;
  ONCEQ_TRY(s.writable());
  auto* dlq = s.find_topic(std::string(k_dlq_prefix) + cmd.topic);
  if (dlq == nullptr) return std::int64_t{0};
  auto now = s.time.now_ms();
  st::batch b;
  std::int64_t moved = 0;
  std::vector<std::uint64_t> next(t.parts.size());
  for (std::size_t p = 0; p < t.parts.size(); ++p) next[p] = t.parts[p].next;
  auto& dp = dlq->parts[0];
  std::uint64_t upto = dp.start;
  std::optional<error> bad;
  ONCEQ_TRY(s.store.scan(
      column::messages, st::keys::message(dlq->rec.id, 0, dp.start),
      st::keys::message(dlq->rec.id, 0, dp.next), [&](std::string_view k, std::string_view v) {
        auto m = st::decode_message(v);
        auto off = st::keys::parse_message_offset(k);
        if (!m.ok() || !off.ok()) {
          bad = !m.ok() ? m.err() : off.err();
          return false;
        }
        std::uint32_t p = 0;
        if (m->dlq && m->dlq->original_partition < t.parts.size()) p = m->dlq->original_partition;
        m->dlq.reset();
        m->produced_at_ms = now;
        b.put(column::messages, st::keys::message(t.rec.id, p, next[p]++), st::encode(*m));
        upto = *off + 1;
        return ++moved < max;
      }));
  if (bad) return *bad;
  if (moved == 0) return std::int64_t{0};
  s.truncate(*dlq, 0, upto, now, b);
  ONCEQ_TRY(s.write(b));
  for (std::size_t p = 0; p < t.parts.size(); ++p) t.parts[p].next = next[p];
  t.produced += static_cast<std::uint64_t>(moved);
  s.ready_topics.insert(t.rec.name);
  return moved;
}

void broker::tick() {
  auto& s = *s_;
  auto now = s.time.now_ms();
  s.fire_timers(now);
  if (now >= s.next_retention_ms) {
    s.next_retention_ms = now + k_retention_period_ms;
    s.run_retention(now);
  }
}

std::optional<millis> broker::next_deadline() const {
  const auto& s = *s_;
  std::optional<millis> d;
  if (!s.timers.empty()) d = s.timers.top().at;
  if (!s.topics.empty() && (!d || s.next_retention_ms < *d)) d = s.next_retention_ms;
  return d;
}

std::vector<std::string> broker::take_ready_topics() {
  std::vector<std::string> out(s_->ready_topics.begin(), s_->ready_topics.end());
  s_->ready_topics.clear();
  return out;
}

std::vector<std::string> broker::take_committed_keys() {
  std::vector<std::string> out;
  out.swap(s_->committed_keys);
  return out;
}

std::vector<topic_info> broker::metrics() const {
  std::vector<topic_info> out;
  out.reserve(s_->topics.size());
  for (const auto& [name, t] : s_->topics) out.push_back(info_of(*t));
  return out;
}

}  // namespace onceq
