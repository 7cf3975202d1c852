#include "cluster/placement.hpp"

#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace onceq::cluster {

namespace {

using json = nlohmann::json;

error refused(std::string why) {
  return make_error(errc::failed_precondition, std::move(why));
}
error malformed(std::string why) {
  return make_error(errc::invalid_argument, "meta: " + std::move(why));
}

bool known(const meta_state& s, raft_id id) {
  return id >= 1 && id <= s.nodes.size();
}

bool contains(const std::vector<raft_id>& v, raft_id id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

// Every id known and none twice.
bool distinct_known(const meta_state& s, const std::vector<raft_id>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!known(s, v[i])) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (v[i] == v[j]) return false;
    }
  }
  return true;
}

bool same_set(std::vector<raft_id> a, std::vector<raft_id> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

std::string list(const std::vector<raft_id>& v) {
  return fmt::format("[{}]", fmt::join(v, ","));
}

std::string_view op_name(meta_command::kind k) noexcept {
  using K = meta_command::kind;
  switch (k) {
    case K::node:
      return "node";
    case K::place:
      return "place";
    case K::move:
      return "move";
    case K::move_step:
      return "move_step";
    case K::move_done:
      return "move_done";
    case K::move_cancel:
      return "move_cancel";
    case K::leader:
      return "leader";
    case K::order:
      return "order";
    case K::drain:
      return "drain";
    case K::rebalance:
      return "rebalance";
    case K::rebalanced:
      return "rebalanced";
    case K::grow:
      return "grow";
    case K::sync:
      return "sync";
  }
  return "?";
}

std::optional<meta_command::kind> op_from(std::string_view s) noexcept {
  for (int k = 0; k <= static_cast<int>(meta_command::kind::sync); ++k) {
    auto kind = static_cast<meta_command::kind>(k);
    if (op_name(kind) == s) return kind;
  }
  return std::nullopt;
}

std::optional<move_state> move_state_from(std::string_view s) noexcept {
  if (s == "adding") return move_state::adding;
  if (s == "removing") return move_state::removing;
  return std::nullopt;
}

bool valid(node_state st) noexcept {
  return static_cast<std::uint8_t>(st) <= 3;
}

// ---- apply_command's checks: each returns the refusal, or nothing ----

result<void> check_shard(const meta_state& s, const meta_command& c) {
  if (c.shard >= s.shards.size()) {
    return refused(fmt::format("{}: unknown shard {} (the state has {})", op_name(c.op), c.shard,
                               s.shards.size()));
  }
  if (!s.placed) return refused(fmt::format("{}: nothing is placed yet", op_name(c.op)));
  return {};
}

// The running move of c.shard at c.version.
result<void> check_running(const meta_state& s, const meta_command& c) {
  ONCEQ_TRY(check_shard(s, c));
  const shard_entry& e = s.shards[c.shard];
  if (!e.moving) {
    return refused(fmt::format("{}: shard {} has no move running", op_name(c.op), c.shard));
  }
  if (c.version != e.version) {
    return refused(fmt::format("{}: shard {} is at version {}, not {}", op_name(c.op), c.shard,
                               e.version, c.version));
  }
  return {};
}

result<void> check(const meta_state& s, const meta_command& c) {
  using K = meta_command::kind;
  switch (c.op) {
    case K::node:
      if (!known(s, c.node)) return refused(fmt::format("node: unknown node {}", c.node));
      if (!valid(c.state)) return refused("node: unknown node state");
      if (c.state == node_state::drained && s.load(c.node) != 0) {
        return refused(fmt::format("node: node {} cannot be drained: it holds {} replicas", c.node,
                                   s.load(c.node)));
      }
      return {};
    case K::place:
      if (s.placed) return refused("place: already placed");
      if (c.placement.size() != s.shards.size()) {
        return refused(fmt::format("place: {} replica lists for {} shards", c.placement.size(),
                                   s.shards.size()));
      }
      for (std::size_t g = 0; g < c.placement.size(); ++g) {
        if (c.placement[g].empty())
          return refused(fmt::format("place: shard {} has no replica", g));
        if (!distinct_known(s, c.placement[g])) {
          return refused(fmt::format("place: shard {}: {} has an unknown node or one twice", g,
                                     list(c.placement[g])));
        }
      }
      return {};
    case K::move: {
      ONCEQ_TRY(check_shard(s, c));
      const shard_entry& e = s.shards[c.shard];
      if (e.moving) return refused(fmt::format("move: shard {} has a move running", c.shard));
      if (c.version != e.version) {
        return refused(
            fmt::format("move: shard {} is at version {}, not {}", c.shard, e.version, c.version));
      }
      if (c.from != 0 && !contains(e.replicas, c.from)) {
        return refused(fmt::format("move: node {} is not a replica of shard {}", c.from, c.shard));
      }
      if (c.to == 0 || !known(s, c.to)) {
        return refused(fmt::format("move: unknown target node {}", c.to));
      }
      if (contains(e.replicas, c.to)) {
        return refused(
            fmt::format("move: node {} is already a replica of shard {}", c.to, c.shard));
      }
      return {};
    }
    case K::move_step: {
      ONCEQ_TRY(check_running(s, c));
      const shard_move& m = *s.shards[c.shard].moving;
      if (c.step != move_state::removing || m.state != move_state::adding) {
        return refused(
            fmt::format("move_step: shard {}: a move goes from adding to removing only", c.shard));
      }
      return {};
    }
    case K::move_done: {
      ONCEQ_TRY(check_running(s, c));
      const shard_entry& e = s.shards[c.shard];
      const shard_move& m = *e.moving;
      if (m.from != 0 && m.state != move_state::removing) {
        return refused(
            fmt::format("move_done: shard {}: the move has not reached removing", c.shard));
      }
      std::vector<raft_id> want;
      for (raft_id r : e.replicas) {
        if (r != m.from) want.push_back(r);
      }
      want.push_back(m.to);
      if (!distinct_known(s, c.replicas) || !same_set(c.replicas, want)) {
        return refused(fmt::format("move_done: shard {}: replicas {} are not {}", c.shard,
                                   list(c.replicas), list(want)));
      }
      return {};
    }
    case K::move_cancel:
      ONCEQ_TRY(check_running(s, c));
      if (s.shards[c.shard].moving->state != move_state::adding) {
        return refused(fmt::format("move_cancel: shard {}: the move is removing already", c.shard));
      }
      return {};
    case K::leader: {
      if (c.shard >= s.shards.size()) {
        return refused(fmt::format("leader: unknown shard {}", c.shard));
      }
      if (!known(s, c.node)) return refused(fmt::format("leader: unknown node {}", c.node));
      const shard_entry& e = s.shards[c.shard];
      if (c.term < e.leader_term) {
        return refused(fmt::format("leader: shard {}: term {} is older than {}", c.shard, c.term,
                                   e.leader_term));
      }
      return {};
    }
    case K::order: {
      ONCEQ_TRY(check_shard(s, c));
      const shard_entry& e = s.shards[c.shard];
      if (!distinct_known(s, c.replicas) || !same_set(c.replicas, e.replicas)) {
        return refused(fmt::format("order: shard {}: {} is not a permutation of {}", c.shard,
                                   list(c.replicas), list(e.replicas)));
      }
      return {};
    }
    case K::drain:
      if (!known(s, c.node)) return refused(fmt::format("drain: unknown node {}", c.node));
      if (s.nodes[c.node - 1].state == node_state::drained) {
        return refused(fmt::format("drain: node {} is already drained", c.node));
      }
      return {};
    case K::rebalance:
    case K::rebalanced:
      return {};
    case K::grow:
      if (c.node <= s.nodes.size() || c.node > k_max_nodes) {
        return refused(fmt::format("grow: to {} nodes, from {} (at most {})", c.node,
                                   s.nodes.size(), k_max_nodes));
      }
      return {};
    case K::sync:
      if (!known(s, c.node)) return refused(fmt::format("sync: unknown node {}", c.node));
      if (c.nonce == 0) return refused("sync: the nonce must not be 0");
      return {};
  }
  return refused("unknown meta command");
}

// ---- plan's helpers ----

std::uint64_t since(std::uint64_t now, std::uint64_t then) {
  return now >= then ? now - then : 0;
}

bool is(const meta_state& s, raft_id id, node_state st) {
  return s.nodes[id - 1].state == st;
}

std::vector<raft_id> active_nodes(const meta_state& s) {
  std::vector<raft_id> out;
  for (raft_id id = 1; id <= s.nodes.size(); ++id) {
    if (is(s, id, node_state::active)) out.push_back(id);
  }
  return out;
}

bool is_target(const meta_state& s, raft_id id) {
  return std::any_of(s.shards.begin(), s.shards.end(),
                     [&](const shard_entry& e) { return e.moving && e.moving->to == id; });
}

std::size_t moves_from(const meta_state& s, raft_id id) {
  return static_cast<std::size_t>(
      std::count_if(s.shards.begin(), s.shards.end(),
                    [&](const shard_entry& e) { return e.moving && e.moving->from == id; }));
}

// What id will hold once the running moves finish.
std::size_t projected_load(const meta_state& s, raft_id id) {
  return s.load(id) - moves_from(s, id);
}

// The least loaded active node that does not hold shard g and is not the
// target of a running move; lowest raft id on ties; 0 when there is none.
raft_id pick_target(const meta_state& s, std::size_t g) {
  raft_id best = 0;
  std::size_t best_load = std::numeric_limits<std::size_t>::max();
  for (raft_id id : active_nodes(s)) {
    if (contains(s.shards[g].replicas, id) || is_target(s, id)) continue;
    std::size_t l = s.load(id);
    if (l < best_load) best = id, best_load = l;
  }
  return best;
}

// The shortest chain of `order`s that moves one preferred leadership from
// `from` to an active node leading at least two fewer shards, intermediate
// nodes keeping their count: (shard, its new first replica) per step; empty
// when there is none. Breadth first, shards and nodes in ascending order,
// a shard's replicas by fewest leaderships first, so that it is
// deterministic. Shards with a move running are left alone.
std::vector<std::pair<std::size_t, raft_id>> lead_chain(const meta_state& s, raft_id from) {
  const std::size_t n = s.nodes.size();
  const std::size_t most = s.leads(from);
  std::vector<std::size_t> leads(n + 1, 0);
  for (raft_id id = 1; id <= n; ++id) leads[id] = s.leads(id);
  // how each node was reached: (shard, previous node)
  std::vector<std::pair<std::size_t, raft_id>> via(n + 1, {0, 0});
  std::vector<bool> seen(n + 1, false);
  std::vector<raft_id> queue{from};
  seen[from] = true;
  for (std::size_t qi = 0; qi < queue.size(); ++qi) {
    const raft_id at = queue[qi];
    for (std::size_t g = 0; g < s.shards.size(); ++g) {
      const shard_entry& e = s.shards[g];
      if (e.moving || e.replicas.empty() || e.replicas.front() != at) continue;
      std::vector<raft_id> next;
      for (raft_id r : e.replicas) {
        if (!seen[r] && is(s, r, node_state::active)) next.push_back(r);
      }
      std::stable_sort(next.begin(), next.end(), [&](raft_id a, raft_id b) {
        return std::tie(leads[a], a) < std::tie(leads[b], b);
      });
      for (raft_id r : next) {
        seen[r] = true;
        via[r] = {g, at};
        if (leads[r] + 2 <= most) {
          std::vector<std::pair<std::size_t, raft_id>> chain;
          for (raft_id x = r; x != from; x = via[x].second) chain.emplace_back(via[x].first, x);
          std::reverse(chain.begin(), chain.end());
          return chain;
        }
        queue.push_back(r);
      }
    }
  }
  return {};
}

// The planner's working copy: every command it emits is applied to it
// first, so that later rules see the earlier ones' effect and the list is
// accepted when applied in order.
struct planner {
  meta_state w;
  std::vector<meta_command> out;

  bool stuck = false;  // a rule proposed what apply_command refuses (a bug)

  // A command the replicas would refuse is never proposed; plan() stops
  // there rather than loop on a state that does not change.
  void emit(meta_command c) {
    result<void> r = apply_command(w, c);
    assert(r.ok());
    if (!r.ok()) {
      stuck = true;
      return;
    }
    out.push_back(std::move(c));
  }

  void node(raft_id id, node_state st, std::uint64_t now) {
    meta_command c;
    c.op = meta_command::kind::node;
    c.node = id;
    c.state = st;
    c.at_ms = now;
    emit(std::move(c));
  }

  void move(std::size_t g, raft_id from, raft_id to, std::uint64_t now, std::string reason) {
    meta_command c;
    c.op = meta_command::kind::move;
    c.shard = static_cast<std::uint32_t>(g);
    c.version = w.shards[g].version;
    c.from = from;
    c.to = to;
    c.at_ms = now;
    c.reason = std::move(reason);
    emit(std::move(c));
  }

  void order(std::size_t g, raft_id first) {
    meta_command c;
    c.op = meta_command::kind::order;
    c.shard = static_cast<std::uint32_t>(g);
    c.version = w.shards[g].version;
    c.replicas.push_back(first);
    for (raft_id r : w.shards[g].replicas) {
      if (r != first) c.replicas.push_back(r);
    }
    emit(std::move(c));
  }
};

// Rule 2's placement: shard by shard, the preferred leader is the active
// node with the fewest preferred leaderships (then the fewest replicas,
// then the lowest id) and the other copies go to the least loaded nodes
// (lowest id on ties). Both counts stay within one of each other (checked
// exhaustively for up to 7 nodes, 80 shards, any replica count).
std::vector<std::vector<raft_id>> spread(const std::vector<raft_id>& nodes, std::size_t shards,
                                         std::size_t copies) {
  const std::size_t k = nodes.size();
  std::vector<std::size_t> leads(k, 0), load(k, 0);
  std::vector<std::vector<raft_id>> out(shards);
  std::vector<std::size_t> idx(k);
  for (std::size_t g = 0; g < shards; ++g) {
    for (std::size_t i = 0; i < k; ++i) idx[i] = i;
    std::size_t lead = *std::min_element(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      return std::tie(leads[a], load[a], a) < std::tie(leads[b], load[b], b);
    });
    std::vector<std::size_t> rest;
    for (std::size_t i = 0; i < k; ++i) {
      if (i != lead) rest.push_back(i);
    }
    std::sort(rest.begin(), rest.end(), [&](std::size_t a, std::size_t b) {
      return std::tie(load[a], a) < std::tie(load[b], b);
    });
    rest.resize(copies - 1);
    ++leads[lead];
    ++load[lead];
    out[g].push_back(nodes[lead]);
    for (std::size_t i : rest) {
      ++load[i];
      out[g].push_back(nodes[i]);
    }
  }
  return out;
}

// ---- JSON ----

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Field access that refuses instead of throwing.
class fields {
 public:
  fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  result<void> only(std::initializer_list<std::string_view> keys) const {
    for (const auto& [k, v] : j_.items()) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        return malformed(fmt::format("{}: unknown field \"{}\"", where_, k));
      }
    }
    return {};
  }

  result<const json*> get(std::string_view key) const {
    auto it = j_.find(std::string(key));
    if (it == j_.end()) return malformed(fmt::format("{}: needs \"{}\"", where_, key));
    return &*it;
  }

  result<std::uint64_t> u64(std::string_view key,
                            std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const {
    auto v = get(key);
    if (!v.ok()) return std::move(v).err();
    return as_u64(**v, key, max);
  }

  result<bool> boolean(std::string_view key) const {
    auto v = get(key);
    if (!v.ok()) return std::move(v).err();
    if (!(*v)->is_boolean())
      return malformed(fmt::format("{}: {}: expected true or false", where_, key));
    return (*v)->get<bool>();
  }

  result<std::string> string(std::string_view key) const {
    auto v = get(key);
    if (!v.ok()) return std::move(v).err();
    if (!(*v)->is_string()) return malformed(fmt::format("{}: {}: expected a string", where_, key));
    return (*v)->get<std::string>();
  }

  result<std::vector<raft_id>> ids(std::string_view key) const {
    auto v = get(key);
    if (!v.ok()) return std::move(v).err();
    return as_ids(**v, key);
  }

  result<std::uint64_t> as_u64(const json& v, std::string_view key, std::uint64_t max) const {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > max) {
      return malformed(fmt::format("{}: {}: expected an integer from 0 to {}", where_, key, max));
    }
    return v.get<std::uint64_t>();
  }

  result<std::vector<raft_id>> as_ids(const json& v, std::string_view key) const {
    if (!v.is_array())
      return malformed(fmt::format("{}: {}: expected a list of raft ids", where_, key));
    std::vector<raft_id> out;
    for (const json& e : v) {
      if (!e.is_number_unsigned()) {
        return malformed(fmt::format("{}: {}: expected a list of raft ids", where_, key));
      }
      out.push_back(e.get<raft_id>());
    }
    return out;
  }

 private:
  const json& j_;
  std::string where_;
};

#define ONCEQ_FIELD(var, expr)                          \
  auto var##_r_ = (expr);                               \
  if (!var##_r_.ok()) return std::move(var##_r_).err(); \
  auto var = std::move(*var##_r_)

result<json> parse(std::string_view text, std::string_view what) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return malformed(fmt::format("{}: not JSON", what));
  if (!j.is_object()) return malformed(fmt::format("{}: expected a JSON object", what));
  return j;
}

result<meta_command> command_from(const json& j) {
  using K = meta_command::kind;
  fields f(j, "command");
  ONCEQ_FIELD(op, f.string("op"));
  auto kind = op_from(op);
  if (!kind) return malformed(fmt::format("command: unknown op \"{}\"", op));
  fields g(j, fmt::format("command {}", op));
  meta_command c;
  c.op = *kind;
  switch (c.op) {
    case K::node: {
      ONCEQ_TRY(g.only({"op", "node", "state", "at_ms"}));
      ONCEQ_FIELD(node, g.u64("node"));
      ONCEQ_FIELD(state, g.string("state"));
      ONCEQ_FIELD(at, g.u64("at_ms"));
      auto st = node_state_from(state);
      if (!st) return malformed(fmt::format("command node: unknown state \"{}\"", state));
      c.node = node;
      c.state = *st;
      c.at_ms = at;
      break;
    }
    case K::place: {
      ONCEQ_TRY(g.only({"op", "placement"}));
      ONCEQ_FIELD(p, g.get("placement"));
      if (!p->is_array()) return malformed("command place: placement: expected a list of lists");
      for (const json& l : *p) {
        ONCEQ_FIELD(ids, g.as_ids(l, "placement"));
        c.placement.push_back(std::move(ids));
      }
      break;
    }
    case K::move: {
      ONCEQ_TRY(g.only({"op", "shard", "version", "from", "to", "at_ms", "reason"}));
      ONCEQ_FIELD(shard, g.u64("shard", std::numeric_limits<std::uint32_t>::max()));
      ONCEQ_FIELD(version, g.u64("version"));
      ONCEQ_FIELD(from, g.u64("from"));
      ONCEQ_FIELD(to, g.u64("to"));
      ONCEQ_FIELD(at, g.u64("at_ms"));
      ONCEQ_FIELD(reason, g.string("reason"));
      c.shard = static_cast<std::uint32_t>(shard);
      c.version = version;
      c.from = from;
      c.to = to;
      c.at_ms = at;
      c.reason = std::move(reason);
      break;
    }
    case K::move_step: {
      ONCEQ_TRY(g.only({"op", "shard", "version", "step"}));
      ONCEQ_FIELD(shard, g.u64("shard", std::numeric_limits<std::uint32_t>::max()));
      ONCEQ_FIELD(version, g.u64("version"));
      ONCEQ_FIELD(step, g.string("step"));
      auto st = move_state_from(step);
      if (!st) return malformed(fmt::format("command move_step: unknown step \"{}\"", step));
      c.shard = static_cast<std::uint32_t>(shard);
      c.version = version;
      c.step = *st;
      break;
    }
    case K::move_done:
    case K::order: {
      ONCEQ_TRY(g.only({"op", "shard", "version", "replicas", "at_ms"}));
      ONCEQ_FIELD(shard, g.u64("shard", std::numeric_limits<std::uint32_t>::max()));
      ONCEQ_FIELD(version, g.u64("version"));
      ONCEQ_FIELD(replicas, g.ids("replicas"));
      c.shard = static_cast<std::uint32_t>(shard);
      c.version = version;
      c.replicas = std::move(replicas);
      if (c.op == K::move_done && j.contains("at_ms")) {  // optional: when it finished
        ONCEQ_FIELD(at, g.u64("at_ms"));
        c.at_ms = at;
      } else if (j.contains("at_ms")) {
        return malformed("command order: at_ms: unknown field");
      }
      break;
    }
    case K::move_cancel: {
      ONCEQ_TRY(g.only({"op", "shard", "version", "reason"}));
      ONCEQ_FIELD(shard, g.u64("shard", std::numeric_limits<std::uint32_t>::max()));
      ONCEQ_FIELD(version, g.u64("version"));
      ONCEQ_FIELD(reason, g.string("reason"));
      c.shard = static_cast<std::uint32_t>(shard);
      c.version = version;
      c.reason = std::move(reason);
      break;
    }
    case K::leader: {
      ONCEQ_TRY(g.only({"op", "shard", "node", "term"}));
      ONCEQ_FIELD(shard, g.u64("shard", std::numeric_limits<std::uint32_t>::max()));
      ONCEQ_FIELD(node, g.u64("node"));
      ONCEQ_FIELD(term, g.u64("term"));
      c.shard = static_cast<std::uint32_t>(shard);
      c.node = node;
      c.term = term;
      break;
    }
    case K::drain: {
      ONCEQ_TRY(g.only({"op", "node"}));
      ONCEQ_FIELD(node, g.u64("node"));
      c.node = node;
      break;
    }
    case K::rebalance:
    case K::rebalanced:
      ONCEQ_TRY(g.only({"op"}));
      break;
    case K::grow: {
      ONCEQ_TRY(g.only({"op", "nodes"}));
      ONCEQ_FIELD(nodes, g.u64("nodes", k_max_nodes));
      c.node = nodes;
      break;
    }
    case K::sync: {
      ONCEQ_TRY(g.only({"op", "node", "nonce"}));
      ONCEQ_FIELD(node, g.u64("node"));
      ONCEQ_FIELD(nonce, g.u64("nonce"));
      c.node = node;
      c.nonce = nonce;
      break;
    }
  }
  return c;
}

result<node_entry> node_from(const json& j, std::size_t i) {
  if (!j.is_object()) return malformed(fmt::format("state: node {}: expected an object", i + 1));
  fields f(j, fmt::format("state: node {}", i + 1));
  ONCEQ_TRY(f.only({"state", "seen", "drain_requested", "since_ms", "synced"}));
  ONCEQ_FIELD(state, f.string("state"));
  ONCEQ_FIELD(seen, f.boolean("seen"));
  ONCEQ_FIELD(drain, f.boolean("drain_requested"));
  ONCEQ_FIELD(since_ms, f.u64("since_ms"));
  auto st = node_state_from(state);
  if (!st) return malformed(fmt::format("state: node {}: unknown state \"{}\"", i + 1, state));
  node_entry n{*st, seen, drain, since_ms};
  if (j.contains("synced")) {  // absent from the snapshots of earlier builds
    ONCEQ_FIELD(synced, f.u64("synced"));
    n.synced = synced;
  }
  return n;
}

result<shard_entry> shard_from(const json& j, std::size_t g) {
  const std::string where = fmt::format("state: shard {}", g);
  if (!j.is_object()) return malformed(where + ": expected an object");
  fields f(j, where);
  ONCEQ_TRY(f.only({"replicas", "version", "moving", "leader", "leader_term"}));
  shard_entry e;
  ONCEQ_FIELD(replicas, f.ids("replicas"));
  ONCEQ_FIELD(version, f.u64("version"));
  ONCEQ_FIELD(moving, f.get("moving"));
  ONCEQ_FIELD(leader, f.u64("leader"));
  ONCEQ_FIELD(term, f.u64("leader_term"));
  e.replicas = std::move(replicas);
  e.version = version;
  e.leader = leader;
  e.leader_term = term;
  if (!moving->is_null()) {
    if (!moving->is_object()) return malformed(where + ": moving: expected an object or null");
    fields m(*moving, where + ": moving");
    ONCEQ_TRY(m.only({"from", "to", "state", "started_ms", "reason"}));
    ONCEQ_FIELD(from, m.u64("from"));
    ONCEQ_FIELD(to, m.u64("to"));
    ONCEQ_FIELD(state, m.string("state"));
    ONCEQ_FIELD(started, m.u64("started_ms"));
    ONCEQ_FIELD(reason, m.string("reason"));
    auto st = move_state_from(state);
    if (!st) return malformed(fmt::format("{}: moving: unknown state \"{}\"", where, state));
    e.moving = shard_move{from, to, *st, started, std::move(reason)};
  }
  return e;
}

result<meta_state> state_from(const json& j) {
  fields f(j, "state");
  ONCEQ_TRY(f.only({"nodes", "shards", "placed", "rebalance", "moves_started", "moves_finished",
                    "moves_cancelled", "move_ms_total", "last_move_ms"}));
  meta_state s;
  ONCEQ_FIELD(nodes, f.get("nodes"));
  ONCEQ_FIELD(shards, f.get("shards"));
  if (!nodes->is_array()) return malformed("state: nodes: expected a list");
  if (!shards->is_array()) return malformed("state: shards: expected a list");
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    ONCEQ_FIELD(n, node_from((*nodes)[i], i));
    s.nodes.push_back(n);
  }
  for (std::size_t g = 0; g < shards->size(); ++g) {
    ONCEQ_FIELD(e, shard_from((*shards)[g], g));
    s.shards.push_back(std::move(e));
  }
  ONCEQ_FIELD(placed, f.boolean("placed"));
  ONCEQ_FIELD(rebalance, f.boolean("rebalance"));
  ONCEQ_FIELD(started, f.u64("moves_started"));
  ONCEQ_FIELD(finished, f.u64("moves_finished"));
  ONCEQ_FIELD(cancelled, f.u64("moves_cancelled"));
  s.placed = placed;
  s.rebalance = rebalance;
  s.moves_started = started;
  s.moves_finished = finished;
  s.moves_cancelled = cancelled;
  if (j.contains("move_ms_total")) {
    ONCEQ_FIELD(total, f.u64("move_ms_total"));
    s.move_ms_total = total;
  }
  if (j.contains("last_move_ms")) {
    ONCEQ_FIELD(last, f.u64("last_move_ms"));
    s.last_move_ms = last;
  }

  // What apply_command keeps true: known, distinct replicas; a move only
  // between known nodes of a placed shard.
  for (std::size_t g = 0; g < s.shards.size(); ++g) {
    const shard_entry& e = s.shards[g];
    if (!distinct_known(s, e.replicas)) {
      return malformed(fmt::format("state: shard {}: replicas {} have an unknown node or one twice",
                                   g, list(e.replicas)));
    }
    if (!s.placed && (!e.replicas.empty() || e.moving)) {
      return malformed(fmt::format("state: shard {} has replicas but nothing is placed", g));
    }
    if (e.moving && (!known(s, e.moving->to) || contains(e.replicas, e.moving->to) ||
                     (e.moving->from != 0 && !contains(e.replicas, e.moving->from)))) {
      return malformed(fmt::format("state: shard {}: the move {} -> {} does not fit replicas {}", g,
                                   e.moving->from, e.moving->to, list(e.replicas)));
    }
  }
  return s;
}

#undef ONCEQ_FIELD

}  // namespace

std::string_view to_string(node_state s) noexcept {
  switch (s) {
    case node_state::active:
      return "active";
    case node_state::draining:
      return "draining";
    case node_state::drained:
      return "drained";
    case node_state::down:
      return "down";
  }
  return "?";
}

std::optional<node_state> node_state_from(std::string_view s) noexcept {
  if (s == "active") return node_state::active;
  if (s == "draining") return node_state::draining;
  if (s == "drained") return node_state::drained;
  if (s == "down") return node_state::down;
  return std::nullopt;
}

std::string_view to_string(move_state s) noexcept {
  switch (s) {
    case move_state::adding:
      return "adding";
    case move_state::removing:
      return "removing";
  }
  return "?";
}

meta_state meta_state::empty(std::size_t n, std::size_t shards) {
  meta_state s;
  s.nodes.resize(n);
  s.shards.resize(shards);
  return s;
}

std::size_t meta_state::load(raft_id id) const {
  std::size_t n = 0;
  for (const shard_entry& e : shards) {
    if (contains(e.replicas, id)) ++n;
    if (e.moving && e.moving->to == id) ++n;
  }
  return n;
}

std::size_t meta_state::leads(raft_id id) const {
  return static_cast<std::size_t>(std::count_if(shards.begin(), shards.end(), [&](const auto& e) {
    return !e.replicas.empty() && e.replicas.front() == id;
  }));
}

result<void> apply_command(meta_state& s, const meta_command& c) {
  ONCEQ_TRY(check(s, c));
  using K = meta_command::kind;
  switch (c.op) {
    case K::node: {
      node_entry& n = s.nodes[c.node - 1];
      n.state = c.state;
      if (n.drain_requested && n.state == node_state::active) n.state = node_state::draining;
      n.since_ms = c.at_ms;
      if (c.state != node_state::down) n.seen = true;
      break;
    }
    case K::place:
      for (std::size_t g = 0; g < s.shards.size(); ++g) {
        s.shards[g].replicas = c.placement[g];
        s.shards[g].version = 1;
        s.shards[g].moving.reset();
      }
      s.placed = true;
      break;
    case K::move:
      s.shards[c.shard].moving = shard_move{c.from, c.to, move_state::adding, c.at_ms, c.reason};
      ++s.moves_started;
      break;
    case K::move_step:
      s.shards[c.shard].moving->state = c.step;
      break;
    case K::move_done: {
      shard_entry& e = s.shards[c.shard];
      if (c.at_ms >= e.moving->started_ms && e.moving->started_ms != 0 && c.at_ms != 0) {
        s.last_move_ms = c.at_ms - e.moving->started_ms;
        s.move_ms_total += s.last_move_ms;
      }
      e.replicas = c.replicas;
      ++e.version;
      e.moving.reset();
      ++s.moves_finished;
      break;
    }
    case K::move_cancel:
      s.shards[c.shard].moving.reset();
      ++s.moves_cancelled;
      break;
    case K::leader:
      s.shards[c.shard].leader = c.node;
      s.shards[c.shard].leader_term = c.term;
      break;
    case K::order:
      s.shards[c.shard].replicas = c.replicas;
      break;
    case K::drain: {
      node_entry& n = s.nodes[c.node - 1];
      n.drain_requested = true;
      if (n.state == node_state::active) n.state = node_state::draining;
      break;
    }
    case K::rebalance:
      s.rebalance = true;
      break;
    case K::rebalanced:
      s.rebalance = false;
      break;
    case K::grow:
      s.nodes.resize(c.node);
      break;
    case K::sync:
      s.nodes[c.node - 1].synced = c.nonce;
      break;
  }
  return {};
}

std::vector<meta_command> plan(const meta_state& s, const liveness& live, std::uint64_t now_ms,
                               const placement_options& opts) {
  planner p{s, {}};
  meta_state& w = p.w;
  const std::size_t n = w.nodes.size();
  const std::size_t want = std::max<std::size_t>(1, std::min(opts.replicas, n));

  // 1. Node states.
  const bool listened = since(now_ms, live.leader_since_ms) >= opts.down_after_ms;
  for (raft_id id = 1; id <= n; ++id) {
    const node_entry& e = w.nodes[id - 1];
    const std::uint64_t heard_at = id <= live.last_heard_ms.size() ? live.last_heard_ms[id - 1] : 0;
    const bool heard = heard_at != 0 && since(now_ms, heard_at) < opts.down_after_ms;
    if (heard && (e.state == node_state::down || !e.seen)) {
      node_state to = node_state::active;
      if (e.drain_requested) to = w.load(id) == 0 ? node_state::drained : node_state::draining;
      p.node(id, to, now_ms);
    } else if (!heard && listened &&
               (e.state == node_state::active || e.state == node_state::draining)) {
      p.node(id, node_state::down, now_ms);
    }
  }

  // 2. The first placement.
  if (!w.placed && !w.shards.empty()) {
    const std::vector<raft_id> active = active_nodes(w);
    const bool none_down = std::none_of(w.nodes.begin(), w.nodes.end(), [](const node_entry& e) {
      return e.state == node_state::down;
    });
    const bool settled =
        active.size() >= want && since(now_ms, live.leader_since_ms) >= opts.settle_ms;
    if (!active.empty() && (none_down || settled)) {
      meta_command c;
      c.op = meta_command::kind::place;
      c.placement = spread(active, w.shards.size(), std::min(want, active.size()));
      p.emit(std::move(c));
    }
  }

  // 3. Drained.
  for (raft_id id = 1; id <= n; ++id) {
    if (is(w, id, node_state::draining) && w.load(id) == 0) {
      p.node(id, node_state::drained, now_ms);
    }
  }
  if (!s.placed) return std::move(p.out);

  // 4. Moves. A shard whose move is cancelled here gets its next one on the
  // next round, once the cancel is applied.
  std::vector<bool> touched(w.shards.size(), false);
  for (std::size_t g = 0; g < w.shards.size(); ++g) {
    const shard_entry& e = w.shards[g];
    if (e.moving && e.moving->state == move_state::adding &&
        !is(w, e.moving->to, node_state::active)) {
      meta_command c;
      c.op = meta_command::kind::move_cancel;
      c.shard = static_cast<std::uint32_t>(g);
      c.version = e.version;
      c.reason =
          fmt::format("node {} is {}", e.moving->to, to_string(w.nodes[e.moving->to - 1].state));
      p.emit(std::move(c));
      touched[g] = true;
    }
  }
  auto free = [&](std::size_t g) { return !touched[g] && !w.shards[g].moving; };

  if (opts.dead_after_ms != 0) {
    for (std::size_t g = 0; g < w.shards.size(); ++g) {
      if (!free(g)) continue;
      std::vector<raft_id> sorted = w.shards[g].replicas;
      std::sort(sorted.begin(), sorted.end());
      for (raft_id r : sorted) {
        const node_entry& ne = w.nodes[r - 1];
        if (ne.state != node_state::down || since(now_ms, ne.since_ms) < opts.dead_after_ms)
          continue;
        if (raft_id to = pick_target(w, g); to != 0) p.move(g, r, to, now_ms, "dead");
        break;
      }
    }
  }

  const std::size_t copies = std::min(want, active_nodes(w).size());
  for (std::size_t g = 0; g < w.shards.size(); ++g) {
    if (!free(g) || w.shards[g].replicas.size() >= copies) continue;
    if (raft_id to = pick_target(w, g); to != 0) p.move(g, 0, to, now_ms, "repair");
  }

  for (std::size_t g = 0; g < w.shards.size(); ++g) {
    if (!free(g)) continue;
    std::vector<raft_id> sorted = w.shards[g].replicas;
    std::sort(sorted.begin(), sorted.end());
    for (raft_id r : sorted) {
      if (!is(w, r, node_state::draining)) continue;
      if (raft_id to = pick_target(w, g); to != 0) p.move(g, r, to, now_ms, "drain");
      break;
    }
  }

  if (w.rebalance) {
    // Loads once the running moves finish, so that a move in flight is not
    // made twice; each move narrows the spread, so this ends.
    for (;;) {
      std::vector<raft_id> active = active_nodes(w);
      std::vector<raft_id> by_most = active, by_least = active;
      std::stable_sort(by_most.begin(), by_most.end(), [&](raft_id a, raft_id b) {
        return projected_load(w, a) > projected_load(w, b);
      });
      std::stable_sort(by_least.begin(), by_least.end(), [&](raft_id a, raft_id b) {
        return projected_load(w, a) < projected_load(w, b);
      });
      bool moved = false;
      for (raft_id from : by_most) {
        for (raft_id to : by_least) {
          if (projected_load(w, from) < projected_load(w, to) + 2) break;
          if (is_target(w, to)) continue;
          for (std::size_t g = 0; g < w.shards.size() && !moved; ++g) {
            if (!free(g) || !contains(w.shards[g].replicas, from) ||
                contains(w.shards[g].replicas, to)) {
              continue;
            }
            p.move(g, from, to, now_ms, "rebalance");
            moved = true;
          }
          if (moved) break;
        }
        if (moved) break;
      }
      if (!moved || p.stuck) break;
    }
    const bool running = std::any_of(w.shards.begin(), w.shards.end(),
                                     [](const shard_entry& e) { return e.moving.has_value(); });
    if (!running) {
      meta_command c;
      c.op = meta_command::kind::rebalanced;
      p.emit(std::move(c));
    }
  }

  // 5. Preferred leaders. First, shards led by a node that is not active.
  auto fewest_leads = [&](std::size_t g, raft_id except) {
    raft_id best = 0;
    for (raft_id r : w.shards[g].replicas) {
      if (r == except || !is(w, r, node_state::active)) continue;
      if (best == 0 || w.leads(r) < w.leads(best) || (w.leads(r) == w.leads(best) && r < best)) {
        best = r;
      }
    }
    return best;
  };
  for (std::size_t g = 0; g < w.shards.size(); ++g) {
    const shard_entry& e = w.shards[g];
    if (e.moving || e.replicas.empty() || is(w, e.replicas.front(), node_state::active)) continue;
    if (raft_id first = fewest_leads(g, 0); first != 0) p.order(g, first);
  }
  // Then, while some active node leads at least two more shards than
  // another, the shortest chain of orders from the former to the latter:
  // shard g1 led by the node with the most goes to a replica of it, which
  // hands one of its own shards on, and so on (length one when the two
  // share a shard). Each chain lowers the sum of squared leaderships, so
  // this ends; with no chain left the spread is as even as the replica sets
  // allow (within one whenever the shards connect the nodes).
  for (;;) {
    std::vector<raft_id> by_most = active_nodes(w);
    std::stable_sort(by_most.begin(), by_most.end(),
                     [&](raft_id a, raft_id b) { return w.leads(a) > w.leads(b); });
    std::vector<std::pair<std::size_t, raft_id>> chain;  // (shard, new first replica)
    for (raft_id from : by_most) {
      chain = lead_chain(w, from);
      if (!chain.empty()) break;
    }
    if (chain.empty() || p.stuck) break;
    for (const auto& [g, to] : chain) p.order(g, to);
  }
  return std::move(p.out);
}

std::string encode(const meta_command& c) {
  using K = meta_command::kind;
  json j;
  j["op"] = std::string(op_name(c.op));
  switch (c.op) {
    case K::node:
      j["node"] = c.node;
      j["state"] = std::string(to_string(c.state));
      j["at_ms"] = c.at_ms;
      break;
    case K::place:
      j["placement"] = c.placement;
      break;
    case K::move:
      j["shard"] = c.shard;
      j["version"] = c.version;
      j["from"] = c.from;
      j["to"] = c.to;
      j["at_ms"] = c.at_ms;
      j["reason"] = c.reason;
      break;
    case K::move_step:
      j["shard"] = c.shard;
      j["version"] = c.version;
      j["step"] = std::string(to_string(c.step));
      break;
    case K::move_done:
      if (c.at_ms != 0) j["at_ms"] = c.at_ms;
      [[fallthrough]];
    case K::order:
      j["shard"] = c.shard;
      j["version"] = c.version;
      j["replicas"] = c.replicas;
      break;
    case K::move_cancel:
      j["shard"] = c.shard;
      j["version"] = c.version;
      j["reason"] = c.reason;
      break;
    case K::leader:
      j["shard"] = c.shard;
      j["node"] = c.node;
      j["term"] = c.term;
      break;
    case K::drain:
      j["node"] = c.node;
      break;
    case K::rebalance:
    case K::rebalanced:
      break;
    case K::grow:
      j["nodes"] = c.node;
      break;
    case K::sync:
      j["node"] = c.node;
      j["nonce"] = c.nonce;
      break;
  }
  return dump(j);
}

result<meta_command> decode_command(std::string_view text) {
  try {
    auto j = parse(text, "command");
    if (!j.ok()) return std::move(j).err();
    return command_from(*j);
  } catch (const std::exception& e) {
    return malformed(fmt::format("command: {}", e.what()));
  }
}

std::string encode(const meta_state& s) {
  json nodes = json::array();
  for (const node_entry& n : s.nodes) {
    nodes.push_back({{"state", std::string(to_string(n.state))},
                     {"seen", n.seen},
                     {"drain_requested", n.drain_requested},
                     {"since_ms", n.since_ms},
                     {"synced", n.synced}});
  }
  json shards = json::array();
  for (const shard_entry& e : s.shards) {
    json moving = nullptr;
    if (e.moving) {
      moving = {{"from", e.moving->from},
                {"to", e.moving->to},
                {"state", std::string(to_string(e.moving->state))},
                {"started_ms", e.moving->started_ms},
                {"reason", e.moving->reason}};
    }
    shards.push_back({{"replicas", e.replicas},
                      {"version", e.version},
                      {"moving", std::move(moving)},
                      {"leader", e.leader},
                      {"leader_term", e.leader_term}});
  }
  json j = {{"nodes", std::move(nodes)},
            {"shards", std::move(shards)},
            {"placed", s.placed},
            {"rebalance", s.rebalance},
            {"moves_started", s.moves_started},
            {"moves_finished", s.moves_finished},
            {"moves_cancelled", s.moves_cancelled},
            {"move_ms_total", s.move_ms_total},
            {"last_move_ms", s.last_move_ms}};
  return dump(j);
}

result<meta_state> decode_state(std::string_view text) {
  try {
    auto j = parse(text, "state");
    if (!j.ok()) return std::move(j).err();
    return state_from(*j);
  } catch (const std::exception& e) {
    return malformed(fmt::format("state: {}", e.what()));
  }
}

}  // namespace onceq::cluster
