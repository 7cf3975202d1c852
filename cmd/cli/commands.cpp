#include "cmd/cli/commands.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "broker/limits.hpp"
#include "cmd/cli/exit_code.hpp"
#include "cmd/cli/interrupt.hpp"
#include "cmd/cli/progress.hpp"
#include "cmd/cli/table.hpp"

namespace onceq::cli {

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr int k_max_batch = static_cast<int>(onceq::k_max_batch);  // the API's limit
constexpr std::int64_t k_consume_batch = 100;                      // messages per consume request
constexpr std::int64_t k_follow_wait_ms = 5000;

json parse_json_flag(const std::string& text, const char* flag) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    throw cli_error(exit_code::usage, fmt::format("{} is not valid JSON: {}", flag, text));
  }
  return j;
}

std::string topic_path(const std::string& name) {
  return "/v1/topics/" + url_encode(name);
}

// "12" or "-" when the counter is missing.
std::string counter(const json& g, const char* name) {
  if (!g.contains(name) || !g[name].is_number_integer()) return "-";
  return std::to_string(g[name].get<std::int64_t>());
}

void print_json(const json& j, const terminal& t, std::ostream& out) {
  out << (t.stdout_tty ? j.dump(2) : j.dump()) << '\n';
}

// ---- produce ---------------------------------------------------------------

class producer {
 public:
  producer(api_client& c, const produce_options& o) : c_(c), o_(o) {
    if (o.envelope) {
      base_envelope_ = parse_json_flag(*o.envelope, "--envelope");
      if (!base_envelope_.is_object()) {
        throw cli_error(exit_code::usage, "--envelope must be a JSON object");
      }
    }
    if (o.idempotency_key) base_envelope_["idempotency_key"] = *o.idempotency_key;
  }

  // One message as the API's {key, value, envelope}; index numbers msg_id.
  json message(const std::string& value, std::size_t index, bool several) const {
    json m = json::object();
    if (o_.key) m["key"] = *o_.key;
    m["value"] = value;
    json env = base_envelope_;
    if (o_.msg_id) env["msg_id"] = several ? fmt::format("{}#{}", *o_.msg_id, index) : *o_.msg_id;
    if (!env.empty()) m["envelope"] = std::move(env);
    return m;
  }

  json send_one(json m) {
    m["topic"] = o_.topic;
    return c_.call("POST", "/v1/produce", &m);
  }

  json send_batch(json messages) {
    json body = {{"topic", o_.topic}, {"messages", std::move(messages)}};
    return c_.call("POST", "/v1/produce", &body);
  }

 private:
  api_client& c_;
  const produce_options& o_;
  json base_envelope_ = json::object();
};

std::string position(const json& r) {
  std::string s =
      fmt::format("partition={} offset={}", r.value("partition", -1), r.value("offset", -1));
  if (r.value("duplicate", false)) s += " (duplicate)";
  return s;
}

}  // namespace

// ---- topics ----------------------------------------------------------------

void topics_create(api_client& c, const topic_create_options& o, std::ostream& out) {
  json body = {{"name", o.name}};
  if (o.partitions) body["partitions"] = *o.partitions;
  for (const auto& [name, value] : o.settings) body[name] = value;
  auto r = c.call("POST", "/v1/topics", &body);
  const auto n = r.value("partitions", 0);
  out << fmt::format("created topic {} ({} partition{})\n", r.value("name", o.name), n,
                     n == 1 ? "" : "s");
}

void topics_list(api_client& c, std::ostream& out) {
  auto r = c.call("GET", "/v1/topics");
  for (const auto& name : r.value("topics", json::array())) out << name.get<std::string>() << '\n';
}

void topics_show(api_client& c, const std::string& name, const terminal& t, std::ostream& out) {
  print_json(c.call("GET", topic_path(name)), t, out);
}

void topics_delete(api_client& c, const std::string& name, std::ostream& out) {
  c.call("DELETE", topic_path(name));
  out << "deleted topic " << name << '\n';
}

// ---- produce ---------------------------------------------------------------

void produce(api_client& c, const produce_options& o, std::istream& in, std::uint64_t in_size,
             const terminal& t, std::ostream& out) {
  if (o.batch < 1 || o.batch > k_max_batch) {
    throw cli_error(exit_code::usage, fmt::format("--batch must be 1..{}", k_max_batch));
  }
  producer p(c, o);
  if (!o.values.empty()) {
    const bool several = o.values.size() > 1;
    for (std::size_t i = 0; i < o.values.size(); ++i) {
      out << position(p.send_one(p.message(o.values[i], i, several))) << std::endl;
    }
    return;
  }

  // stdin: one message per non-empty line (the API refuses empty values).
  const bool by_bytes = in_size > 0;
  progress_bar bar("produce", in_size, by_bytes ? "bytes" : "msgs", t.stderr_tty);
  std::uint64_t bytes = 0;
  std::size_t produced = 0;
  std::size_t duplicates = 0;
  std::size_t index = 0;
  json pending = json::array();
  auto flush = [&] {
    if (pending.empty()) return;
    const std::size_t n = pending.size();  // pending is moved into the request
    try {
      if (o.batch == 1) {
        auto r = p.send_one(std::move(pending[0]));
        duplicates += r.value("duplicate", false) ? 1 : 0;
      } else {
        auto r = p.send_batch(std::move(pending));
        for (const auto& x : r.value("results", json::array())) {
          duplicates += x.value("duplicate", false) ? 1 : 0;
        }
      }
    } catch (const cli_error& e) {
      // Say where to resume: the lines before this request are stored.
      throw cli_error(e.code(), fmt::format("{} (after {} messages produced)", e.what(), produced));
    }
    produced += n;
    pending = json::array();
    bar.set(by_bytes ? bytes : produced);
  };
  std::string line;
  while (std::getline(in, line)) {
    if (interrupted()) throw cli_error(exit_code::interrupted, "interrupted");
    bytes += line.size() + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    pending.push_back(p.message(line, index++, true));
    if (static_cast<int>(pending.size()) >= o.batch) flush();
  }
  flush();
  bar.finish();
  out << fmt::format("produced {} messages to {}", produced, o.topic);
  if (duplicates > 0) out << fmt::format(" ({} duplicates)", duplicates);
  out << std::endl;
}

// ---- consume ---------------------------------------------------------------

void consume(api_client& c, const consume_options& o, const terminal& t, std::ostream& out) {
  if (o.max < 0) throw cli_error(exit_code::usage, "--max must be >= 0");
  const std::int64_t first_wait = o.wait_ms.value_or(o.follow ? k_follow_wait_ms : 0);
  // A bar under a table on the same terminal would tear the table apart.
  progress_bar bar("consume", static_cast<std::uint64_t>(o.max), "msgs",
                   o.max > 0 && t.stderr_tty && !t.stdout_tty);

  bool header_printed = false;
  std::int64_t received = 0;
  bool first = true;
  while (o.max == 0 || received < o.max) {
    if (interrupted()) throw cli_error(exit_code::interrupted, "interrupted");
    std::int64_t want = k_consume_batch;
    if (o.max > 0) want = std::min(want, o.max - received);
    // Without follow only the first request waits: later ones drain what is
    // already there and stop at the first empty answer.
    const std::int64_t wait = (first || o.follow) ? first_wait : 0;
    first = false;
    json body = {{"topic", o.topic},
                 {"group", o.group},
                 {"owner", o.owner},
                 {"max_messages", want},
                 {"wait_ms", wait}};
    if (o.lease_ms) body["lease_ms"] = *o.lease_ms;
    auto r = c.send("POST", "/v1/consume", body.dump(), {}, milliseconds(wait));
    if (r.status >= 300) throw_reply_error(r);

    std::size_t got = 0;
    std::size_t pos = 0;
    while (pos < r.body.size()) {
      auto end = r.body.find('\n', pos);
      if (end == std::string::npos) end = r.body.size();
      std::string_view text(r.body.data() + pos, end - pos);
      pos = end + 1;
      if (text.empty()) continue;
      auto m = json::parse(text, nullptr, false);
      if (m.is_discarded()) throw cli_error(exit_code::failure, "bad NDJSON line from the server");
      ++got;
      if (t.stdout_tty) {
        if (!header_printed) {
          out << fmt::format("{:<9} {:>4} {:>10} {:>4}  {:<20}  {}\n", "TOPIC", "PART", "OFFSET",
                             "ATT", "KEY", "VALUE");
          header_printed = true;
        }
        std::string value = one_line(m.value("value", ""), 60);
        auto err = m.value("last_error", "");
        if (!err.empty()) value += "  [" + one_line(err, 40) + "]";
        out << fmt::format("{:<9} {:>4} {:>10} {:>4}  {:<20}  {}\n",
                           one_line(m.value("topic", ""), 9), m.value("partition", -1),
                           m.value("offset", -1), m.value("attempts", 0),
                           one_line(m.value("key", ""), 20), value);
      } else {
        out << text << '\n';
      }
      out.flush();
      if (o.ack) {
        json a = {{"topic", m.value("topic", o.topic)},
                  {"group", o.group},
                  {"owner", o.owner},
                  {"partition", m.at("partition")},
                  {"offset", m.at("offset")},
                  {"attempts", m.at("attempts")}};
        c.call("POST", "/v1/ack", &a);
      }
    }
    received += static_cast<std::int64_t>(got);
    bar.set(static_cast<std::uint64_t>(received));
    if (got == 0 && !o.follow) break;
  }
}

// ---- ack / nack / extend ---------------------------------------------------

namespace {
json delivery_body(const delivery_options& o) {
  json b = {{"topic", o.topic},
            {"group", o.group},
            {"owner", o.owner},
            {"partition", o.partition},
            {"offset", o.offset}};
  if (o.attempts) b["attempts"] = *o.attempts;
  return b;
}
}  // namespace

void ack(api_client& c, const delivery_options& o, std::ostream& out) {
  json b = delivery_body(o);
  if (o.result) b["result"] = parse_json_flag(*o.result, "--result");
  c.call("POST", "/v1/ack", &b);
  out << fmt::format("acked partition={} offset={}\n", o.partition, o.offset);
}

void nack(api_client& c, const delivery_options& o, std::ostream& out) {
  json b = delivery_body(o);
  if (o.reason) b["reason"] = *o.reason;
  if (o.delay_ms) b["delay_ms"] = *o.delay_ms;
  c.call("POST", "/v1/nack", &b);
  out << fmt::format("nacked partition={} offset={}\n", o.partition, o.offset);
}

void extend(api_client& c, const delivery_options& o, std::ostream& out) {
  if (!o.lease_ms) throw cli_error(exit_code::usage, "extend needs --lease-ms");
  json b = delivery_body(o);
  b["lease_ms"] = *o.lease_ms;
  auto r = c.call("POST", "/v1/extend", &b);
  out << fmt::format("lease_expires_at_ms={}\n", r.value("lease_expires_at_ms", std::int64_t{0}));
}

// ---- keys, dlq, stats ------------------------------------------------------

void keys_get(api_client& c, const key_options& o, const terminal& t, std::ostream& out) {
  std::string target = fmt::format("/v1/keys?topic={}&group={}&key={}", url_encode(o.topic),
                                   url_encode(o.group), url_encode(o.key));
  if (o.tenant_id) target += "&tenant_id=" + url_encode(*o.tenant_id);
  if (o.wait_ms) target += fmt::format("&wait_ms={}", *o.wait_ms);
  print_json(c.call("GET", target, nullptr, {}, milliseconds(o.wait_ms.value_or(0))), t, out);
}

void dlq_redrive(api_client& c, const std::string& topic, std::optional<std::int64_t> max,
                 std::ostream& out) {
  json b = {{"topic", topic}};
  if (max) b["max_messages"] = *max;
  auto r = c.call("POST", "/v1/dlq/redrive", &b);
  out << fmt::format("moved {}\n", r.value("moved", std::int64_t{0}));
}

std::int64_t epoch_ms_of(const std::string& text, const char* flag) {
  auto bad = [&] {
    return cli_error(exit_code::usage, fmt::format("{} must be epoch milliseconds or RFC 3339 "
                                                   "(2026-11-24T14:00:00Z), got '{}'",
                                                   flag, text));
  };
  if (!text.empty() &&
      std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    try {
      return std::stoll(text);
    } catch (const std::exception&) {
      throw bad();
    }
  }
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) !=
          6 ||
      used != 19)
    throw bad();
  std::string_view rest(text);
  rest.remove_prefix(19);
  std::int64_t ms = 0;
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    int digits = 0;
    while (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') {
      if (digits++ < 3) ms = ms * 10 + (rest.front() - '0');
      rest.remove_prefix(1);
    }
    if (digits == 0) throw bad();
    for (; digits < 3; ++digits) ms *= 10;
  }
  std::int64_t offset_min = 0;
  if (rest == "Z" || rest == "z") {
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    int oh = 0, om = 0;
    if (std::sscanf(std::string(rest.substr(1)).c_str(), "%2d:%2d", &oh, &om) != 2) throw bad();
    offset_min = (rest[0] == '-' ? -1 : 1) * (oh * 60 + om);
  } else {
    throw bad();
  }
  using namespace std::chrono;
  const year_month_day ymd{year{y}, month{static_cast<unsigned>(mo)},
                           day{static_cast<unsigned>(d)}};
  if (!ymd.ok() || h > 23 || mi > 59 || sec > 60) throw bad();
  const auto days = sys_days{ymd}.time_since_epoch().count();
  return ((days * 24 + h) * 60 + mi - offset_min) * 60'000 + sec * 1000 + ms;
}

void replay(api_client& c, const replay_options& o, std::ostream& out) {
  json b = {{"topic", o.topic}, {"group", o.group}, {"dry_run", !o.apply}};
  if (o.from) b["from_ms"] = epoch_ms_of(*o.from, "--from");
  if (o.to) b["to_ms"] = epoch_ms_of(*o.to, "--to");
  if (o.partition) b["partition"] = *o.partition;
  if (o.from_offset) b["from_offset"] = *o.from_offset;
  if (o.to_offset) b["to_offset"] = *o.to_offset;
  if (o.page) b["max_messages"] = *o.page;
  static constexpr const char* k_outcomes[] = {
      "already_committed", "would_deliver", "in_flight", "pending",
      "dead_lettered",     "superseded",    "gone"};
  std::map<std::string, std::int64_t> totals;
  std::int64_t replayed = 0;
  text_table table(
      {"PARTITION", "OFFSET", "OUTCOME", "KEY", "ATTEMPTS", "OWNER", "COMMITTED_AT", "RESULT"});
  for (;;) {
    if (interrupted()) throw cli_error(exit_code::interrupted, "interrupted");
    const json r = c.call("POST", "/v1/replay", &b);
    const json messages = r.value("messages", json::array());
    const json summary = r.value("summary", json::object());
    for (const auto& m : messages) {
      const json res = m.contains("result") ? m["result"] : json();
      table.add({counter(m, "partition"), counter(m, "offset"), m.value("outcome", "-"),
                 one_line(m.value("idempotency_key", "-"), 40), counter(m, "attempts"),
                 m.value("owner", "-"), counter(m, "committed_at_ms"),
                 res.is_null() ? "-" : one_line(res.dump(), 40)});
    }
    for (auto it = summary.begin(); it != summary.end(); ++it)
      totals[it.key()] += it->get<std::int64_t>();
    replayed += r.value("replayed", std::int64_t{0});
    const json next = r.contains("next") ? r["next"] : json();
    if (!next.is_string()) break;
    b["cursor"] = next;
  }
  table.print(out);
  std::string line;
  for (const char* k : k_outcomes)
    line += fmt::format("{}{} {}", line.empty() ? "" : "  ", k, totals[k]);
  out << line << '\n';
  out << (o.apply ? fmt::format("replayed {}\n", replayed)
                  : std::string("dry run: nothing changed (--apply to replay)\n"));
}

void stats(api_client& c, const std::string& topic, std::ostream& out) {
  std::vector<std::string> names;
  if (!topic.empty()) {
    names.push_back(topic);
  } else {
    for (const auto& n : c.call("GET", "/v1/topics").value("topics", json::array())) {
      names.push_back(n.get<std::string>());
    }
  }
  text_table table(
      {"TOPIC", "GROUP", "BACKLOG", "INFLIGHT", "ACKED", "AUTO_ACKED", "REDELIVERED", "DLQ"});
  for (const auto& name : names) {
    json info;
    try {
      info = c.call("GET", topic_path(name));
    } catch (const cli_error& e) {
      // Listing then reading is not atomic: a topic deleted in between is
      // simply not shown; a named topic that is missing is an error.
      if (!topic.empty() || e.code() != exit_code::not_found) throw;
      continue;
    }
    const auto groups = info.value("groups", json::object());
    if (groups.empty()) table.add({name, "-", "-", "-", "-", "-", "-", "-"});
    for (const auto& [group, g] : groups.items()) {
      table.add({name, group, counter(g, "backlog"), counter(g, "inflight"), counter(g, "acked"),
                 counter(g, "auto_acked"), counter(g, "redelivered"), counter(g, "dead_lettered")});
    }
  }
  table.print(out);
}

// ---- cluster ---------------------------------------------------------------

namespace {

// j[key] as text: a string as is, an integer in decimal; absent when j is
// not an object or the field is missing, null or of another type (an older
// or newer server's answer prints, it does not throw).
std::string text_of(const json& j, const char* key, std::string_view absent = "-") {
  if (!j.is_object()) return std::string(absent);
  const auto it = j.find(key);
  if (it == j.end()) return std::string(absent);
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return std::to_string(it->get<std::int64_t>());
  return std::string(absent);
}

// ["n2","n3","n5"] -> "n2,n3,n5" (order kept); "-" when missing or empty.
std::string joined(const json& j, const char* key) {
  std::string out;
  if (j.is_object() && j.contains(key) && j[key].is_array()) {
    for (const auto& x : j[key]) {
      if (!x.is_string()) continue;
      if (!out.empty()) out += ",";
      out += x.get<std::string>();
    }
  }
  return out.empty() ? "-" : out;
}

// A shard's running move: "n1 -> n5 adding (drain)", "(none) -> n5 adding
// (repair)" for a copy added without one leaving; "-" when none runs.
std::string move_of(const json& shard) {
  if (!shard.contains("moving") || !shard["moving"].is_object()) return "-";
  const json& m = shard["moving"];
  std::string s = fmt::format("{} -> {} {}", text_of(m, "from", "(none)"), text_of(m, "to", "?"),
                              text_of(m, "state", "?"));
  if (const std::string why = text_of(m, "reason", ""); !why.empty()) s += " (" + why + ")";
  return s;
}

// "meta leader n1 (term 2), placed, 3 replicas per shard, not rebalancing;
// moves: 3 started, 2 finished, 0 cancelled".
std::string meta_line(const json& m) {
  const std::string leader = text_of(m, "leader", "");
  std::string s = fmt::format("meta leader {} (term {})", leader.empty() ? "(none)" : leader,
                              counter(m, "term"));
  s += m.value("placed", false) ? ", placed" : ", not placed yet";
  s += fmt::format(", {} replicas per shard", counter(m, "replicas"));
  s += m.value("rebalancing", false) ? ", rebalancing" : ", not rebalancing";
  s += fmt::format("; moves: {} started, {} finished, {} cancelled", counter(m, "moves_started"),
                   counter(m, "moves_finished"), counter(m, "moves_cancelled"));
  return s;
}

}  // namespace

void cluster_status(api_client& c, std::ostream& out) {
  const json st = c.call("GET", "/v1/cluster");
  out << "node " << st.value("node", "") << "\n\n";
  const json node_list = st.value("nodes", json::array());
  const json shard_list = st.value("shards", json::array());
  text_table nodes({"NODE", "HTTP", "RAFT", "REACHABLE"});
  for (const auto& n : node_list) {
    nodes.add({n.value("id", ""), n.value("http", ""), n.value("raft", ""),
               n.value("reachable", false) ? "yes" : "no"});
  }
  nodes.print(out);
  out << "\n";
  text_table shards({"SHARD", "LEADER", "TERM", "COMMIT", "APPLIED", "TOPICS", "FAILURE"});
  for (const auto& s : shard_list) {
    const std::string leader = s.value("leader", "");
    shards.add({std::to_string(s.value("shard", 0)), leader.empty() ? "(none)" : leader,
                std::to_string(s.value("term", std::uint64_t{0})),
                std::to_string(s.value("commit_index", std::uint64_t{0})),
                std::to_string(s.value("applied_index", std::uint64_t{0})), joined(s, "topics"),
                s.value("failure", "-")});
  }
  shards.print(out);

  // Placement, from a server that places shards (an older one sends no
  // "meta" and its answer ends here). The tables above keep their columns,
  // so that scripts reading them go on working.
  if (!st.contains("meta") || !st["meta"].is_object()) return;
  out << "\n" << meta_line(st["meta"]) << "\n\n";
  text_table placed_nodes({"NODE", "STATE", "REPLICAS", "LEADS"});
  for (const auto& n : node_list) {
    placed_nodes.add(
        {text_of(n, "id"), text_of(n, "state"), counter(n, "replicas"), counter(n, "leads")});
  }
  placed_nodes.print(out);
  out << "\n";
  text_table placed_shards({"SHARD", "REPLICAS", "MOVE"});
  for (const auto& s : shard_list) {
    placed_shards.add({text_of(s, "shard"), joined(s, "replicas"), move_of(s)});
  }
  placed_shards.print(out);
}

void cluster_drain(api_client& c, const std::string& node, std::ostream& out) {
  const json r = c.call("POST", "/v1/cluster/nodes/" + url_encode(node) + "/drain");
  out << fmt::format("node {}: {}\n", text_of(r, "node", node), text_of(r, "state", "draining"));
}

void cluster_rebalance(api_client& c, std::ostream& out) {
  const json r = c.call("POST", "/v1/cluster/rebalance");
  out << text_of(r, "status", "rebalancing") << '\n';
}

}  // namespace onceq::cli
