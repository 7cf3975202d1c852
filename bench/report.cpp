#include "bench/report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>

namespace onceq::bench {
namespace {

const run_result* find(const std::vector<run_result>& runs, std::string_view system,
                       std::string_view workload, std::string_view durability) {
  for (const auto& r : runs) {
    if (r.system == system && r.workload == workload && r.durability == durability && r.ran &&
        r.error.empty() && r.messages > 0) {
      return &r;
    }
  }
  return nullptr;
}

std::string ms(double v) {
  if (v < 0) return "–";
  return v < 10 ? fmt::format("{:.2f}", v) : fmt::format("{:.1f}", v);
}

std::string rate(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e4) return fmt::format("{:.0f}k", v / 1e3);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string ratio(std::optional<double> v) {
  return v ? fmt::format("{:.2f}x", *v) : "–";
}

std::string notes_of(const run_result& r) {
  if (!r.skipped.empty()) return "not run: " + r.skipped;
  std::string n;
  auto add = [&](const std::string& s) {
    if (!n.empty()) n += "; ";
    n += s;
  };
  if (!r.error.empty()) add("FAILED: " + r.error.substr(0, 200));
  if (r.timed_out) add(fmt::format("time limit: {}/{} done", r.messages, r.target));
  if (r.duplicates_sent > 0) {
    add(fmt::format("{} dup produces, {} flagged duplicate by the server", r.duplicates_sent,
                    r.duplicates_detected));
  }
  if (r.not_acked > 0) add(fmt::format("{} deliveries left unacked", r.not_acked));
  if (r.acks_refused > 0) add(fmt::format("{} acks refused", r.acks_refused));
  if (r.workload.starts_with("w5-") && r.ran && r.error.empty()) {
    add(fmt::format("topic B holds {}/{} next messages", r.next_topic_found, r.target));
  }
  if (r.steps_pending > 0) {
    add(fmt::format("{} produced messages answered pending (outbox)", r.steps_pending));
  }
  if (r.workload == "w4-faults" || r.keys_more_than_once > 0) {
    if (r.keys_more_than_once == 0 && r.messages == r.target) {
      add("every key processed exactly once");
    } else {
      add(fmt::format("{} keys processed more than once ({} extra)", r.keys_more_than_once,
                      r.extra_processings));
    }
  }
  if (r.keys_checked.sampled > 0) {
    add(fmt::format("GET /v1/keys: {}/{} committed", r.keys_checked.committed,
                    r.keys_checked.sampled));
  }
  return n;
}

struct ratio_row {
  std::string workload;
  std::string durability;
  std::optional<double> vs_nats;
  std::optional<double> vs_redis;
  std::optional<double> p99_vs_nats;  // onceq p99 / peer p99 (lower is better)
  std::optional<double> p99_vs_redis;
};

std::optional<double> div(const run_result* a, const run_result* b) {
  if (a == nullptr || b == nullptr || b->msgs_per_s <= 0) return std::nullopt;
  return a->msgs_per_s / b->msgs_per_s;
}

std::optional<double> div_p99(const run_result* a, const run_result* b) {
  if (a == nullptr || b == nullptr || a->p99_ms < 0 || b->p99_ms <= 0) return std::nullopt;
  return a->p99_ms / b->p99_ms;
}

std::vector<ratio_row> ratios(const std::vector<run_result>& runs, const bench_options& o) {
  std::vector<ratio_row> out;
  for (const auto kind : expand_workloads(o)) {
    for (const auto d : o.durabilities) {
      const auto w = id_of(kind);
      const auto dn = to_string(d);
      const auto* q = find(runs, "onceq", w, dn);
      const auto* n = find(runs, "nats", w, dn);
      const auto* rd = find(runs, "redis", w, dn);
      out.push_back(
          {std::string(w), std::string(dn), div(q, n), div(q, rd), div_p99(q, n), div_p99(q, rd)});
    }
  }
  return out;
}

std::optional<double> div_cpu(const run_result* a, const run_result* b) {
  if (a == nullptr || b == nullptr || b->server_cpu_s_per_m <= 0) return std::nullopt;
  return a->server_cpu_s_per_m / b->server_cpu_s_per_m;
}

// The targets of issue 14. onceq always runs synced; JetStream at its
// default (Debian's 2.9 has no synced mode); Redis at appendfsync always.
enum class metric {
  msgs,  // onceq msgs/s / peer msgs/s >= goal
  p99,   // onceq p99 / peer p99 <= goal
  cpu,   // onceq server CPU s per M msgs / peer's <= goal
};

struct target {
  std::string what;
  std::string workload;
  std::string peer;
  std::string peer_durability;
  std::string peer_workload;  // "" = the same workload
  double goal;
  metric m;
};

const std::vector<target>& targets() {
  static const std::vector<target> t{
      {"W1 one per request, 64 conns >= 1.2x Redis-always", "w1-single", "redis", "synced", "", 1.2,
       metric::msgs},
      {"W1 one per request, 64 conns >= 2x JetStream", "w1-single", "nats", "default", "", 2.0,
       metric::msgs},
      {"W2 drain >= 1.2x Redis-always", "w2-drain", "redis", "synced", "", 1.2, metric::msgs},
      {"W2 drain >= 2x JetStream", "w2-drain", "nats", "default", "", 2.0, metric::msgs},
      {"W2 piggyback >= 1.2x Redis-always pipelined", "w2-piggyback", "redis", "synced", "", 1.2,
       metric::msgs},
      {"W2 streaming drain >= 0.9x long-poll drain", "w2-stream", "onceq", "synced", "w2-drain",
       0.9, metric::msgs},
      {"W3 end-to-end >= 1.2x Redis-always", "w3-e2e", "redis", "synced", "", 1.2, metric::msgs},
      {"W5 steps: ack with produce >= 1.5x produce then ack", "w5-step-ack-produce", "onceq",
       "synced", "w5-step-separate", 1.5, metric::msgs},
      {"W6 ordered drain >= 0.8x unordered drain", "w6-drain-ordered", "onceq", "synced",
       "w6-drain-unordered", 0.8, metric::msgs},
      {"W3 fixed rate p99 <= 0.8x Redis-always", "w3-rate", "redis", "synced", "", 0.8,
       metric::p99},
      {"W3 fixed rate p99 after history <= 0.8x Redis-always", "w3-rate-aged", "redis", "synced",
       "", 0.8, metric::p99},
      {"W1 one per request CPU/msg <= Redis-always", "w1-single", "redis", "synced", "", 1.0,
       metric::cpu},
      {"W2 drain CPU/msg <= Redis-always", "w2-drain", "redis", "synced", "", 1.0, metric::cpu},
      {"W3 end-to-end CPU/msg <= Redis-always", "w3-e2e", "redis", "synced", "", 1.0, metric::cpu},
      {"W3 fixed rate CPU/msg <= Redis-always", "w3-rate", "redis", "synced", "", 1.0, metric::cpu},
  };
  return t;
}

struct target_result {
  const target* t;
  std::optional<double> value;  // ratio
  bool met = false;
};

std::vector<target_result> check_targets(const std::vector<run_result>& runs) {
  std::vector<target_result> out;
  for (const auto& t : targets()) {
    const auto* q = find(runs, "onceq", t.workload, "synced");
    const auto* p = find(runs, t.peer, t.peer_workload.empty() ? t.workload : t.peer_workload,
                         t.peer_durability);
    target_result tr{&t, std::nullopt, false};
    switch (t.m) {
      case metric::msgs:
        tr.value = div(q, p);
        if (tr.value) tr.met = *tr.value >= t.goal;
        break;
      case metric::p99:
        tr.value = div_p99(q, p);
        if (tr.value) tr.met = *tr.value <= t.goal;
        break;
      case metric::cpu:
        tr.value = div_cpu(q, p);
        if (tr.value) tr.met = *tr.value <= t.goal;
        break;
    }
    out.push_back(tr);
  }
  return out;
}

// Cluster mode: onceq against JetStream RN on the measures that matter for
// a replicated broker. JetStream runs at its default durability (Debian's
// 2.9 has no synced mode), or synced where only that ran.
struct cluster_row {
  std::string what;
  bool lower_is_better = false;
  std::optional<double> onceq_synced;
  std::optional<double> onceq_default;
  std::optional<double> nats;
};

const failover_result* find_failover(const std::vector<failover_result>& fs,
                                     std::string_view system, std::string_view durability) {
  for (const auto& f : fs) {
    if (f.system == system && f.durability == durability && !f.runs.empty()) return &f;
  }
  return nullptr;
}

std::vector<cluster_row> cluster_rows(const std::vector<run_result>& runs,
                                      const std::vector<failover_result>& fs) {
  auto nats_run = [&](std::string_view w) {
    const auto* r = find(runs, "nats", w, "default");
    return r != nullptr ? r : find(runs, "nats", w, "synced");
  };
  auto msgs = [](const run_result* r) {
    return r != nullptr ? std::optional<double>(r->msgs_per_s) : std::nullopt;
  };
  auto p99 = [](const run_result* r) {
    return r != nullptr && r->p99_ms >= 0 ? std::optional<double>(r->p99_ms) : std::nullopt;
  };
  std::vector<cluster_row> out;
  for (const auto* w : {"w1-batch", "w3-e2e"}) {
    out.push_back({fmt::format("{} msgs/s", w), false, msgs(find(runs, "onceq", w, "synced")),
                   msgs(find(runs, "onceq", w, "default")), msgs(nats_run(w))});
  }
  out.push_back({"w3-rate p99 ms (fixed rate)", true, p99(find(runs, "onceq", "w3-rate", "synced")),
                 p99(find(runs, "onceq", "w3-rate", "default")), p99(nats_run("w3-rate"))});
  const auto* nf = find_failover(fs, "nats", "default");
  if (nf == nullptr) nf = find_failover(fs, "nats", "synced");
  auto fo = [](const failover_result* f, bool median) {
    if (f == nullptr) return std::optional<double>{};
    return std::optional<double>(median ? f->median_ms : f->max_ms);
  };
  for (const bool median : {true, false}) {
    out.push_back({median ? "failover median ms" : "failover max ms", true,
                   fo(find_failover(fs, "onceq", "synced"), median),
                   fo(find_failover(fs, "onceq", "default"), median), fo(nf, median)});
  }
  return out;
}

std::optional<double> over(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

std::string cell(std::optional<double> v, bool is_ms) {
  if (!v) return "–";
  return is_ms ? ms(*v) : rate(*v);
}

}  // namespace

std::string render_markdown(const std::vector<run_result>& runs,
                            const std::vector<failover_result>& failovers, const bench_options& o,
                            const report_context& ctx) {
  std::string md;
  auto out = std::back_inserter(md);
  fmt::format_to(out, "Command: `{}`\n\n", ctx.command);
  fmt::format_to(out, "Run {} on {}; onceq-bench at commit {}.\n", ctx.started_at, ctx.machine,
                 ctx.bench_commit);
  fmt::format_to(
      out,
      "{} unique messages per run ({} for one-per-request produce, from {} connections), "
      "{}-byte payloads, {} producers, {} consumers, batch {}, each with a unique idempotency "
      "key / msg id; a fresh server and data dir per row; client and server share this "
      "machine.\n\n",
      o.messages, o.single_messages, o.single_producers, o.payload, o.producers, o.consumers,
      o.batch);
  if (o.cluster > 0) {
    fmt::format_to(out,
                   "**Cluster mode**: onceq (`onceqd --cluster`) and NATS JetStream (routes, an "
                   "R{} stream) each run as {} nodes on 127.0.0.1, one system at a time. **All {} "
                   "nodes and the bench client share this one machine ({})**: replication traffic "
                   "is loopback and the nodes compete for the same cores and disk, so the figures "
                   "compare the two systems on equal terms, not what {} machines would do.\n\n",
                   o.cluster, o.cluster, o.cluster, ctx.machine, o.cluster);
  }
  for (const auto& [system, version] : ctx.versions) {
    fmt::format_to(out, "- {}: {}\n", system, version);
  }
  if (o.cluster > 0) {
    std::map<std::string, std::string> clients;
    for (const auto& r : runs) {
      if (!r.clients.empty() && !clients.contains(r.system)) clients[r.system] = r.clients;
    }
    for (const auto& [system, where] : clients) {
      fmt::format_to(out, "- {} clients (first run): {}\n", system, where);
    }
  }
  md += "\nWorkloads:\n";
  for (const auto kind : expand_workloads(o)) {
    fmt::format_to(out, "- `{}`: {}\n", id_of(kind), describe(kind, o));
  }
  md +=
      "\nLatency is end to end, from the produce call to the answered ack of the first "
      "processing of that key (fixed rate: from the scheduled send time; w5: per workflow step, "
      "from its first request to its last answer). CPU is the server process's user+system "
      "time during the measured phase.\n\n";

  md +=
      "| workload | durability | system | server setting | msgs/s | p50 ms | p99 ms | p99.9 ms | "
      "peak RSS MB | server CPU s / M msgs | client CPU s / M msgs | notes |\n";
  md += "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : runs) {
    const bool ok = r.ran && r.messages > 0;
    fmt::format_to(out, "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                   r.workload, r.durability, r.system, r.setting, ok ? rate(r.msgs_per_s) : "–",
                   ms(r.p50_ms), ms(r.p99_ms), ms(r.p999_ms),
                   ok ? fmt::format("{:.0f}", static_cast<double>(r.peak_rss_kb) / 1024) : "–",
                   ok ? fmt::format("{:.1f}", r.server_cpu_s_per_m) : "–",
                   ok ? fmt::format("{:.1f}", r.client_cpu_s_per_m) : "–", notes_of(r));
  }

  md +=
      "\nonceq / peer at the same durability level (msgs/s: higher is better for onceq; p99: "
      "lower is better for onceq):\n\n";
  md +=
      "| workload | durability | msgs/s onceq/nats | msgs/s onceq/redis | p99 onceq/nats | p99 "
      "onceq/redis |\n|---|---|---:|---:|---:|---:|\n";
  for (const auto& row : ratios(runs, o)) {
    fmt::format_to(out, "| {} | {} | {} | {} | {} | {} |\n", row.workload, row.durability,
                   ratio(row.vs_nats), ratio(row.vs_redis), ratio(row.p99_vs_nats),
                   ratio(row.p99_vs_redis));
  }

  if (!failovers.empty()) {
    fmt::format_to(
        out,
        "\nFailover: one producer writes one message per request (about every 2 ms) with retries "
        "(each attempt {} ms at most, a refusal or a lost connection retried after {} ms, the "
        "same message id, through the next node when the one used is gone); the leader of the "
        "topic's shard (onceq) / of the stream (JetStream) is killed with SIGKILL; the time runs "
        "from the kill to the first acknowledged write that was sent after it. The node is then "
        "restarted and the next run waits until it has caught up.\n\n",
        o.failover_attempt_ms, o.failover_retry_ms);
    md +=
        "| system | durability | runs | median ms | max ms | each run: killed → answered via, ms "
        "| probe clients | notes |\n|---|---|---:|---:|---:|---|---|---|\n";
    for (const auto& f : failovers) {
      std::string each;
      for (const auto& fr : f.runs) {
        if (!each.empty()) each += ", ";
        each += fmt::format("{}→{} {:.0f}", fr.killed, fr.via.empty() ? "?" : fr.via, fr.ms);
      }
      std::string notes = f.skipped.empty() ? "" : "not run: " + f.skipped;
      if (!f.error.empty()) notes += "FAILED: " + f.error.substr(0, 300);
      fmt::format_to(out, "| {} | {} | {} | {} | {} | {} | {} | {} |\n", f.system, f.durability,
                     f.runs.size(), ms(f.median_ms), ms(f.max_ms), each, f.clients, notes);
    }
  }

  if (o.cluster > 0) {
    fmt::format_to(out,
                   "\nonceq {}-node cluster / JetStream R{} ({}-node cluster; JetStream at its "
                   "default durability):\n\n",
                   o.cluster, o.cluster, o.cluster);
    md +=
        "| measure | onceq synced | onceq default | JetStream | onceq synced / JetStream | "
        "onceq default / JetStream | better |\n|---|---:|---:|---:|---:|---:|---|\n";
    for (const auto& row : cluster_rows(runs, failovers)) {
      const bool is_ms = row.lower_is_better;
      fmt::format_to(out, "| {} | {} | {} | {} | {} | {} | {} |\n", row.what,
                     cell(row.onceq_synced, is_ms), cell(row.onceq_default, is_ms),
                     cell(row.nats, is_ms), ratio(over(row.onceq_synced, row.nats)),
                     ratio(over(row.onceq_default, row.nats)),
                     row.lower_is_better ? "lower" : "higher");
    }
    return md;
  }

  md +=
      "\nIssue 14 targets (onceq at `--fsync always` vs JetStream at its default and Redis at "
      "`appendfsync always`):\n\n| target | measured | met |\n|---|---:|---|\n";
  for (const auto& tr : check_targets(runs)) {
    fmt::format_to(out, "| {} | {} | {} |\n", tr.t->what, ratio(tr.value),
                   tr.value ? (tr.met ? "yes" : "**no**") : "not measured");
  }
  return md;
}

nlohmann::json render_json(const std::vector<run_result>& runs,
                           const std::vector<failover_result>& failovers, const bench_options& o,
                           const report_context& ctx) {
  using nlohmann::json;
  json j;
  j["command"] = ctx.command;
  j["started_at"] = ctx.started_at;
  j["machine"] = ctx.machine;
  j["bench_commit"] = ctx.bench_commit;
  j["versions"] = ctx.versions;
  j["config"] = {{"messages", o.messages},
                 {"single_messages", o.single_messages},
                 {"producers", o.producers},
                 {"consumers", o.consumers},
                 {"batch", o.batch},
                 {"rate", o.rate},
                 {"rate_seconds", o.rate_seconds},
                 {"rate_batch", o.rate_batch},
                 {"single_producers", o.single_producers},
                 {"history", o.history},
                 {"payload", o.payload},
                 {"partitions", o.partitions},
                 {"duplicate_ratio", o.duplicate_ratio},
                 {"no_ack_ratio", o.no_ack_ratio},
                 {"lease_ms", o.lease_ms},
                 {"wait_ms", o.wait_ms},
                 {"onceq_default_fsync", o.onceq_default_fsync},
                 {"cluster", o.cluster},
                 {"cluster_clients", o.cluster_spread ? "spread" : "leader"},
                 {"failover_runs", o.failover_runs},
                 {"failover_attempt_ms", o.failover_attempt_ms},
                 {"failover_retry_ms", o.failover_retry_ms}};
  auto num = [](double v) { return v < 0 || !std::isfinite(v) ? json(nullptr) : json(v); };
  json rows = json::array();
  for (const auto& r : runs) {
    rows.push_back({{"system", r.system},
                    {"version", r.version},
                    {"workload", r.workload},
                    {"durability", r.durability},
                    {"setting", r.setting},
                    {"clients", r.clients},
                    {"ran", r.ran},
                    {"skipped", r.skipped},
                    {"error", r.error},
                    {"timed_out", r.timed_out},
                    {"target_messages", r.target},
                    {"messages", r.messages},
                    {"seconds", r.seconds},
                    {"msgs_per_s", r.msgs_per_s},
                    {"latency_samples", r.latency_samples},
                    {"p50_ms", num(r.p50_ms)},
                    {"p99_ms", num(r.p99_ms)},
                    {"p999_ms", num(r.p999_ms)},
                    {"max_ms", num(r.max_ms)},
                    {"peak_rss_kb", r.peak_rss_kb},
                    {"server_cpu_s", r.server_cpu_s},
                    {"server_cpu_s_per_million", r.server_cpu_s_per_m},
                    {"client_cpu_s_per_million", r.client_cpu_s_per_m},
                    {"sent", r.sent},
                    {"duplicates_sent", r.duplicates_sent},
                    {"duplicates_detected", r.duplicates_detected},
                    {"deliveries", r.deliveries},
                    {"not_acked", r.not_acked},
                    {"acks_refused", r.acks_refused},
                    {"keys_more_than_once", r.keys_more_than_once},
                    {"extra_processings", r.extra_processings},
                    {"steps_pending", r.steps_pending},
                    {"next_topic_found", r.next_topic_found},
                    {"keys_checked", r.keys_checked.sampled},
                    {"keys_committed", r.keys_checked.committed},
                    {"keys_check_problem", r.keys_checked.first_problem},
                    {"server_exit", r.server_exit}});
  }
  j["runs"] = rows;
  json rat = json::array();
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  for (const auto& row : ratios(runs, o)) {
    rat.push_back({{"workload", row.workload},
                   {"durability", row.durability},
                   {"msgs_per_s_onceq_over_nats", opt(row.vs_nats)},
                   {"msgs_per_s_onceq_over_redis", opt(row.vs_redis)},
                   {"p99_onceq_over_nats", opt(row.p99_vs_nats)},
                   {"p99_onceq_over_redis", opt(row.p99_vs_redis)}});
  }
  j["ratios"] = rat;
  json tj = json::array();
  for (const auto& tr : check_targets(runs)) {
    tj.push_back({{"target", tr.t->what}, {"ratio", opt(tr.value)}, {"met", tr.met}});
  }
  j["targets"] = tj;
  json fj = json::array();
  for (const auto& f : failovers) {
    json each = json::array();
    for (const auto& fr : f.runs) {
      each.push_back(
          {{"killed", fr.killed}, {"ms", fr.ms}, {"via", fr.via}, {"killed_as", fr.killed_as}});
    }
    fj.push_back({{"system", f.system},
                  {"version", f.version},
                  {"durability", f.durability},
                  {"setting", f.setting},
                  {"skipped", f.skipped},
                  {"error", f.error},
                  {"clients", f.clients},
                  {"writes", f.writes},
                  {"median_ms", num(f.median_ms)},
                  {"max_ms", num(f.max_ms)},
                  {"runs", each}});
  }
  j["failover"] = fj;
  if (o.cluster > 0) {
    json cj = json::array();
    for (const auto& row : cluster_rows(runs, failovers)) {
      cj.push_back({{"measure", row.what},
                    {"lower_is_better", row.lower_is_better},
                    {"onceq_synced", opt(row.onceq_synced)},
                    {"onceq_default", opt(row.onceq_default)},
                    {"nats", opt(row.nats)},
                    {"onceq_synced_over_nats", opt(over(row.onceq_synced, row.nats))},
                    {"onceq_default_over_nats", opt(over(row.onceq_default, row.nats))}});
    }
    j["cluster_comparison"] = cj;
  }
  return j;
}

}  // namespace onceq::bench
