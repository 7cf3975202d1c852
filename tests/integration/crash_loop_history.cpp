#include "crash_loop_history.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace onceq::itest::crash_loop {

namespace {

// One delivery: the same owner, message and attempt. A retried ack of it is
// the same ack; another owner or attempt is another delivery.
using delivery_id = std::tuple<std::string, position, std::int64_t>;

std::string describe(const position& p) {
  return std::to_string(p.first) + "/" + std::to_string(p.second);
}

std::string describe(const delivery_record& d) {
  return "owner " + d.owner + " " + describe(d.pos) + " attempt " + std::to_string(d.attempts) +
         " (consume sent " + std::to_string(d.consume_sent_ms) + ", answered " +
         std::to_string(d.consume_answered_ms) + ", lease until " +
         std::to_string(d.lease_expires_at_ms) + (d.node.empty() ? "" : ", from " + d.node) + ")";
}

template <class T, class Key>
std::unordered_map<std::string, std::vector<const T*>> by_key(const std::vector<T>& v, Key key) {
  std::unordered_map<std::string, std::vector<const T*>> out;
  for (const auto& x : v) out[key(x)].push_back(&x);
  return out;
}

}  // namespace

void history::append(history&& other) {
  produces.insert(produces.end(), std::make_move_iterator(other.produces.begin()),
                  std::make_move_iterator(other.produces.end()));
  deliveries.insert(deliveries.end(), std::make_move_iterator(other.deliveries.begin()),
                    std::make_move_iterator(other.deliveries.end()));
  settles.insert(settles.end(), std::make_move_iterator(other.settles.begin()),
                 std::make_move_iterator(other.settles.end()));
}

std::vector<violation> check(const history& h, const final_key_states& final_keys) {
  std::vector<violation> out;

  // lost_key (with the key's successful acks, when it had any: an ack
  // answered and then lost, not one never sent)
  std::set<std::string> answered_keys;
  for (const auto& p : h.produces) answered_keys.insert(p.key);
  std::map<std::string, std::string> acked_ok;
  for (const auto& s : h.settles) {
    if (s.what != settle_record::kind::ack || s.result != settle_record::outcome::ok) continue;
    acked_ok[s.key] += " [" + s.owner + " " + describe(s.pos) + " attempt " +
                       std::to_string(s.attempts) + ", answered " + std::to_string(s.answered_ms) +
                       (s.node.empty() ? "" : " by " + s.node) + "]";
  }
  for (const auto& k : answered_keys) {
    auto it = final_keys.find(k);
    if (it == final_keys.end()) {
      out.push_back({"lost_key", "key " + k + " of an answered produce was not checked"});
    } else if (it->second != "committed") {
      auto a = acked_ok.find(k);
      out.push_back({"lost_key", "key " + k + " of an answered produce ended '" + it->second +
                                     "', not committed" +
                                     (a == acked_ok.end() ? "" : "; acked ok:" + a->second)});
    }
  }

  // id_moved
  std::map<std::string, std::set<position>> id_positions;
  for (const auto& p : h.produces) id_positions[p.dedup_id].insert(p.pos);
  for (const auto& d : h.deliveries) id_positions[d.dedup_id].insert(d.pos);
  for (const auto& [id, positions] : id_positions) {
    if (positions.size() > 1) {
      std::string where;
      for (const auto& p : positions) where += " " + describe(p);
      out.push_back({"id_moved", "dedup id " + id + " stored at" + where});
    }
  }

  // Per key: the successful acks and the earliest answer among them.
  auto settles = by_key(h.settles, [](const settle_record& s) { return s.key; });
  auto deliveries = by_key(h.deliveries, [](const delivery_record& d) { return d.key; });
  std::map<delivery_id, millis> released;  // earliest nack/ack that may have ended the lease
  for (const auto& s : h.settles) {
    if (s.result == settle_record::outcome::rejected) continue;
    delivery_id id{s.owner, s.pos, s.attempts};
    auto [it, inserted] = released.emplace(id, s.sent_ms);
    if (!inserted) it->second = std::min(it->second, s.sent_ms);
  }

  for (const auto& [key, list] : settles) {
    // double_ack
    std::set<delivery_id> acked;
    millis first_ack_answer = std::numeric_limits<millis>::max();
    std::string first_ack_node;
    for (const auto* s : list) {
      if (s->what != settle_record::kind::ack || s->result != settle_record::outcome::ok) continue;
      acked.emplace(s->owner, s->pos, s->attempts);
      if (s->answered_ms < first_ack_answer) first_ack_node = s->node;
      first_ack_answer = std::min(first_ack_answer, s->answered_ms);
    }
    if (acked.size() > 1) {
      std::string who;
      for (const auto& [owner, pos, attempts] : acked) {
        who += " [" + owner + " " + describe(pos) + " attempt " + std::to_string(attempts) + "]";
      }
      out.push_back({"double_ack", "key " + key + " acked by" + who});
    }
    // after_ack
    auto d = deliveries.find(key);
    if (d == deliveries.end()) continue;
    for (const auto* x : d->second) {
      if (x->consume_sent_ms > first_ack_answer) {
        out.push_back({"after_ack", "key " + key + " acked (answered " +
                                        std::to_string(first_ack_answer) +
                                        (first_ack_node.empty() ? "" : " by " + first_ack_node) +
                                        ") then delivered: " + describe(*x)});
      }
    }
  }

  auto end_of = [&](const delivery_record& d) {
    auto r = released.find(delivery_id{d.owner, d.pos, d.attempts});
    return r == released.end() ? d.lease_expires_at_ms : std::min(d.lease_expires_at_ms, r->second);
  };

  // ack_stole_key
  for (const auto& s : h.settles) {
    if (s.what != settle_record::kind::ack || s.result != settle_record::outcome::ok) continue;
    auto d = deliveries.find(s.key);
    if (d == deliveries.end()) continue;
    const delivery_id acked{s.owner, s.pos, s.attempts};
    for (const auto* x : d->second) {
      if (delivery_id{x->owner, x->pos, x->attempts} == acked) continue;
      if (s.sent_ms >= x->consume_answered_ms && s.answered_ms < end_of(*x)) {
        out.push_back({"ack_stole_key",
                       "key " + s.key + " committed by the ack of " + s.owner + " " +
                           describe(s.pos) + " attempt " + std::to_string(s.attempts) + " (sent " +
                           std::to_string(s.sent_ms) + ", answered " +
                           std::to_string(s.answered_ms) + ") while held by " + describe(*x)});
      }
    }
  }

  // lease_overlap
  for (const auto& [key, list] : deliveries) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      for (std::size_t j = i + 1; j < list.size(); ++j) {
        const auto& a = *list[i];
        const auto& b = *list[j];
        const delivery_id ia{a.owner, a.pos, a.attempts};
        const delivery_id ib{b.owner, b.pos, b.attempts};
        if (ia == ib) continue;
        const millis from = std::max(a.consume_answered_ms, b.consume_answered_ms);
        const millis to = std::min(end_of(a), end_of(b));
        if (from < to) {
          out.push_back({"lease_overlap", "key " + key + " leased twice for " +
                                              std::to_string(to - from) + " ms: " + describe(a) +
                                              " and " + describe(b)});
        }
      }
    }
  }
  return out;
}

figures count(const history& h, const final_key_states& final_keys) {
  figures f;
  std::set<std::string> ids;
  std::set<std::string> keys;
  std::map<std::string, std::set<std::string>> ids_of_key;
  for (const auto& p : h.produces) {
    ids.insert(p.dedup_id);
    keys.insert(p.key);
    ids_of_key[p.key].insert(p.dedup_id);
    if (p.duplicate) ++f.produce_duplicates;
  }
  f.produces_answered = ids.size();
  f.keys_answered = keys.size();
  f.deliveries = h.deliveries.size();
  for (const auto& d : h.deliveries) {
    if (d.attempts > 1) ++f.redeliveries;
    ids_of_key[d.key].insert(d.dedup_id);
  }
  for (const auto& s : h.settles) {
    using o = settle_record::outcome;
    if (s.what == settle_record::kind::ack) {
      if (s.result == o::ok) ++f.acks_ok;
      if (s.result == o::rejected) ++f.acks_rejected;
      if (s.result == o::unknown) ++f.acks_unknown;
    } else if (s.result == o::ok) {
      ++f.nacks_ok;
    }
  }
  for (const auto& [key, set] : ids_of_key) {
    auto it = final_keys.find(key);
    if (it != final_keys.end() && it->second == "committed")
      f.key_duplicates_suppressed += set.size() - 1;
  }
  return f;
}

namespace {

struct traced {
  unsigned tag = 0;
  std::string digest;
};

// index -> what the node applied there (the first time), and the indexes
// it applied twice with another digest.
std::map<std::uint64_t, traced> parse_trace(const apply_trace& t, std::vector<violation>& out,
                                            std::size_t& replays_differ, std::size_t listed) {
  std::map<std::uint64_t, traced> at;
  std::istringstream in(t.text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::uint64_t index = 0;
    traced e;
    std::string rest;
    if (!(fields >> index >> e.tag >> e.digest) || (fields >> rest) || e.digest.size() != 16) {
      continue;
    }
    auto [it, fresh] = at.emplace(index, e);
    if (fresh || it->second.digest == e.digest) continue;
    if (++replays_differ <= listed) {
      out.push_back({"replay_differs", t.node + " applied index " + std::to_string(index) +
                                           " (tag " + std::to_string(e.tag) + ") twice: wrote " +
                                           it->second.digest + ", then " + e.digest});
    }
  }
  return at;
}

}  // namespace

std::vector<violation> compare_apply_traces(const std::vector<apply_trace>& traces,
                                            std::size_t listed) {
  std::vector<violation> out;
  std::size_t replays_differ = 0;
  std::vector<std::map<std::uint64_t, traced>> parsed;
  for (const auto& t : traces) parsed.push_back(parse_trace(t, out, replays_differ, listed));
  if (replays_differ > listed && !out.empty()) {
    out.back().detail += " (" + std::to_string(replays_differ) + " replayed indexes differ in all)";
  }
  // Every index some node applied, with each node's digest of it.
  std::map<std::uint64_t, std::vector<std::pair<std::size_t, const traced*>>> by_index;
  for (std::size_t n = 0; n < parsed.size(); ++n) {
    for (const auto& [index, e] : parsed[n]) by_index[index].emplace_back(n, &e);
  }
  std::size_t parted = 0;
  for (const auto& [index, seen] : by_index) {
    bool differ = false;
    for (const auto& [n, e] : seen) differ = differ || e->digest != seen.front().second->digest;
    if (!differ) continue;
    if (++parted > listed) continue;
    std::string detail = "index " + std::to_string(index) + " (tag " +
                         std::to_string(seen.front().second->tag) + "):";
    for (const auto& [n, e] : seen) detail += " " + traces[n].node + " wrote " + e->digest;
    out.push_back({"replicas_parted", std::move(detail)});
  }
  if (parted > listed) {
    for (auto it = out.rbegin(); it != out.rend(); ++it) {
      if (it->rule != "replicas_parted") continue;
      it->detail += " (" + std::to_string(parted) + " indexes differ in all)";
      break;
    }
  }
  return out;
}

}  // namespace onceq::itest::crash_loop
