// broker::produce and broker::redrive: the commands that append to
// partition logs.

#include <fmt/format.h>

#include <limits>

#include "broker/broker.hpp"
#include "broker/core.hpp"
#include "broker/dedup.hpp"
#include "broker/retention.hpp"
#include "broker/validation.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

error invalid(std::string message) {
  return make_error(errc::invalid_argument, std::move(message));
}

result<void> validate_message(const message_in& m, std::size_t i, std::size_t n,
                              std::size_t partitions, millis now, const broker_options& opts) {
  constexpr auto k_max_ms = std::numeric_limits<std::int64_t>::max() / 4;
  auto where = [&](std::string_view field) {
    return n == 1 ? std::string(field) : fmt::format("messages[{}].{}", i, field);
  };
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

st::message_record to_record(const message_in& m, millis now) {
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
  auto& t = *tp;
  if (cmd.messages.empty() || cmd.messages.size() > c.opts.max_batch)
    return invalid(fmt::format("a produce carries 1..{} messages", c.opts.max_batch));
  ONCEQ_TRY(writable());
  const auto now = c.time.now_ms();
  for (std::size_t i = 0; i < cmd.messages.size(); ++i)
    ONCEQ_TRY(
        validate_message(cmd.messages[i], i, cmd.messages.size(), t.parts.size(), now, c.opts));

  produce_dedup dedup(cmd, t.rec.id, t.rec.settings.dedup_window_ms);
  dedup.load(c.store);
  txn tx;
  produce_reply reply;
  reply.results.reserve(cmd.messages.size());
  std::vector<std::pair<produced, st::message_record>> fresh;
  fresh.reserve(cmd.messages.size());
  std::uint64_t dups = 0, bytes = 0;
  std::vector<std::uint64_t> part_bytes(t.parts.size());
  for (std::size_t i = 0; i < cmd.messages.size(); ++i) {
    const auto& m = cmd.messages[i];
    auto seen = dedup.earlier(i, now);
    if (!seen.ok()) return std::move(seen).err();
    if (*seen) {
      reply.results.push_back(**seen);
      ++dups;
      continue;
    }
    std::uint32_t p = 0;
    if (m.partition_override) {
      p = static_cast<std::uint32_t>(*m.partition_override);
    } else if (m.key && !m.key->empty()) {
      p = static_cast<std::uint32_t>(partition_hash(*m.key) % t.parts.size());
    }
    produced at{p, tx.append_offset(t.parts[p]), false};
    auto rec = to_record(m, now);
    bytes += backlog_bytes(rec);
    part_bytes[p] += backlog_bytes(rec);
    tx.batch().put(column::messages, st::keys::message(t.rec.id, p, at.offset), st::encode(rec));
    dedup.remember(i, at, now, tx);
    fresh.emplace_back(at, std::move(rec));
    reply.results.push_back(at);
  }
  ONCEQ_TRY(check_backlog(t, fresh.size(), bytes));
  const bool count_bytes = t.rec.settings.max_backlog_bytes > 0;
  tx.then([&c, tp, fresh = std::move(fresh), part_bytes = std::move(part_bytes), dups,
           count_bytes]() mutable {
    for (auto& [at, rec] : fresh)
      c.cache.append(tp->parts[at.partition], at.offset, std::move(rec));
    if (count_bytes)
      for (std::size_t p = 0; p < tp->parts.size(); ++p) tp->parts[p].bytes += part_bytes[p];
    tp->produced += fresh.size();
    tp->produce_duplicates += dups;
    if (!fresh.empty()) c.ready_topics.insert(tp->rec.name);
  });
  ONCEQ_TRY(tx.commit(c.store));
  return reply;
}

result<std::int64_t> broker::redrive(const redrive_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  auto max = cmd.max_messages.value_or(std::numeric_limits<std::int64_t>::max());
  ONCEQ_TRY(validate_range("max_messages", max, 1, std::numeric_limits<std::int64_t>::max()));
  max = std::min<std::int64_t>(max, static_cast<std::int64_t>(c.opts.max_batch) * 100);
  auto* tp = c.topics.find(cmd.topic);
  if (tp == nullptr)
    return make_error(errc::not_found, fmt::format("topic '{}' not found", cmd.topic));
  auto& t = *tp;
  ONCEQ_TRY(writable());
  auto* dlq = c.topics.find(std::string(k_dlq_prefix) + cmd.topic);
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
