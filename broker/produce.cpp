// broker::produce and broker::redrive: the commands that append to
// partition logs.

#include <fmt/format.h>

#include <limits>

#include "broker/broker.hpp"
#include "broker/core.hpp"
#include "broker/dedup.hpp"
#include "broker/delivery.hpp"
#include "broker/errors.hpp"
#include "broker/key_source.hpp"
#include "broker/key_table.hpp"
#include "broker/produce.hpp"
#include "broker/retention.hpp"
#include "broker/validation.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

// Names message i of n in errors ("message" or "messages[i]"), formatted
// only when an error is made: a batch's every message used to format both
// names up front, 2.5% of a produce's instructions (docs/BENCHMARKS.md,
// "Thirteenth round").
struct message_where {
  std::size_t n = 1;
  std::size_t i = 0;
  std::string name() const {
    return n == 1 ? std::string("message") : fmt::format("messages[{}]", i);
  }
  // The prefix of a field's path: "" for a single message.
  std::string prefix() const { return n == 1 ? std::string() : fmt::format("messages[{}].", i); }
};

// prefix() names the message in an error; called only to make one.
template <class Prefix>
result<void> validate_message(const message_in& m, const Prefix& prefix, std::size_t partitions,
                              millis now, const broker_options& opts) {
  constexpr auto k_max_ms = std::numeric_limits<std::int64_t>::max() / 4;
  auto where = [&](std::string_view field) { return prefix() + std::string(field); };
  if (m.value.empty()) return invalid(where("value") + " must be a non-empty string");
  if (m.partition_override &&
      (*m.partition_override < 0 || *m.partition_override >= static_cast<std::int64_t>(partitions)))
    return invalid(fmt::format("{} must be between 0 and {}", where("envelope.partition_override"),
                               partitions - 1));
  if (m.deadline_ms && *m.deadline_ms < now)
    return invalid(where("envelope.deadline") + " has passed");
  if (m.key_ttl_ms)
    ONCEQ_TRY(validate_range(where("envelope.key_ttl_ms"), *m.key_ttl_ms, 0, k_max_ms));
  if (m.delay_ms)
    ONCEQ_TRY(validate_range(where("envelope.delay_ms"), *m.delay_ms, 0, opts.max_delay_ms));
  if (m.retry.max_attempts)
    ONCEQ_TRY(validate_range(where("envelope.retry_policy.max_attempts"), *m.retry.max_attempts, 0,
                             1'000'000));
  if (m.retry.backoff_ms)
    ONCEQ_TRY(validate_range(where("envelope.retry_policy.backoff_ms"), *m.retry.backoff_ms, 0,
                             k_max_ms));
  if (m.retry.max_backoff_ms)
    ONCEQ_TRY(validate_range(where("envelope.retry_policy.max_backoff_ms"), *m.retry.max_backoff_ms,
                             0, k_max_ms));
  return {};
}

st::message_record to_record(const message_in& m, std::string idempotency_key, millis now) {
  st::message_record rec;
  rec.produced_at_ms = now;
  rec.deliver_at_ms = m.delay_ms && *m.delay_ms > 0 ? now + *m.delay_ms : 0;
  rec.key = m.key;
  rec.value = m.value;
  rec.envelope_json = m.envelope_json;
  rec.idempotency_key = std::move(idempotency_key);
  rec.tenant_id = m.tenant_id;
  rec.key_ttl_ms = m.key_ttl_ms.value_or(-1);
  rec.max_attempts = m.retry.max_attempts.value_or(-1);
  rec.backoff_ms = m.retry.backoff_ms.value_or(-1);
  rec.max_backoff_ms = m.retry.max_backoff_ms.value_or(-1);
  return rec;
}

// The topic's backpressure caps: the whole produce is refused if storing it
// would pass either. Space comes back as consumers ack and retention runs.
result<void> check_backlog(const topic& t, std::uint64_t add_messages, std::uint64_t add_bytes) {
  const auto& s = t.rec.settings;
  auto refuse = [&](std::string what) {
    error e = make_error(errc::resource_exhausted,
                         fmt::format("topic '{}' is full: {}", t.rec.name, what));
    e.retry_after_ms = k_retention_period_ms;
    return e;
  };
  if (s.max_backlog_messages > 0 &&
      t.backlog() + add_messages > static_cast<std::uint64_t>(s.max_backlog_messages))
    return refuse(fmt::format("max_backlog_messages is {}", s.max_backlog_messages));
  if (s.max_backlog_bytes > 0) {
    std::uint64_t bytes = 0;
    for (const auto& p : t.parts) bytes += p.bytes;
    if (bytes + add_bytes > static_cast<std::uint64_t>(s.max_backlog_bytes))
      return refuse(fmt::format("max_backlog_bytes is {}", s.max_backlog_bytes));
  }
  return {};
}

}  // namespace

result<produce_reply> broker::produce(const produce_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  auto* tp = c.topics.find(cmd.topic);
  if (tp == nullptr) return invalid(fmt::format("unknown topic '{}'", cmd.topic));
  if (cmd.messages.empty() || cmd.messages.size() > c.opts.max_batch)
    return invalid(fmt::format("a produce carries 1..{} messages", c.opts.max_batch));
  ONCEQ_TRY(writable());
  txn tx;
  auto reply = stage_produce(c, *tp, cmd, c.time.now_ms(), tx);
  if (!reply.ok()) return reply;
  ONCEQ_TRY(tx.commit(c.store));
  return reply;
}

result<void> validate_produced_message(const message_in& m, std::string_view where, millis now,
                                       const broker_options& opts) {
  return validate_message(
      m, [where] { return std::string(where); }, k_max_partitions, now, opts);
}

result<produce_reply> stage_produce(core& c, topic& t, const produce_cmd& cmd, millis now,
                                    txn& tx) {
  auto* tp = &t;
  for (std::size_t i = 0; i < cmd.messages.size(); ++i) {
    const message_where at{cmd.messages.size(), i};
    ONCEQ_TRY(validate_message(
        cmd.messages[i], [&at] { return at.prefix(); }, t.parts.size(), now, c.opts));
  }
  const auto& s = t.rec.settings;
  if (cmd.skip_if_committed.size() > k_max_skip_groups)
    return invalid(fmt::format("skip_if_committed holds at most {} groups", k_max_skip_groups));
  for (std::size_t i = 0; i < cmd.skip_if_committed.size(); ++i) {
    ONCEQ_TRY(validate_label(fmt::format("skip_if_committed[{}]", i), cmd.skip_if_committed[i]));
    for (std::size_t j = 0; j < i; ++j)
      if (cmd.skip_if_committed[j] == cmd.skip_if_committed[i])
        return invalid(
            fmt::format("skip_if_committed names group '{}' twice", cmd.skip_if_committed[i]));
  }
  // Each message's key (explicit or derived) and, with dedup_by_content,
  // its content id.
  std::vector<std::string> keys(cmd.messages.size());
  std::vector<std::string> content_ids;
  for (std::size_t i = 0; i < cmd.messages.size(); ++i) {
    const message_where at{cmd.messages.size(), i};
    const auto& m = cmd.messages[i];
    // The name only where message_key can need it: a key derived from fields.
    const bool derived = m.idempotency_key.empty() && !s.idempotency_key_fields.empty();
    auto k = message_key(t.rec, m, c.inspector, derived ? at.name() : std::string());
    if (!k.ok()) return std::move(k).err();
    keys[i] = std::move(*k);
    if (!cmd.skip_if_committed.empty() && keys[i].empty() && !s.idempotency_key_optional)
      return invalid(fmt::format("{}: skip_if_committed needs an idempotency key", at.name()));
  }
  if (s.dedup_by_content) {
    if (c.inspector == nullptr)
      return make_error(errc::internal, "dedup_by_content needs a message inspector");
    content_ids.reserve(cmd.messages.size());
    for (const auto& m : cmd.messages) content_ids.push_back(content_id(*c.inspector, m));
  }
  produce_dedup dedup(cmd, t.rec.id, s.dedup_window_ms, content_ids);
  dedup.load(c.store);
  // Groups named by skip_if_committed that exist (a group that does not has
  // committed nothing).
  std::vector<std::pair<std::string, const group_state*>> skip;
  for (const auto& name : cmd.skip_if_committed) skip.emplace_back(name, t.find_group(name));
  produce_reply reply;
  reply.results.reserve(cmd.messages.size());
  std::vector<std::pair<produced, st::message_record>> fresh;
  fresh.reserve(cmd.messages.size());
  std::uint64_t dups = 0, already = 0, bytes = 0;
  auto note_produce = [&](std::size_t i, st::history_kind kind, produced at) {
    if (!s.key_history || keys[i].empty()) return;
    const auto& m = cmd.messages[i];
    const millis ttl = m.key_ttl_ms.value_or(s.key_ttl_ms);
    tx.record(st::keys::key_history(t.rec.id, 0, m.tenant_id, keys[i]), ttl == 0 ? 0 : now + ttl,
              history_event_at(kind, now, position{at.partition, at.offset}));
  };
  std::vector<std::uint64_t> part_bytes(t.parts.size());
  for (std::size_t i = 0; i < cmd.messages.size(); ++i) {
    const auto& m = cmd.messages[i];
    auto seen = dedup.earlier(i, now);
    if (!seen.ok()) return std::move(seen).err();
    if (*seen) {
      note_produce(i, st::history_kind::produce_duplicate, **seen);
      reply.results.push_back(**seen);
      ++dups;
      continue;
    }
    if (!skip.empty() && !keys[i].empty()) {
      std::map<std::string, committed_key> done;
      bool all = true;
      for (const auto& [name, g] : skip) {
        if (g == nullptr) {
          all = false;
          break;
        }
        auto k = key_table::live(c.store, st::keys::idem_key(t.rec.id, g->id, m.tenant_id, keys[i]),
                                 now);
        if (!k.ok() && k.code() != errc::not_found) return std::move(k).err();
        if (!k.ok() || k->state != st::key_state::committed) {
          all = false;
          break;
        }
        done.emplace(name, committed_key{k->result_json, k->committed_at_ms, k->owner});
      }
      if (all) {
        note_produce(i, st::history_kind::produce_committed, produced{0, 0, false});
        reply.already_committed.emplace(reply.results.size(), std::move(done));
        reply.results.push_back(produced{0, 0, false});
        ++already;
        continue;
      }
    }
    std::uint32_t p = 0;
    if (m.partition_override) {
      p = static_cast<std::uint32_t>(*m.partition_override);
    } else if (m.key && !m.key->empty()) {
      p = static_cast<std::uint32_t>(partition_hash(*m.key) % t.parts.size());
    }
    produced at{p, tx.append_offset(t.parts[p]), false};
    auto rec = to_record(m, keys[i], now);
    if (s.key_conflict == static_cast<std::uint8_t>(topic_settings::conflict::supersede) &&
        !keys[i].empty()) {
      // The newest message of the key: older ones still waiting are
      // superseded when a group reaches them (broker/delivery.cpp).
      const millis exp = s.retention_ms > 0 ? now + s.retention_ms : 0;
      tx.batch().put(column::keys, st::keys::key_latest(t.rec.id, m.tenant_id, keys[i]),
                     st::encode(st::latest_record{exp, p, at.offset}));
    }
    bytes += backlog_bytes(rec);
    part_bytes[p] += backlog_bytes(rec);
    tx.batch().put(column::messages, st::keys::message(t.rec.id, p, at.offset), st::encode(rec));
    dedup.remember(i, at, now, tx);
    fresh.emplace_back(at, std::move(rec));
    reply.results.push_back(at);
  }
  // Messages this txn staged into t before (an earlier entry of an outbox
  // append, an earlier ack of a batch) count against the cap too.
  std::uint64_t staged = 0;
  for (const auto& p : t.parts) staged += tx.peek_offset(p) - p.next;
  ONCEQ_TRY(check_backlog(t, staged, bytes));
  const bool count_bytes = t.rec.settings.max_backlog_bytes > 0;
  tx.then([&c, tp, fresh = std::move(fresh), part_bytes = std::move(part_bytes), dups, already,
           count_bytes]() mutable {
    for (auto& [at, rec] : fresh)
      c.cache.append(tp->parts[at.partition], at.offset, std::move(rec));
    if (count_bytes)
      for (std::size_t p = 0; p < tp->parts.size(); ++p) tp->parts[p].bytes += part_bytes[p];
    tp->produced += fresh.size();
    tp->produce_duplicates += dups;
    tp->produce_already_committed += already;
    if (!fresh.empty()) c.ready_topics.insert(tp->rec.name);
  });
  return reply;
}

result<std::int64_t> broker::redrive(const redrive_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  auto max = cmd.max_messages.value_or(std::numeric_limits<std::int64_t>::max());
  ONCEQ_TRY(validate_range("max_messages", max, 1, std::numeric_limits<std::int64_t>::max()));
  max = std::min<std::int64_t>(max, static_cast<std::int64_t>(c.opts.max_batch) * 100);
  auto* tp = c.topics.find(cmd.topic);
  if (tp == nullptr) return topic_not_found(cmd.topic);
  auto& t = *tp;
  ONCEQ_TRY(writable());
  auto* dlq = c.topics.find(dlq_topic_of(cmd.topic));
  if (dlq == nullptr) return std::int64_t{0};
  const auto now = c.time.now_ms();
  txn tx;
  std::int64_t moved = 0;
  std::vector<std::uint64_t> part_bytes(t.parts.size());
  auto& dp = dlq->parts[0];
  std::uint64_t upto = dp.start;
  std::optional<error> bad;
  ONCEQ_TRY(c.store.scan(
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
        part_bytes[p] += backlog_bytes(*m);
        tx.batch().put(column::messages,
                       st::keys::message(t.rec.id, p, tx.append_offset(t.parts[p])),
                       st::encode(*m));
        upto = *off + 1;
        return ++moved < max;
      }));
  if (bad) return *bad;
  if (moved == 0) return std::int64_t{0};
  truncate(c, *dlq, 0, upto, now, tx);
  const bool count_bytes = t.rec.settings.max_backlog_bytes > 0;
  tx.then([&c, tp, moved, part_bytes = std::move(part_bytes), count_bytes] {
    if (count_bytes)
      for (std::size_t p = 0; p < tp->parts.size(); ++p) tp->parts[p].bytes += part_bytes[p];
    tp->produced += static_cast<std::uint64_t>(moved);
    c.ready_topics.insert(tp->rec.name);
  });
  ONCEQ_TRY(tx.commit(c.store));
  return moved;
}

}  // namespace onceq
