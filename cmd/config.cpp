#include "cmd/config.hpp"

#include <charconv>
#include <limits>
#include <optional>

#include <fmt/format.h>

namespace onceq::cmd {

namespace {

std::optional<std::int64_t> parse_int(std::string_view s, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  if (s.empty() || s.front() == '+') return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

error bad_flag(std::string_view flag, std::string_view why) {
  return make_error(errc::invalid_argument, fmt::format("{}: {}", flag, why));
}

// "HOST:PORT" or "[v6]:PORT".
result<void> parse_listen(std::string_view v, http::http_options& o) {
  std::string_view host, port;
  if (!v.empty() && v.front() == '[') {
    auto close = v.find(']');
    if (close == std::string_view::npos || close + 1 >= v.size() || v[close + 1] != ':') {
      return bad_flag("--listen", "expected HOST:PORT or [IPv6]:PORT");
    }
    host = v.substr(1, close - 1);
    port = v.substr(close + 2);
  } else {
    auto colon = v.rfind(':');
    if (colon == std::string_view::npos) return bad_flag("--listen", "expected HOST:PORT");
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
  }
  auto p = parse_int(port, 0, 65535);
  if (host.empty() || !p) return bad_flag("--listen", "expected HOST:PORT with PORT 0..65535");
  o.host = std::string(host);
  o.port = static_cast<std::uint16_t>(*p);
  return {};
}

}  // namespace

std::string usage() {
  const config d;
  return fmt::format(
      "usage: onceqd [flags]\n"
      "\n"
      "onceq: a lease-based message broker over HTTP (API: docs/API.md).\n"
      "\n"
      "flags (\"--flag value\" or \"--flag=value\"):\n"
      "  --listen HOST:PORT       address to serve on; port 0 picks a free one (default {}:{})\n"
      "  --data-dir DIR           RocksDB directory, created if missing (default {})\n"
      "  --fsync POLICY           always | interval:<ms> | none (default {})\n"
      "  --threads N              HTTP I/O threads, 1..256 (default {})\n"
      "  --max-body-bytes N       largest request body; larger gets 413 (default {})\n"
      "  --max-header-bytes N     largest request header block (default {})\n"
      "  --idle-timeout-ms N      close a kept-alive connection idle this long (default {})\n"
      "  --max-queue N            commands queued for the core before 429 (default {})\n"
      "  --default-lease-ms N     lease_ms of topics created without one (default {})\n"
      "  --max-backlog-messages N max_backlog_messages of topics created without one;\n"
      "                           0 is unlimited (default {})\n"
      "  --max-backlog-bytes N    max_backlog_bytes of topics created without one;\n"
      "                           0 is unlimited (default {})\n"
      "  --max-inflight N         max_inflight of topics created without one; 0 is\n"
      "                           unlimited (default {})\n"
      "  --auth-file FILE         bearer tokens with scopes and topics (docs/SECURITY.md);\n"
      "                           reread on SIGHUP (default: none, every route open)\n"
      "  --block-cache-mb N       RocksDB block cache size in MiB (default {})\n"
      "  --write-buffer-mb N      RocksDB memtable size per column family in MiB (default {})\n"
      "  --message-cache-mb N     recently produced messages kept in memory, MiB (default {})\n"
      "  --wal-prezero-kb N       zeros kept written ahead of the WAL's end, KiB; 0 is off\n"
      "                           (default {})\n"
      "  --shutdown-grace-ms N    at SIGTERM, how long open requests may finish (default {})\n"
      "  --max-connections N      connections past this are closed at accept (default {})\n"
      "  --header-timeout-ms N    a request header block must arrive within this (default {})\n"
      "  --tls-cert FILE          serve HTTPS: PEM certificate chain (needs --tls-key)\n"
      "  --tls-key FILE           PEM private key of --tls-cert\n"
      "  --help                   print this and exit\n"
      "  --version                print the version and exit\n"
      "\n"
      "On start, once ready, prints one line: onceqd listening on <host>:<port>\n"
      "SIGTERM or SIGINT shuts down cleanly (exit 0); SIGHUP rereads --auth-file.\n"
      "Bad flags, a bad auth file or bad TLS files exit 2; a storage or listen\n"
      "failure exits 1.\n",
      d.http.host, d.http.port, d.storage.data_dir, d.storage.fsync.to_string(), d.http.threads,
      d.http.max_body_bytes, d.http.max_header_bytes, d.http.idle_timeout_ms,
      d.http.max_queue_depth, d.http.topic_defaults.lease_ms,
      d.http.topic_defaults.max_backlog_messages, d.http.topic_defaults.max_backlog_bytes,
      d.http.topic_defaults.max_inflight, d.storage.block_cache_bytes >> 20,
      d.storage.write_buffer_bytes >> 20, d.broker.message_cache_bytes >> 20,
      d.storage.wal_prezero_bytes >> 10, d.shutdown_grace_ms, d.http.max_connections,
      d.http.header_timeout_ms);
}

result<config> parse_args(const std::vector<std::string_view>& args) {
  config c;
  constexpr std::int64_t k_max = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    std::optional<std::string_view> inline_value;
    if (auto eq = flag.find('='); flag.starts_with("--") && eq != std::string_view::npos) {
      inline_value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "--help" || flag == "-h") {
      c.show_help = true;
      continue;
    }
    if (flag == "--version") {
      c.show_version = true;
      continue;
    }
    if (!flag.starts_with("--")) {
      return make_error(errc::invalid_argument, fmt::format("unexpected argument '{}'", flag));
    }
    std::string_view value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      // Known flags all take a value; unknown ones are reported as unknown below.
      value = {};
      if (flag == "--listen" || flag == "--data-dir" || flag == "--fsync" || flag == "--threads" ||
          flag == "--max-body-bytes" || flag == "--max-header-bytes" ||
          flag == "--idle-timeout-ms" || flag == "--max-queue" || flag == "--default-lease-ms" ||
          flag == "--block-cache-mb" || flag == "--write-buffer-mb" ||
          flag == "--message-cache-mb" || flag == "--wal-prezero-kb" ||
          flag == "--shutdown-grace-ms" || flag == "--max-backlog-messages" ||
          flag == "--max-backlog-bytes" || flag == "--max-inflight" || flag == "--auth-file" ||
          flag == "--max-connections" || flag == "--header-timeout-ms" || flag == "--tls-cert" ||
          flag == "--tls-key") {
        return bad_flag(flag, "needs a value");
      }
    }
    auto number = [&](std::int64_t lo, std::int64_t hi) -> result<std::int64_t> {
      auto v = parse_int(value, lo, hi);
      if (!v) {
        return bad_flag(flag, hi == k_max ? fmt::format("expected an integer >= {}", lo)
                                          : fmt::format("expected an integer {}..{}", lo, hi));
      }
      return *v;
    };
    if (flag == "--listen") {
      ONCEQ_TRY(parse_listen(value, c.http));
    } else if (flag == "--data-dir") {
      if (value.empty()) return bad_flag(flag, "needs a directory");
      c.storage.data_dir = std::string(value);
    } else if (flag == "--fsync") {
      auto p = storage::fsync_policy::parse(value);
      if (!p.ok()) return bad_flag(flag, p.err().message);
      c.storage.fsync = *p;
    } else if (flag == "--threads") {
      auto v = number(1, 256);
      if (!v.ok()) return std::move(v).err();
      c.http.threads = static_cast<unsigned>(*v);
    } else if (flag == "--max-body-bytes") {
      auto v = number(1, 1ll << 30);
      if (!v.ok()) return std::move(v).err();
      c.http.max_body_bytes = static_cast<std::size_t>(*v);
    } else if (flag == "--max-header-bytes") {
      auto v = number(1024, 1ll << 20);
      if (!v.ok()) return std::move(v).err();
      c.http.max_header_bytes = static_cast<std::size_t>(*v);
    } else if (flag == "--idle-timeout-ms") {
      auto v = number(1, k_max);
      if (!v.ok()) return std::move(v).err();
      c.http.idle_timeout_ms = *v;
    } else if (flag == "--max-queue") {
      auto v = number(1, 100'000'000);
      if (!v.ok()) return std::move(v).err();
      c.http.max_queue_depth = static_cast<std::size_t>(*v);
      // The runner's own limit stays above the HTTP one: long-poll and stream
      // polls that got past the check must not be refused.
      c.runner.max_queue = static_cast<std::size_t>(*v) * 2;
    } else if (flag == "--default-lease-ms") {
      auto v = number(1, c.broker.max_lease_ms);
      if (!v.ok()) return std::move(v).err();
      c.http.topic_defaults.lease_ms = *v;
    } else if (flag == "--max-backlog-messages") {
      auto v = number(0, k_max);
      if (!v.ok()) return std::move(v).err();
      c.http.topic_defaults.max_backlog_messages = *v;
    } else if (flag == "--max-backlog-bytes") {
      auto v = number(0, k_max);
      if (!v.ok()) return std::move(v).err();
      c.http.topic_defaults.max_backlog_bytes = *v;
    } else if (flag == "--max-inflight") {
      auto v = number(0, k_max);
      if (!v.ok()) return std::move(v).err();
      c.http.topic_defaults.max_inflight = *v;
    } else if (flag == "--auth-file") {
      if (value.empty()) return bad_flag(flag, "needs a file");
      c.auth_file = std::string(value);
    } else if (flag == "--block-cache-mb") {
      auto v = number(0, 1ll << 20);
      if (!v.ok()) return std::move(v).err();
      c.storage.block_cache_bytes = static_cast<std::size_t>(*v) << 20;
    } else if (flag == "--write-buffer-mb") {
      auto v = number(1, 1ll << 16);
      if (!v.ok()) return std::move(v).err();
      c.storage.write_buffer_bytes = static_cast<std::size_t>(*v) << 20;
    } else if (flag == "--message-cache-mb") {
      auto v = number(0, 1ll << 20);
      if (!v.ok()) return std::move(v).err();
      c.broker.message_cache_bytes = static_cast<std::size_t>(*v) << 20;
    } else if (flag == "--wal-prezero-kb") {
      auto v = number(0, 1 << 20);
      if (!v.ok()) return std::move(v).err();
      c.storage.wal_prezero_bytes = static_cast<std::size_t>(*v) << 10;
    } else if (flag == "--shutdown-grace-ms") {
      auto v = number(0, k_max);
      if (!v.ok()) return std::move(v).err();
      c.shutdown_grace_ms = *v;
    } else if (flag == "--max-connections") {
      auto v = number(1, 10'000'000);
      if (!v.ok()) return std::move(v).err();
      c.http.max_connections = static_cast<std::size_t>(*v);
    } else if (flag == "--header-timeout-ms") {
      auto v = number(1, k_max);
      if (!v.ok()) return std::move(v).err();
      c.http.header_timeout_ms = *v;
    } else if (flag == "--tls-cert" || flag == "--tls-key") {
      if (value.empty()) return bad_flag(flag, "needs a file");
      (flag == "--tls-cert" ? c.http.tls_cert_file : c.http.tls_key_file) = std::string(value);
    } else {
      return make_error(errc::invalid_argument, fmt::format("unknown flag '{}'", flag));
    }
  }
  if (c.http.tls_cert_file.empty() != c.http.tls_key_file.empty()) {
    return bad_flag(c.http.tls_cert_file.empty() ? "--tls-key" : "--tls-cert",
                    "needs both --tls-cert and --tls-key");
  }
  return c;
}

}  // namespace onceq::cmd
