#include "cluster/replica.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "base/bytes.hpp"
#include "base/log.hpp"
#include "storage/schema.hpp"

namespace onceq::cluster {

namespace {

constexpr std::uint8_t k_snapshot_version = 1;
// Past every key of every column (their first bytes are letters or topic
// ids below 2^31).
const std::string k_keys_end(64, '\xff');

// The topic an entry's command works on, "" when it is none or several.
std::string_view topic_of(const log_command& cmd) {
  return std::visit(
      [](const auto& c) -> std::string_view {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, ack_batch_cmd>) {
          // Acks that produce wake the consumers of every topic.
          for (const auto& a : c.acks)
            if (!a.produce.empty()) return {};
          return c.topic;
        } else if constexpr (std::is_same_v<T, ack_cmd>) {
          return c.produce.empty() ? std::string_view(c.ref.topic) : std::string_view();
        } else if constexpr (std::is_same_v<T, produce_cmd> || std::is_same_v<T, consume_cmd>) {
          return c.topic;
        } else if constexpr (std::is_same_v<T, create_topic_cmd> ||
                             std::is_same_v<T, delete_topic_cmd>) {
          return c.name;
        } else if constexpr (std::is_same_v<T, extend_cmd>) {
          return c.ref.topic;
        } else if constexpr (std::is_same_v<T, consume_after_acks_cmd>) {
          return c.consume.topic;
        } else {
          return {};  // tick; nack, redrive, replay, the outbox: several topics
        }
      },
      cmd);
}

[[noreturn]] void local_fault(std::string_view what, const error& e) {
  throw std::runtime_error(fmt::format("{}: {}", what, e.message));
}

}  // namespace

replica::replica(storage::store& store, const message_inspector* inspector, broker_options opts,
                 render_fn render)
    : store_(store),
      applied_(store),
      broker_(applied_, clock_, inspector, std::move(opts)),
      render_(std::move(render)) {}

result<void> replica::open() {
  auto at = applied_.load();
  if (!at.ok()) return std::move(at).err();
  // The clock first: recovery schedules what is due by it (ready now, or a
  // timer), as the replica that never stopped had it at that entry.
  resume_clock(clock_, applied_);
  if (auto r = broker_.recover(); !r.ok()) return r;
  publish_deadline();
  log(log_level::info, "cluster", "a replica's store opened",
      {log_number("applied_index", at->index)});
  return {};
}

void replica::publish_deadline() {
  const auto d = broker_.next_deadline();
  next_deadline_.store(d ? *d : -1, std::memory_order_relaxed);
}

std::string replica::apply(std::uint64_t index, std::string_view bytes) {
  auto e = decode_entry(bytes);
  if (!e.ok()) local_fault(fmt::format("log entry {}", index), e.err());
  last_.reset();
  auto r = apply_at(broker_, clock_, applied_, index, *e);
  if (r.ok() && !r->has_value()) {
    // Already in the store (raft replays after a restart): nobody waits for
    // this reply.
    if (skipped_from_ == 0) skipped_from_ = index;
    skipped_to_ = index;
    return {};
  }
  if (skipped_from_ != 0) {
    log(log_level::info, "cluster", "skipped the entries the store held",
        {log_number("from_index", skipped_from_), log_number("to_index", skipped_to_),
         log_number("next_index", index)});
    skipped_from_ = skipped_to_ = 0;
  }
  if (!r.ok() && (r.code() == errc::unavailable || r.code() == errc::internal)) {
    // The store refused the write, or a read failed: this replica cannot
    // go on; the command changed nothing here.
    local_fault(fmt::format("applying log entry {}", index), r.err());
  }
  if (trace_) trace_(index, tag_of(e->cmd), applied_.last_digest());
  result<log_reply> out =
      r.ok() ? result<log_reply>(std::move(**r)) : result<log_reply>(std::move(r).err());
  publish_deadline();
  if (applied_hook_) applied_hook_(tag_of(e->cmd), topic_of(e->cmd));
  if (render_) return render_(out);
  last_ = std::move(out);
  return {};
}

std::string replica::snapshot() {
  byte_writer w;
  w.byte(k_snapshot_version);
  const std::string position_key = storage::keys::applied();
  for (int c = 0; c < storage::k_column_count; ++c) {
    const auto col = static_cast<storage::column>(c);
    auto r = store_.scan(col, "", k_keys_end, [&](std::string_view k, std::string_view v) {
      if (col == storage::column::meta && k == position_key) return true;  // below
      w.byte(static_cast<std::uint8_t>(c + 1));
      w.str(k);
      w.str(v);
      return true;
    });
    if (!r.ok()) local_fault("snapshot", r.err());
  }
  // The position with the clock as it is now, after the snapshot's last
  // entry: the stored reading is the last entry that wrote's, and entries
  // after it that wrote nothing may have moved the clock on. A replica that
  // restores the snapshot does not apply them, and must not apply the next
  // entry at an earlier time than this one does (a new leader's stamps run
  // behind).
  storage::applied_position at = applied_.applied();
  at.now_ms = std::max(at.now_ms, clock_.now_ms());
  w.byte(static_cast<std::uint8_t>(static_cast<int>(storage::column::meta) + 1));
  w.str(position_key);
  w.str(storage::encode_applied_position(at));
  w.byte(0);
  return w.take();
}

void replica::restore(std::string_view snap) {
  byte_reader r(snap);
  std::uint8_t version = 0;
  if (!r.byte(version) || version != k_snapshot_version) {
    throw std::runtime_error("snapshot: an unknown format");
  }
  storage::batch b;
  for (int c = 0; c < storage::k_column_count; ++c) {
    b.del_range(static_cast<storage::column>(c), "", k_keys_end);
  }
  std::string position;
  for (;;) {
    std::uint8_t tag = 0;
    if (!r.byte(tag)) throw std::runtime_error("snapshot: truncated");
    if (tag == 0) break;
    if (tag > storage::k_column_count) throw std::runtime_error("snapshot: a bad column");
    std::string k, v;
    if (!r.str(k) || !r.str(v)) throw std::runtime_error("snapshot: truncated");
    const auto c = static_cast<storage::column>(tag - 1);
    if (c == storage::column::meta && k == storage::keys::applied()) position = v;
    b.put(c, std::move(k), std::move(v));
  }
  if (!r.at_end()) throw std::runtime_error("snapshot: bytes after its end");
  // A snapshot this store already holds (raft restoring its own at start,
  // before it replays the entries after it) changes nothing: the store is
  // at or past it, and apply_at skips what it holds.
  storage::applied_position incoming;
  if (!position.empty()) {
    auto p = storage::decode_applied_position(position);
    if (!p.ok()) local_fault("snapshot", p.err());
    incoming = *p;
  }
  if (incoming.index != 0 && incoming.index <= applied_.applied().index) {
    // Its clock still counts: the entries up to the snapshot that wrote
    // nothing are not applied here again.
    clock_.advance_to(incoming.now_ms);
    log(log_level::info, "cluster", "a snapshot this store holds: kept the store",
        {log_number("snapshot_index", incoming.index),
         log_number("store_index", applied_.applied().index)});
    return;
  }
  log(log_level::info, "cluster", "restoring a snapshot",
      {log_number("snapshot_index", incoming.index),
       log_number("store_index", applied_.applied().index), log_number("bytes", snap.size())});
  if (auto w = store_.write(b); !w.ok()) local_fault("restoring a snapshot", w.err());
  if (auto at = applied_.load(); !at.ok()) local_fault("restoring a snapshot", at.err());
  resume_clock(clock_, applied_);
  if (auto rec = broker_.recover(); !rec.ok()) local_fault("restoring a snapshot", rec.err());
  publish_deadline();
  ++restores_;
  if (applied_hook_) applied_hook_(log_tag::tick, {});
}

}  // namespace onceq::cluster
