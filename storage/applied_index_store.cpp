#include "storage/applied_index_store.hpp"

#include "base/bytes.hpp"
#include "base/hash.hpp"
#include "storage/schema.hpp"

namespace onceq::storage {

namespace {

constexpr std::uint8_t k_applied_version = 1;

// Order-sensitive: the batch's operations in the order finish() made them.
std::uint64_t digest_of(const batch& b) {
  std::uint64_t h = hash_detail::k0;
  for (const auto& o : b.ops()) {
    const std::uint64_t kind =
        (static_cast<std::uint64_t>(o.k) << 8) | static_cast<std::uint64_t>(o.col);
    h = hash_detail::mix(h ^ hash_bytes(o.key) ^ kind, hash_bytes(o.value) ^ hash_detail::k2);
  }
  return h == 0 ? 1 : h;
}

}  // namespace

std::string encode_applied_position(const applied_position& p) {
  byte_writer w;
  w.byte(k_applied_version);
  w.varint(p.index);
  w.svarint(p.now_ms);
  return w.take();
}

result<applied_position> decode_applied_position(std::string_view value) {
  byte_reader r(value);
  std::uint8_t version = 0;
  applied_position p;
  if (!r.byte(version) || version != k_applied_version || !r.varint(p.index) ||
      !r.svarint(p.now_ms) || !r.at_end()) {
    return make_error(errc::internal, "corrupt record: the applied log position");
  }
  return p;
}

result<applied_position> applied_index_store::load() {
  auto v = inner_.get(column::meta, keys::applied());
  if (v.code() == errc::not_found) {
    applied_ = {};
    return applied_;
  }
  if (!v.ok()) return std::move(v).err();
  auto p = decode_applied_position(*v);
  if (p.ok()) applied_ = *p;
  return p;
}

void applied_index_store::begin(applied_position p) {
  current_ = p;
  wrote_ = false;
  for (auto& c : overlay_) {
    c.point.clear();
    c.ranges.clear();
  }
}

result<void> applied_index_store::finish() {
  const applied_position p = current_;
  current_ = {};
  digest_ = 0;
  if (!wrote_) return {};
  // The entry's writes in one batch: every range it deleted, then each key
  // it last put or deleted (a key the overlay still holds was written
  // after any range that covers it), then the position.
  batch out;
  for (int i = 0; i < k_column_count; ++i) {
    for (auto& [b, e] : overlay_[i].ranges) out.del_range(static_cast<column>(i), b, e);
  }
  for (int i = 0; i < k_column_count; ++i) {
    for (auto& [k, v] : overlay_[i].point) {
      if (v) {
        out.put(static_cast<column>(i), k, std::move(*v));
      } else {
        out.del(static_cast<column>(i), k);
      }
    }
  }
  begin({});
  out.put(column::meta, keys::applied(), encode_applied_position(p));
  if (keep_digests_) digest_ = digest_of(out);
  auto r = inner_.write(out);
  if (r.ok()) applied_ = p;
  return r;
}

result<void> applied_index_store::write(const batch& b) {
  if (current_.index == 0) {
    return make_error(errc::failed_precondition,
                      "a replica's state changes only by applying its log");
  }
  for (const auto& o : b.ops()) {
    auto& c = overlay_[static_cast<int>(o.col)];
    switch (o.k) {
      case batch::kind::put:
        c.point[o.key] = o.value;
        break;
      case batch::kind::del:
        c.point[o.key] = std::nullopt;
        break;
      case batch::kind::del_range:
        c.point.erase(c.point.lower_bound(o.key), c.point.lower_bound(o.value));
        c.ranges.emplace_back(o.key, o.value);
        break;
    }
  }
  wrote_ = wrote_ || !b.empty();
  return {};
}

bool applied_index_store::pending_column::in_ranges(std::string_view key) const {
  for (const auto& [b, e] : ranges) {
    if (key >= b && key < e) return true;
  }
  return false;
}

std::optional<std::optional<std::string>> applied_index_store::pending_value(
    column c, std::string_view key) const {
  const auto& col = overlay_[static_cast<int>(c)];
  if (auto it = col.point.find(key); it != col.point.end()) return it->second;
  if (col.in_ranges(key)) return std::optional<std::string>{};
  return std::nullopt;
}

result<std::string> applied_index_store::get(column c, std::string_view key) {
  if (auto v = pending_value(c, key)) {
    if (!*v) return make_error(errc::not_found, "deleted");
    return **v;
  }
  return inner_.get(c, key);
}

std::vector<result<std::string>> applied_index_store::multi_get(
    column c, const std::vector<std::string>& keys) {
  const auto& col = overlay_[static_cast<int>(c)];
  if (col.point.empty() && col.ranges.empty()) return inner_.multi_get(c, keys);
  std::vector<result<std::string>> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(get(c, k));
  return out;
}

result<void> applied_index_store::scan(column c, std::string_view begin, std::string_view end,
                                       const visitor& fn) {
  const auto& col = overlay_[static_cast<int>(c)];
  if (col.point.empty() && col.ranges.empty()) return inner_.scan(c, begin, end, fn);
  // The wrapped store's keys and the entry's own, merged in key order; the
  // entry's win, and what it deleted is skipped.
  auto it = col.point.lower_bound(begin);
  const auto stop = col.point.lower_bound(end);
  bool go = true;
  auto emit_pending_below = [&](std::string_view k) {
    for (; go && it != stop && it->first < k; ++it) {
      if (it->second) go = fn(it->first, *it->second);
    }
  };
  auto r = inner_.scan(c, begin, end, [&](std::string_view k, std::string_view v) {
    emit_pending_below(k);
    if (!go) return false;
    if (it != stop && it->first == k) {
      if (it->second) go = fn(k, *it->second);
      ++it;
      return go;
    }
    if (col.in_ranges(k)) return true;
    go = fn(k, v);
    return go;
  });
  if (!r.ok()) return r;
  for (; go && it != stop; ++it) {
    if (it->second) go = fn(it->first, *it->second);
  }
  return {};
}

result<std::string> applied_index_store::last_key(column c, std::string_view begin,
                                                  std::string_view end) {
  const auto& col = overlay_[static_cast<int>(c)];
  if (col.point.empty() && col.ranges.empty()) return inner_.last_key(c, begin, end);
  // The entry's last live key in range, and the wrapped store's last one
  // that the entry did not delete (stepping down past deleted keys).
  std::optional<std::string> mine;
  for (auto it = col.point.lower_bound(end); it != col.point.lower_bound(begin);) {
    --it;
    if (it->second) {
      mine = it->first;
      break;
    }
  }
  std::string below(end);
  std::optional<std::string> theirs;
  for (;;) {
    auto k = inner_.last_key(c, begin, below);
    if (!k.ok()) {
      if (k.code() != errc::not_found) return k;
      break;
    }
    if (!pending_value(c, *k)) {
      theirs = std::move(*k);
      break;
    }
    // Deleted (or replaced) by the entry: look below it, or below the start
    // of the range that deleted it.
    below = *k;
    for (const auto& [rb, re] : col.ranges) {
      if (below >= rb && below < re) below = std::max<std::string>(rb, std::string(begin));
    }
    if (below <= begin) break;
  }
  if (!mine && !theirs) return make_error(errc::not_found, "empty range");
  if (!theirs) return *mine;
  if (!mine) return *theirs;
  return std::max(*mine, *theirs);
}

}  // namespace onceq::storage
