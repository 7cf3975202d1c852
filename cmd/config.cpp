#include "cmd/config.hpp"

#include <toml++/toml.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

namespace onceq::cmd {

unsigned default_shards() {
  return std::clamp(std::thread::hardware_concurrency(), 1u, 256u);
}

namespace {

constexpr std::int64_t k_max = std::numeric_limits<std::int64_t>::max();

std::optional<std::int64_t> parse_int(std::string_view s, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  if (s.empty() || s.front() == '+') return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

// "HOST:PORT" or "[v6]:PORT"; the reason when it is neither.
std::optional<std::string> parse_listen(std::string_view v, http::http_options* o) {
  std::string_view host, port;
  if (!v.empty() && v.front() == '[') {
    auto close = v.find(']');
    if (close == std::string_view::npos || close + 1 >= v.size() || v[close + 1] != ':') {
      return "expected HOST:PORT or [IPv6]:PORT";
    }
    host = v.substr(1, close - 1);
    port = v.substr(close + 2);
  } else {
    auto colon = v.rfind(':');
    if (colon == std::string_view::npos) return "expected HOST:PORT";
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
  }
  auto p = parse_int(port, 0, 65535);
  if (host.empty() || !p) return "expected HOST:PORT with PORT 0..65535";
  if (o != nullptr) {
    o->host = std::string(host);
    o->port = static_cast<std::uint16_t>(*p);
  }
  return std::nullopt;
}

// ---- Declarations: one per flag, with its range and its --help text ----

// A flag taking an integer lo..hi: checked by CLI11 before set runs.
void add_int(CLI::App& app, const std::string& name, const std::string& metavar,
             const std::string& help, std::int64_t lo, std::int64_t hi,
             std::function<void(std::int64_t)> set) {
  app.add_option_function<std::string>(
         name, [lo, hi, set = std::move(set)](const std::string& v) { set(*parse_int(v, lo, hi)); },
         help)
      ->option_text(metavar)
      ->check(CLI::Validator(
          [lo, hi](std::string& v) -> std::string {
            if (parse_int(v, lo, hi)) return {};
            return hi == k_max ? fmt::format("expected an integer >= {}", lo)
                               : fmt::format("expected an integer {}..{}", lo, hi);
          },
          ""));
}

// A flag whose value is a byte count in units of 1 << shift (MiB: 20,
// KiB: 10); "(default N)" follows help, N in those units.
void add_bytes(CLI::App& app, const std::string& name, const std::string& help, int shift,
               std::int64_t lo, std::int64_t hi, std::size_t default_bytes, std::size_t& target) {
  const char* space = help.ends_with('\n') ? "" : " ";
  add_int(app, name, "N", fmt::format("{}{}(default {})", help, space, default_bytes >> shift), lo,
          hi, [&target, shift](std::int64_t v) { target = static_cast<std::size_t>(v) << shift; });
}

// A flag taking a string; check returns the reason a value is refused.
void add_text(CLI::App& app, const std::string& name, const std::string& metavar,
              const std::string& help,
              std::function<std::optional<std::string>(std::string_view)> check,
              std::function<void(const std::string&)> set) {
  app.add_option_function<std::string>(name, std::move(set), help)
      ->option_text(metavar)
      ->check(CLI::Validator([check = std::move(check)](std::string& v)
                                 -> std::string { return check(v).value_or(std::string{}); },
                             ""));
}

std::optional<std::string> non_empty(std::string_view what, std::string_view v) {
  if (v.empty()) return fmt::format("needs {}", what);
  return std::nullopt;
}

// A flag naming a file (not empty).
void add_file(CLI::App& app, const std::string& name, const std::string& help,
              std::string& target) {
  add_text(
      app, name, "FILE", help, [](std::string_view v) { return non_empty("a file", v); },
      [&target](const std::string& v) { target = v; });
}

// The whole command line, bound to c. d holds the defaults shown by --help.
std::unique_ptr<CLI::App> make_app(config& c) {
  const config d;
  auto app = std::make_unique<CLI::App>("onceqd", "onceqd");
  app->set_help_flag();  // --help is ours: it sets show_help, usage() prints it
  app->allow_windows_style_options(false);
  // A flag given twice (or in the file and on the command line): the last wins.
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& a = *app;
  using i64 = std::int64_t;

  add_file(a, "--config", "read settings from a TOML file first; flags override it", c.config_file);
  add_text(
      a, "--listen", "HOST:PORT",
      fmt::format("address to serve on; port 0 picks a free one (default {}:{})", d.http.host,
                  d.http.port),
      [](std::string_view v) { return parse_listen(v, nullptr); },
      [&c](const std::string& v) { parse_listen(v, &c.http); });
  add_text(
      a, "--data-dir", "DIR",
      fmt::format("RocksDB directory, created if missing (default {})", d.storage.data_dir),
      [](std::string_view v) { return non_empty("a directory", v); },
      [&c](const std::string& v) { c.storage.data_dir = v; });
  add_text(
      a, "--fsync", "POLICY",
      fmt::format("always | interval:<ms> | none (default {})", d.storage.fsync.to_string()),
      [](std::string_view v) -> std::optional<std::string> {
        auto p = storage::fsync_policy::parse(v);
        if (!p.ok()) return p.err().message;
        return std::nullopt;
      },
      [&c](const std::string& v) { c.storage.fsync = *storage::fsync_policy::parse(v); });
  add_int(a, "--shards", "N",
          fmt::format("shards, each with its own event-loop thread and store, 1..256\n"
                      "(default: the number of cores, {} here)",
                      d.shards),
          1, 256, [&c](i64 v) {
            c.shards = static_cast<unsigned>(v);
            c.shards_given = true;
          });
  add_file(a, "--cluster",
           "run as a node of the cluster in this TOML file (docs/REPLICATION.md);\n"
           "the node serves its API on the file's http address (not --listen)",
           c.cluster_file);
  add_text(
      a, "--node-id", "ID", "this node's id in the --cluster file",
      [](std::string_view v) { return non_empty("a node id", v); },
      [&c](const std::string& v) { c.node_id = v; });
  add_int(a, "--election-timeout-ms", "MS",
          fmt::format("cluster: raft's election timeout, randomised to 1-2x, 100..60000\n"
                      "(default {})",
                      d.election_timeout_ms),
          100, 60'000, [&c](i64 v) { c.election_timeout_ms = static_cast<unsigned>(v); });
  add_int(a, "--leader-grace-ms", "MS",
          fmt::format("cluster: a new leader stamps commands this far behind its clock\n"
                      "while earlier leases may run (clock skew absorbed), 0..60000 (default {})",
                      d.leader_grace_ms),
          0, 60'000, [&c](i64 v) { c.leader_grace_ms = static_cast<unsigned>(v); });
  add_int(a, "--raft-snapshot-every", "N",
          fmt::format("cluster: applied entries between two snapshots of a shard, 64..10000000\n"
                      "(default {})",
                      d.raft_snapshot_every),
          64, 10'000'000, [&c](i64 v) { c.raft_snapshot_every = static_cast<unsigned>(v); });
  add_int(a, "--raft-segment-mib", "MIB",
          fmt::format("cluster: size of a shard's open raft log segments; raft keeps three\n"
                      "per shard and reads them whole at start, 8..1024 (default {})",
                      d.raft_segment_mib),
          8, 1024, [&c](i64 v) { c.raft_segment_mib = static_cast<unsigned>(v); });
  add_text(
      a, "--wal-sync", "WHERE",
      fmt::format("who syncs the WAL under --fsync always: loop (each shard's loop,\n"
                  "once per iteration) | syncer (a thread per shard) (default {})",
                  d.storage.sync_on_caller ? "loop" : "syncer"),
      [](std::string_view v) -> std::optional<std::string> {
        if (v == "loop" || v == "syncer") return std::nullopt;
        return "expected loop or syncer";
      },
      [&c](const std::string& v) { c.storage.sync_on_caller = v == "loop"; });
  add_int(a, "--threads", "N",
          "ignored since 0.2 (each shard's loop serves connections: see\n--shards); 1..256", 1, 256,
          [&c](i64 v) { c.http.threads = static_cast<unsigned>(v); });
  add_int(a, "--max-body-bytes", "N",
          fmt::format("largest request body; larger gets 413 (default {})", d.http.max_body_bytes),
          1, 1ll << 30, [&c](i64 v) { c.http.max_body_bytes = static_cast<std::size_t>(v); });
  add_int(a, "--max-header-bytes", "N",
          fmt::format("largest request header block (default {})", d.http.max_header_bytes), 1024,
          1ll << 20, [&c](i64 v) { c.http.max_header_bytes = static_cast<std::size_t>(v); });
  add_int(a, "--idle-timeout-ms", "N",
          fmt::format("close a kept-alive connection idle this long (default {})",
                      d.http.idle_timeout_ms),
          1, k_max, [&c](i64 v) { c.http.idle_timeout_ms = v; });
  add_int(
      a, "--max-queue", "N",
      fmt::format("commands queued for the core before 429 (default {})", d.http.max_queue_depth),
      1, 100'000'000, [&c](i64 v) {
        c.http.max_queue_depth = static_cast<std::size_t>(v);
        // The shards' own limit stays above the HTTP one: long-poll and
        // stream polls that got past the check must not be refused.
        c.shard.max_queue = static_cast<std::size_t>(v) * 2;
      });
  add_int(a, "--default-lease-ms", "N",
          fmt::format("lease_ms of topics created without one (default {})",
                      d.http.topic_defaults.lease_ms),
          1, d.broker.max_lease_ms, [&c](i64 v) { c.http.topic_defaults.lease_ms = v; });
  add_int(a, "--max-backlog-messages", "N",
          fmt::format("max_backlog_messages of topics created without one;\n0 is unlimited "
                      "(default {})",
                      d.http.topic_defaults.max_backlog_messages),
          0, k_max, [&c](i64 v) { c.http.topic_defaults.max_backlog_messages = v; });
  add_int(a, "--max-backlog-bytes", "N",
          fmt::format("max_backlog_bytes of topics created without one;\n0 is unlimited "
                      "(default {})",
                      d.http.topic_defaults.max_backlog_bytes),
          0, k_max, [&c](i64 v) { c.http.topic_defaults.max_backlog_bytes = v; });
  add_int(a, "--max-inflight", "N",
          fmt::format("max_inflight of topics created without one; 0 is\nunlimited (default {})",
                      d.http.topic_defaults.max_inflight),
          0, k_max, [&c](i64 v) { c.http.topic_defaults.max_inflight = v; });
  add_file(a, "--auth-file",
           "bearer tokens with scopes and topics (docs/SECURITY.md);\nreread on SIGHUP (default: "
           "none, every route open)",
           c.auth_file);
  add_bytes(a, "--block-cache-mb", "RocksDB block cache size in MiB", 20, 0, 1ll << 20,
            d.storage.block_cache_bytes, c.storage.block_cache_bytes);
  add_bytes(a, "--write-buffer-mb", "RocksDB memtable size per column family in MiB", 20, 1,
            1ll << 16, d.storage.write_buffer_bytes, c.storage.write_buffer_bytes);
  add_bytes(a, "--message-cache-mb", "recently produced messages kept in memory, MiB", 20, 0,
            1ll << 20, d.broker.message_cache_bytes, c.broker.message_cache_bytes);
  add_bytes(a, "--wal-prezero-kb", "zeros kept written ahead of the WAL's end, KiB; 0 is off\n", 10,
            0, 1 << 20, d.storage.wal_prezero_bytes, c.storage.wal_prezero_bytes);
  add_int(a, "--shutdown-grace-ms", "N",
          fmt::format("at SIGTERM, how long open requests may finish (default {})",
                      d.shutdown_grace_ms),
          0, k_max, [&c](i64 v) { c.shutdown_grace_ms = v; });
  add_int(a, "--max-connections", "N",
          fmt::format("connections past this are closed at accept (default {})",
                      d.http.max_connections),
          1, 10'000'000, [&c](i64 v) { c.http.max_connections = static_cast<std::size_t>(v); });
  add_int(a, "--header-timeout-ms", "N",
          fmt::format("a request header block must arrive within this (default {})",
                      d.http.header_timeout_ms),
          1, k_max, [&c](i64 v) { c.http.header_timeout_ms = v; });
  add_file(a, "--tls-cert", "serve HTTPS: PEM certificate chain (needs --tls-key)",
           c.http.tls_cert_file);
  add_file(a, "--tls-key", "PEM private key of --tls-cert", c.http.tls_key_file);
  add_text(
      a, "--log-level", "LEVEL",
      fmt::format("debug | info | warn | error (default {})", to_string(d.log.level)),
      [](std::string_view v) -> std::optional<std::string> {
        if (parse_log_level(v)) return std::nullopt;
        return "expected debug, info, warn or error";
      },
      [&c](const std::string& v) { c.log.level = *parse_log_level(v); });
  add_text(
      a, "--log-format", "FORMAT", "json | text: stderr log lines (default json)",
      [](std::string_view v) -> std::optional<std::string> {
        if (parse_log_format(v)) return std::nullopt;
        return "expected json or text";
      },
      [&c](const std::string& v) { c.log.format = *parse_log_format(v); });
  a.add_flag("--join", c.join,
             "cluster: this node was added to the file of a running cluster:\nbootstrap no "
             "Raft group, wait to be added (default off)");
  a.add_flag("--apply-trace", c.apply_trace,
             "cluster: log each applied entry's index, tag and write digest\nto "
             "<data-dir>/apply-trace-<shard>.log, to compare replicas (default off)");
  a.add_flag("--access-log", c.http.access_log,
             "log every request: method, path, query keys, status,\nduration, bytes, request id "
             "(default off)");
  a.add_flag(
      "--no-migrate-connections{false}", c.http.migrate_connections,
      "keep each connection on the loop that accepted it, even when\nits requests go to another "
      "shard's topics (default: move it there)");
  a.add_flag("--no-spread-connections{false}", c.http.spread_connections,
             "never move a connection off a saturated loop to one with room,\nnor keep one off a "
             "busy loop: connections only migrate (default: spread)");
  a.add_flag("--help,-h", c.show_help, "print this and exit");
  a.add_flag("--version", c.show_version, "print the version and exit");
  return app;
}

bool is_cli_only(std::string_view name) {
  return name == "--config" || name == "--help" || name == "--version";
}

// Runs one parse; CLI11's messages already start with the flag's name.
result<void> run_parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    std::string what = e.what();
    return make_error(errc::invalid_argument,
                      fmt::format("{}: needs a value", what.substr(0, what.find(':'))));
  } catch (const CLI::ExtrasError& e) {
    return make_error(
        errc::invalid_argument,
        fmt::format("unknown flag or argument: {}",
                    std::string(e.what()).substr(std::string(e.what()).find(':') + 1)));
  } catch (const CLI::ParseError& e) {
    return make_error(errc::invalid_argument, e.what());
  }
  return {};
}

// The file's settings as "--key=value" arguments, each checked on its own
// so that an error names the file and the key.
result<std::vector<std::string>> read_config_file(const std::string& path) {
  auto bad = [&](std::string_view key, std::string_view why) -> error {
    return make_error(errc::invalid_argument, fmt::format("{}: {}: {}", path, key, why));
  };
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return make_error(errc::invalid_argument,
                      fmt::format("{}:{}:{}: {}", path, where.line, where.column, e.description()));
  }
  const auto keys = config_keys();
  std::vector<std::string> args;
  for (const auto& [k, node] : tbl) {
    const std::string key(k.str());
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return bad(key, "unknown key (keys are the flags' names without --, see onceqd --help)");
    }
    std::string value;
    if (auto s = node.value_exact<std::string>()) {
      value = *s;
    } else if (auto i = node.value_exact<std::int64_t>()) {
      value = std::to_string(*i);
    } else if (auto b = node.value_exact<bool>()) {
      value = *b ? "true" : "false";
    } else {
      return bad(key, "expected a string, an integer or a boolean");
    }
    std::string arg = fmt::format("--{}={}", key, value);
    config scratch;
    auto app = make_app(scratch);
    if (auto r = run_parse(*app, {arg}); !r.ok()) {
      std::string why = r.err().message;
      if (const std::string prefix = "--" + key + ": "; why.starts_with(prefix)) {
        why = why.substr(prefix.size());
      }
      return bad(key, why);
    }
    args.push_back(std::move(arg));
  }
  return args;
}

}  // namespace

std::vector<std::string> config_keys() {
  config c;
  auto app = make_app(c);
  std::vector<std::string> keys;
  for (const CLI::Option* o : app->get_options()) {
    const std::string name = o->get_name();
    if (!is_cli_only(name)) keys.push_back(name.substr(2));
  }
  return keys;
}

std::string usage() {
  config c;
  auto app = make_app(c);
  std::string flags;
  for (const CLI::Option* o : app->get_options()) {
    std::string head = o->get_name();
    if (!o->get_option_text().empty()) head += " " + o->get_option_text();
    std::string text = o->get_description();
    for (std::size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', nl + 1)) {
      text.insert(nl + 1, std::string(27, ' '));
    }
    flags += fmt::format("  {:<24} {}\n", head, text);
  }
  return "usage: onceqd [flags]\n"
         "\n"
         "onceq: a lease-based message broker over HTTP (API: docs/API.md).\n"
         "\n"
         "flags (\"--flag value\" or \"--flag=value\"; in a --config file, \"flag = value\"):\n" +
         flags +
         "\n"
         "On start, once ready, prints one line: onceqd listening on <host>:<port>\n"
         "Logs go to stderr (--log-format). SIGTERM or SIGINT shuts down cleanly (exit 0);\n"
         "SIGHUP rereads --auth-file. Bad flags, a bad --config file, a bad auth file or\n"
         "bad TLS files exit 2; a storage or listen failure exits 1.\n";
}

result<config> parse_args(const std::vector<std::string_view>& args) {
  std::vector<std::string> cli(args.begin(), args.end());
  // First the command line alone: its errors name the flag, and it says
  // which file to read.
  config first;
  {
    auto app = make_app(first);
    ONCEQ_TRY(run_parse(*app, cli));
  }
  if (first.show_help || first.show_version) return first;

  std::vector<std::string> all;
  if (!first.config_file.empty()) {
    auto from_file = read_config_file(first.config_file);
    if (!from_file.ok()) return std::move(from_file).err();
    all = std::move(*from_file);
  }
  // The file's settings, then the command line's: the last value wins.
  all.insert(all.end(), cli.begin(), cli.end());
  config c;
  {
    auto app = make_app(c);
    ONCEQ_TRY(run_parse(*app, std::move(all)));
  }
  if (c.http.tls_cert_file.empty() != c.http.tls_key_file.empty()) {
    return make_error(errc::invalid_argument,
                      fmt::format("{}: needs both --tls-cert and --tls-key",
                                  c.http.tls_cert_file.empty() ? "--tls-key" : "--tls-cert"));
  }
  if (c.cluster_file.empty() != c.node_id.empty()) {
    return make_error(errc::invalid_argument,
                      fmt::format("{}: needs both --cluster and --node-id",
                                  c.cluster_file.empty() ? "--node-id" : "--cluster"));
  }
  if (!c.cluster_file.empty() && !c.shards_given) c.shards = 1;
  return c;
}

}  // namespace onceq::cmd
