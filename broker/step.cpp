// Workflow steps: the messages an ack produces (stage_steps), and the
// outbox commands that carry the ones for other shards' topics
// (broker::outbox_append on the target, broker::outbox_done on the source).

#include "broker/step.hpp"

#include <fmt/format.h>

#include <map>

#include "broker/broker.hpp"
#include "broker/delivery.hpp"
#include "broker/errors.hpp"
#include "broker/limits.hpp"
#include "broker/log_entry.hpp"
#include "broker/produce.hpp"
#include "broker/validation.hpp"

namespace onceq {

namespace st = storage;
using st::column;

namespace {

// e with where it happened in front of its message.
error at(std::string_view where, error e) {
  e.message = fmt::format("{}: {}", where, e.message);
  return e;
}

}  // namespace

result<std::vector<step_produced>> stage_steps(core& c, const std::vector<step_message>& msgs,
                                               const step_source& from, millis now, txn& tx) {
  if (msgs.size() > k_max_step_messages)
    return invalid(fmt::format("an ack produces at most {} messages", k_max_step_messages));
  std::vector<step_produced> out(msgs.size());
  // Topics of this broker, by name (ordered: the same batch on every replica).
  std::map<std::string_view, std::vector<std::size_t>> local;
  std::vector<std::size_t> remote;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    const auto where = fmt::format("produce[{}]", i);
    if (auto r = validate_topic_name(m.topic); !r.ok()) return at(where, std::move(r).err());
    ONCEQ_TRY(validate_produced_message(m.message, where + ".", now, c.opts));
    out[i].topic = m.topic;
    if (c.topics.find(m.topic) != nullptr) {
      local[m.topic].push_back(i);
    } else {
      remote.push_back(i);
    }
  }
  for (const auto& [name, idx] : local) {
    auto* t = c.topics.find(name);
    produce_cmd pc;
    pc.topic = std::string(name);
    pc.messages.reserve(idx.size());
    for (auto i : idx) pc.messages.push_back(msgs[i].message);
    auto r = stage_produce(c, *t, pc, now, tx);
    if (!r.ok()) return at(fmt::format("produce to '{}'", name), std::move(r).err());
    for (std::size_t j = 0; j < idx.size(); ++j) {
      auto& p = out[idx[j]];
      p.partition = r->results[j].partition;
      p.offset = r->results[j].offset;
      p.duplicate = r->results[j].duplicate;
    }
  }
  std::uint64_t last = 0;
  for (auto i : remote) {
    const auto seq = tx.take(c.outbox_next);
    st::outbox_record rec;
    rec.topic = msgs[i].topic;
    rec.message = encode_message(msgs[i].message);
    rec.created_at_ms = now;
    rec.source_scope = from.scope;
    rec.source_partition = from.pos.partition;
    rec.source_offset = from.pos.offset;
    rec.index = static_cast<std::uint32_t>(i);
    tx.batch().put(column::meta, st::keys::outbox(seq), st::encode(rec));
    out[i].pending = true;
    out[i].outbox_seq = seq;
    last = seq;
    tx.then([&c, seq, now] { c.outbox.emplace(seq, now); });
  }
  // The next sequence, in the batch of the records that used the ones
  // before: a sequence is never handed out twice (targets drop repeats).
  if (last != 0) tx.batch().put(column::meta, st::keys::outbox_next(), st::encode_u64(last + 1));
  return out;
}

std::vector<st::produced_ref> produced_refs(const std::vector<step_produced>& p) {
  std::vector<st::produced_ref> out;
  out.reserve(p.size());
  for (const auto& x : p)
    out.push_back(st::produced_ref{x.topic, x.partition, x.offset, x.duplicate, x.pending,
                                   x.no_position, x.outbox_seq});
  return out;
}

std::vector<step_produced> step_produced_of(const std::vector<st::produced_ref>& p) {
  std::vector<step_produced> out;
  out.reserve(p.size());
  for (const auto& x : p)
    out.push_back(step_produced{x.topic,
                                x.partition,
                                x.offset,
                                x.duplicate,
                                x.pending,
                                x.no_position,
                                x.outbox_seq,
                                errc::ok,
                                {}});
  return out;
}

result<void> recover_outbox(core& c) {
  c.outbox.clear();
  c.outbox_next = 1;
  if (auto n = c.store.get(column::meta, st::keys::outbox_next()); n.ok()) {
    auto v = st::decode_u64(*n);
    if (!v.ok()) return std::move(v).err();
    c.outbox_next = *v;
  } else if (n.code() != errc::not_found) {
    return std::move(n).err();
  }
  std::optional<error> bad;
  const auto begin = st::keys::outbox_prefix();
  ONCEQ_TRY(c.store.scan(column::meta, begin, st::keys::prefix_end(begin),
                         [&](std::string_view k, std::string_view v) {
                           auto seq = st::keys::parse_outbox_seq(k);
                           auto rec = st::decode_outbox(v);
                           if (!seq.ok() || !rec.ok()) {
                             bad = !seq.ok() ? seq.err() : rec.err();
                             return false;
                           }
                           c.outbox.emplace(*seq, rec->created_at_ms);
                           c.outbox_next = std::max(c.outbox_next, *seq + 1);
                           return true;
                         }));
  if (bad) return *bad;
  return {};
}

result<std::vector<outbox_appended>> broker::outbox_append(const outbox_append_cmd& cmd) {
  auto& c = *c_;
  if (cmd.entries.empty() || cmd.entries.size() > c.opts.max_batch)
    return invalid(fmt::format("an outbox append carries 1..{} entries", c.opts.max_batch));
  for (std::size_t i = 1; i < cmd.entries.size(); ++i)
    if (cmd.entries[i].seq <= cmd.entries[i - 1].seq)
      return invalid("outbox entries must come in increasing sequence");
  ONCEQ_TRY(writable());
  const auto now = c.time.now_ms();
  const auto mark_key = st::keys::outbox_high_water(cmd.source);
  std::uint64_t high = 0;
  if (auto v = c.store.get(column::meta, mark_key); v.ok()) {
    auto h = st::decode_u64(*v);
    if (!h.ok()) return std::move(h).err();
    high = *h;
  } else if (v.code() != errc::not_found) {
    return std::move(v).err();
  }
  const auto start = high;
  txn tx;
  std::vector<outbox_appended> out;
  out.reserve(cmd.entries.size());
  for (const auto& e : cmd.entries) {
    outbox_appended a;
    a.seq = e.seq;
    if (e.seq <= high) {  // taken before: never stored twice
      out.push_back(std::move(a));
      continue;
    }
    auto* t = c.topics.find(e.msg.topic);
    if (t == nullptr) {
      a.code = errc::not_found;
      a.message = fmt::format("topic '{}' not found", e.msg.topic);
      high = e.seq;
      out.push_back(std::move(a));
      continue;
    }
    const auto sp = tx.mark();
    produce_cmd pc;
    pc.topic = t->rec.name;
    pc.messages.push_back(e.msg.message);
    auto r = stage_produce(c, *t, pc, now, tx);
    if (!r.ok()) {
      tx.rollback(sp);
      a.code = r.code();
      a.message = r.err().message;
      if (r.code() == errc::resource_exhausted) {  // full: this one and the rest wait
        out.push_back(std::move(a));
        break;
      }
      if (r.code() != errc::invalid_argument && r.code() != errc::not_found &&
          r.code() != errc::failed_precondition)
        return std::move(r).err();  // a failed read: nothing is taken
      high = e.seq;                 // refused for good
      out.push_back(std::move(a));
      continue;
    }
    a.stored = true;
    a.duplicate = r->results[0].duplicate;
    a.partition = r->results[0].partition;
    a.offset = r->results[0].offset;
    high = e.seq;
    out.push_back(std::move(a));
  }
  if (high != start) tx.batch().put(column::meta, mark_key, st::encode_u64(high));
  ONCEQ_TRY(tx.commit(c.store));
  return out;
}

result<void> broker::outbox_done(const outbox_done_cmd& cmd) {
  auto& c = *c_;
  if (cmd.done.size() > c.opts.max_batch)
    return invalid(fmt::format("an outbox done carries at most {} entries", c.opts.max_batch));
  ONCEQ_TRY(writable());
  const auto now = c.time.now_ms();
  txn tx;
  // The committing keys' records, read once and written once.
  std::map<std::string, st::key_record> keys;
  for (const auto& d : cmd.done) {
    if (!c.outbox.contains(d.seq)) continue;  // done already
    auto v = c.store.get(column::meta, st::keys::outbox(d.seq));
    if (!v.ok()) {
      if (v.code() == errc::not_found) continue;
      return std::move(v).err();
    }
    auto rec = st::decode_outbox(*v);
    if (!rec.ok()) return std::move(rec).err();
    tx.batch().del(column::meta, st::keys::outbox(d.seq));
    tx.then([&c, seq = d.seq] { c.outbox.erase(seq); });
    if (rec->source_scope.empty() || d.code != errc::ok) continue;
    auto it = keys.find(rec->source_scope);
    if (it == keys.end()) {
      auto k = c.store.get(column::keys, rec->source_scope);
      if (!k.ok() && k.code() != errc::not_found) return std::move(k).err();
      if (!k.ok()) continue;  // expired: nothing to note
      auto kr = st::decode_key(*k);
      if (!kr.ok()) return std::move(kr).err();
      it = keys.emplace(rec->source_scope, std::move(*kr)).first;
    }
    auto& kr = it->second;
    if (kr.state != st::key_state::committed || rec->index >= kr.produced.size() ||
        kr.produced[rec->index].outbox_seq != d.seq)
      continue;  // committed again since (after its TTL): not this step's
    auto& p = kr.produced[rec->index];
    p.pending = false;
    p.duplicate = d.duplicate;
    p.no_position = !d.stored && !d.duplicate;
    p.partition = d.partition;
    p.offset = d.offset;
    if (p.no_position) continue;
    auto* t = c.topics.find(st::keys::topic_of(rec->source_scope));
    if (t == nullptr || !t->rec.settings.key_history) continue;
    auto ev = history_event_at(st::history_kind::produced, now, position{d.partition, d.offset});
    ev.reason = rec->topic;
    const millis expires = kr.expires_at_ms;
    tx.record(st::keys::history_of(rec->source_scope), expires, std::move(ev));
  }
  for (auto& [scope, kr] : keys) tx.batch().put(column::keys, scope, st::encode(kr));
  return tx.commit(c.store);
}

result<void> broker::check_produce(const produce_cmd& cmd) {
  auto& c = *c_;
  ONCEQ_TRY(validate_topic_name(cmd.topic));
  auto* t = c.topics.find(cmd.topic);
  if (t == nullptr)
    return make_error(errc::not_found, fmt::format("topic '{}' not found", cmd.topic));
  ONCEQ_TRY(writable());
  txn tx;  // dropped: nothing is written
  auto r = stage_produce(c, *t, cmd, c.time.now_ms(), tx);
  if (!r.ok()) return std::move(r).err();
  return {};
}

result<std::vector<outbox_entry>> broker::outbox_pending(std::size_t max) const {
  auto& c = *c_;
  std::vector<outbox_entry> out;
  for (const auto& [seq, created] : c.outbox) {
    if (out.size() >= max) break;
    auto v = c.store.get(column::meta, st::keys::outbox(seq));
    if (!v.ok()) {
      if (v.code() == errc::not_found) continue;
      return std::move(v).err();
    }
    auto rec = st::decode_outbox(*v);
    if (!rec.ok()) return std::move(rec).err();
    auto m = decode_message(rec->message);
    if (!m.ok()) return std::move(m).err();
    out.push_back(outbox_entry{seq, step_message{std::move(rec->topic), std::move(*m)}, created});
  }
  return out;
}

outbox_stats broker::outbox_metrics() const {
  const auto& c = *c_;
  outbox_stats s;
  s.depth = c.outbox.size();
  // Sequences are handed out in time order: the first is the oldest.
  if (!c.outbox.empty()) s.oldest_created_at_ms = c.outbox.begin()->second;
  return s;
}

}  // namespace onceq
