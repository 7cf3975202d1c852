#include "broker/partition_log.hpp"

#include <algorithm>

namespace onceq {

namespace st = storage;

namespace {
std::size_t cached_size(const st::message_record& m) {
  return sizeof(m) + m.value.size() + m.envelope_json.size() + m.idempotency_key.size() +
         m.tenant_id.size() + (m.key ? m.key->size() : 0);
}
}  // namespace

result<st::message_record> partition_log::read(st::store& store, std::uint64_t off) const {
  if (off < start) return make_error(errc::not_found, "message deleted by retention");
  if (off >= tail_base && off - tail_base < tail.size()) return tail[off - tail_base];
  if (off >= ahead_base && off - ahead_base < ahead.size() && ahead[off - ahead_base])
    return *ahead[off - ahead_base];
  auto v = store.get(st::column::messages, st::keys::message(topic, index, off));
  if (!v.ok()) return std::move(v).err();
  return st::decode_message(*v);
}

result<void> partition_log::read_ahead(st::store& store, std::uint64_t from, message_count want) {
  if (from >= tail_base && from - tail_base < tail.size()) return {};  // cached
  if (from >= ahead_base && from - ahead_base < ahead.size()) return {};
  const std::uint64_t n = std::clamp<std::uint64_t>(want(), k_read_ahead_min, k_read_ahead_max);
  auto upto = std::min(next, from + n);
  if (tail_base > from) upto = std::min(upto, tail_base);
  if (upto <= from) return {};
  ahead_base = from;
  ahead.clear();
  ahead.resize(upto - from);
  std::size_t bytes = 0;
  std::uint64_t end = upto;  // one past the last offset the scan covered
  auto scanned = store.scan(st::column::messages, st::keys::message(topic, index, from),
                            st::keys::message(topic, index, upto),
                            [&](std::string_view k, std::string_view v) {
                              auto off = st::keys::parse_message_offset(k);
                              auto m = st::decode_message(v);
                              if (off.ok() && m.ok() && *off >= from && *off < upto)
                                ahead[*off - from] = std::move(*m);
                              bytes += v.size();
                              if (bytes < k_read_ahead_bytes || !off.ok()) return true;
                              end = std::min(upto, *off + 1);
                              return false;
                            });
  if (!scanned.ok()) {
    ahead.clear();  // read() falls back to point lookups
    if (scanned.code() == errc::would_block) {
      std::uint64_t soon = std::min(next, from + k_warm_ahead);
      if (tail_base > from) soon = std::min(soon, tail_base);
      if (soon > upto) {
        store.read_soon(st::column::messages, st::keys::message(topic, index, upto),
                        st::keys::message(topic, index, soon), k_read_ahead_bytes);
      }
      return scanned;
    }
  } else if (end < upto) {
    ahead.resize(end - from);  // the next consume reads on from end
  }
  return {};
}

result<std::uint64_t> partition_log::count_bytes(st::store& store, std::uint64_t from,
                                                 std::uint64_t upto) const {
  std::uint64_t n = 0;
  std::optional<error> bad;
  ONCEQ_TRY(store.scan(st::column::messages, st::keys::message(topic, index, from),
                       st::keys::message(topic, index, upto),
                       [&](std::string_view, std::string_view v) {
                         auto m = st::decode_message(v);
                         if (!m.ok()) {
                           bad = std::move(m).err();
                           return false;
                         }
                         n += backlog_bytes(*m);
                         return true;
                       }));
  if (bad) return *bad;
  return n;
}

std::uint64_t backlog_bytes(const st::message_record& m) {
  return m.value.size() + m.envelope_json.size();
}

void message_cache::append(partition_log& p, std::uint64_t off, st::message_record m) {
  if (budget_ == 0) return;
  if (p.tail_base + p.tail.size() != off) {
    drop(p);
    p.tail_base = off;
  }
  bytes_ += cached_size(m);
  p.tail.push_back(std::move(m));
  order_.push_back(entry{p.topic, p.index, off});
  while (bytes_ > budget_ && !order_.empty()) {
    auto e = order_.front();
    order_.pop_front();
    auto* victim = find_(e.topic, e.partition);
    if (victim == nullptr || victim->tail.empty() || victim->tail_base != e.offset) continue;
    bytes_ -= std::min(bytes_, cached_size(victim->tail.front()));
    victim->tail.pop_front();
    ++victim->tail_base;
  }
}

void message_cache::drop(partition_log& p) {
  for (const auto& m : p.tail) bytes_ -= std::min(bytes_, cached_size(m));
  p.tail.clear();
  p.tail_base = p.next;
}

void message_cache::clear() {
  order_.clear();
  bytes_ = 0;
}

}  // namespace onceq
