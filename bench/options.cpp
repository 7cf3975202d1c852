#include "bench/options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace onceq::bench {
namespace {

constexpr std::string_view k_usage = R"(usage: onceq-bench [flags]
  --systems onceq,nats,redis     systems to drive
  --workloads w1,w2,w3,w4        w1 produce only (batched + one per request),
                                 w2 drain a backlog (batch fetch + ack, acks
                                 carried on the next fetch, streaming consume),
                                 w3 produce+consume (plus a fixed-rate run on a
                                 fresh server and one after --history messages),
                                 w4 = w3 with duplicates and unacked deliveries;
                                 w5 workflow steps (onceq only, not in the
                                 default): drain topic A, each delivery acked
                                 and one message produced to topic B, by one
                                 ack with `produce` / by a produce then an ack;
                                 w6 (onceq only, not in the default): w2-drain
                                 over --order-keys keys, topic "ordering":"key"
                                 against "ordering":"none";
                                 none: only the failover runs
  --durability synced,default    durability levels
  --messages N                   unique messages per run (200000)
  --single-messages N            messages for one-per-request produce (messages/4)
  --producers N --consumers N    threads, one connection each (4, 4)
  --single-producers N           producers of the one-per-request run (64): the
                                 webhook shape, many connections, one message each
  --batch N                      produce batch size and consume max (100)
  --rate N --rate-seconds S      W3 fixed-rate run (10000 msg/s for 5 s; 0 skips)
  --rate-batch N                 messages per produce call in the fixed-rate run (10)
  --history N                    messages moved through the server (untimed
                                 produce+consume+ack) before w3-rate-aged (1000000;
                                 0 skips that row)
  --payload BYTES                payload size (256, min 32)
  --partitions N                 onceq topic partitions (4)
  --order-keys N                 w6: distinct ordering keys (message `key`) (1000)
  --topics N                     onceq only, w1 only: producer i writes topic
                                 i mod N (1), so that --shards spreads the load
  --duplicates R --no-ack R      W4 ratios (0.1, 0.1)
  --lease-ms MS                  W4 lease / AckWait / claim idle (1000)
  --wait-ms MS                   long-poll wait per fetch (100)
  --time-limit S                 cap per measured phase (120)
  --cluster N                    onceq and JetStream as N-node clusters on loopback
                                 (3..7; 0 = one server each, the default): onceqd
                                 --cluster, nats-server routes and an R N stream;
                                 Redis is not run
  --cluster-clients leader|spread
                                 cluster clients connect to the leader of the
                                 topic's shard / of the stream (leader, default),
                                 or client i to node i mod N (spread)
  --failover-runs N              cluster only: N times, kill -9 the leader under a
                                 one-message-per-request write load, time the kill
                                 to the first acknowledged write, restart the node
                                 and wait until it has caught up (0 = skip)
  --failover-attempt-ms MS       failover probe: deadline of one write attempt (250)
  --failover-retry-ms MS         failover probe: pause before retrying a refusal (10)
  --onceqd PATH                  server binary (<bench dir>/../cmd/onceqd)
  --onceqd-args "ARGS"           more onceqd flags, e.g. "--shards 1 --wal-sync loop"
  --onceq-default-fsync POLICY   onceq's policy at durability "default" (interval:10)
  --nats-server PATH --redis-server PATH
  --tmp DIR                      parent of the per-run data dirs (/tmp)
  --keep-data                    keep data dirs and server logs
  --out-json FILE --out-md FILE  reports (Markdown also goes to stdout)
)";

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    const auto item = s.substr(0, comma);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc{} && ptr == end;
}

std::string default_onceqd() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "onceqd";
  return (self.parent_path() / ".." / "cmd" / "onceqd").lexically_normal().string();
}

// The field of a flag whose value is taken as it is, or null.
std::string* text_flag(bench_options& o, std::string_view flag) {
  const std::pair<std::string_view, std::string*> flags[] = {
      {"--onceqd", &o.onceqd},
      {"--onceq-default-fsync", &o.onceq_default_fsync},
      {"--nats-server", &o.nats_server},
      {"--redis-server", &o.redis_server},
      {"--tmp", &o.tmp_root},
      {"--out-json", &o.out_json},
      {"--out-md", &o.out_md}};
  for (const auto& [name, field] : flags) {
    if (name == flag) return field;
  }
  return nullptr;
}

}  // namespace

std::string_view to_string(durability d) {
  return d == durability::synced ? "synced" : "default";
}

std::optional<bench_options> parse_options(int argc, char** argv, std::string& error) {
  bench_options o;
  o.onceqd = default_onceqd();
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.command_line += ' ';
    o.command_line += argv[i];
  }

  bool systems_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    std::string_view value;
    bool has_inline = false;
    if (const auto eq = flag.find('='); eq != std::string_view::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_inline = true;
    }
    if (flag == "--help" || flag == "-h") {
      std::fputs(k_usage.data(), stdout);
      error.clear();
      return std::nullopt;
    }
    if (flag == "--keep-data") {
      o.keep_data = true;
      continue;
    }
    if (!has_inline) {
      if (i + 1 >= argc) {
        error = fmt::format("flag {} needs a value", flag);
        return std::nullopt;
      }
      value = argv[++i];
    }
    bool ok = true;
    if (flag == "--systems") {
      o.systems = split_list(value);
      systems_given = true;
      for (const auto& s : o.systems) ok = ok && (s == "onceq" || s == "nats" || s == "redis");
    } else if (flag == "--workloads") {
      o.workloads = value == "none" ? std::vector<std::string>{} : split_list(value);
      for (const auto& w : o.workloads)
        ok = ok && (w == "w1" || w == "w2" || w == "w3" || w == "w4" || w == "w5" || w == "w6");
    } else if (flag == "--durability") {
      o.durabilities.clear();
      for (const auto& d : split_list(value)) {
        if (d == "synced") {
          o.durabilities.push_back(durability::synced);
        } else if (d == "default") {
          o.durabilities.push_back(durability::fallback);
        } else {
          ok = false;
        }
      }
    } else if (flag == "--messages") {
      ok = parse_number(value, o.messages) && o.messages > 0;
    } else if (flag == "--single-messages") {
      ok = parse_number(value, o.single_messages);
    } else if (flag == "--history") {
      ok = parse_number(value, o.history);
    } else if (flag == "--single-producers") {
      ok = parse_number(value, o.single_producers) && o.single_producers > 0 &&
           o.single_producers <= 256;
    } else if (flag == "--producers") {
      ok = parse_number(value, o.producers) && o.producers > 0 && o.producers <= 256;
    } else if (flag == "--consumers") {
      ok = parse_number(value, o.consumers) && o.consumers > 0 && o.consumers <= 256;
    } else if (flag == "--batch") {
      ok = parse_number(value, o.batch) && o.batch > 0 && o.batch <= 1000;
    } else if (flag == "--rate") {
      ok = parse_number(value, o.rate);
    } else if (flag == "--rate-batch") {
      ok = parse_number(value, o.rate_batch) && o.rate_batch > 0 && o.rate_batch <= 1000;
    } else if (flag == "--rate-seconds") {
      ok = parse_number(value, o.rate_seconds) && o.rate_seconds > 0;
    } else if (flag == "--payload") {
      ok = parse_number(value, o.payload) && o.payload >= 32 && o.payload <= 1 << 20;
    } else if (flag == "--partitions") {
      ok = parse_number(value, o.partitions) && o.partitions > 0;
    } else if (flag == "--order-keys") {
      ok = parse_number(value, o.order_keys) && o.order_keys > 0;
    } else if (flag == "--topics") {
      ok = parse_number(value, o.topics) && o.topics > 0 && o.topics <= 256;
    } else if (flag == "--duplicates") {
      ok =
          parse_number(value, o.duplicate_ratio) && o.duplicate_ratio >= 0 && o.duplicate_ratio < 1;
    } else if (flag == "--no-ack") {
      ok = parse_number(value, o.no_ack_ratio) && o.no_ack_ratio >= 0 && o.no_ack_ratio < 1;
    } else if (flag == "--lease-ms") {
      ok = parse_number(value, o.lease_ms) && o.lease_ms >= 100;
    } else if (flag == "--wait-ms") {
      ok = parse_number(value, o.wait_ms) && o.wait_ms >= 0 && o.wait_ms <= 60000;
    } else if (flag == "--time-limit") {
      ok = parse_number(value, o.time_limit_s) && o.time_limit_s > 0;
    } else if (flag == "--cluster") {
      ok = parse_number(value, o.cluster) && (o.cluster == 0 || (o.cluster >= 3 && o.cluster <= 7));
    } else if (flag == "--cluster-clients") {
      ok = value == "leader" || value == "spread";
      o.cluster_spread = value == "spread";
    } else if (flag == "--failover-runs") {
      ok = parse_number(value, o.failover_runs) && o.failover_runs >= 0 && o.failover_runs <= 1000;
    } else if (flag == "--failover-attempt-ms") {
      ok = parse_number(value, o.failover_attempt_ms) && o.failover_attempt_ms >= 10 &&
           o.failover_attempt_ms <= 60000;
    } else if (flag == "--failover-retry-ms") {
      ok = parse_number(value, o.failover_retry_ms) && o.failover_retry_ms >= 0 &&
           o.failover_retry_ms <= 10000;
    } else if (flag == "--onceqd-args") {
      o.onceqd_args.clear();
      std::size_t at = 0;
      while (at < value.size()) {
        const auto end = std::min(value.find(' ', at), value.size());
        if (end > at) o.onceqd_args.emplace_back(value.substr(at, end - at));
        at = end + 1;
      }
    } else if (std::string* field = text_flag(o, flag)) {
      *field = value;
    } else {
      error = fmt::format("unknown flag {} (see --help)", flag);
      return std::nullopt;
    }
    if (!ok) {
      error = fmt::format("bad value for {}: '{}'", flag, value);
      return std::nullopt;
    }
  }
  if (o.cluster > 0) {
    const bool redis = std::find(o.systems.begin(), o.systems.end(), "redis") != o.systems.end();
    if (redis && systems_given) {
      error = "--cluster: Redis has no cluster mode here; pass --systems onceq,nats";
      return std::nullopt;
    }
    std::erase(o.systems, "redis");
  }
  if (o.failover_runs > 0 && o.cluster == 0) {
    error = "--failover-runs needs --cluster N";
    return std::nullopt;
  }
  if (o.single_messages == 0) o.single_messages = std::max<std::size_t>(1, o.messages / 4);
  if (o.topics > 1 && (o.workloads.size() != 1 || o.workloads.front() != "w1")) {
    error = "--topics above 1 needs --workloads w1 (its consumers read one topic)";
    return std::nullopt;
  }
  return o;
}

}  // namespace onceq::bench
