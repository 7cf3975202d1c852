#include "http/metrics.hpp"

#include <chrono>
#include <iterator>

#include <fmt/format.h>

namespace onceq::http {

namespace {

constexpr std::size_t k_status_slots = 600;  // HTTP status codes 0..599

void append_family(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// One histogram series: cumulative _bucket lines (the bounds, then +Inf),
// _sum and _count. labels: the series' own ("" or `route="x"`). _count is
// the +Inf bucket, so the two always agree.
void append_histogram(std::string& out, std::string_view name, std::string_view labels,
                      const latency_snapshot& h) {
  auto it = std::back_inserter(out);
  const std::string_view sep = labels.empty() ? "" : ",";
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < latency_snapshot::k_bounds_ns.size(); ++b) {
    cumulative += h.buckets[b];
    fmt::format_to(it, "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep,
                   static_cast<double>(latency_snapshot::k_bounds_ns[b]) / 1e9, cumulative);
  }
  cumulative += h.buckets.back();
  fmt::format_to(it, "{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, cumulative);
  const std::string braced = labels.empty() ? std::string() : fmt::format("{{{}}}", labels);
  fmt::format_to(it, "{}_sum{} {}\n{}_count{} {}\n", name, braced,
                 static_cast<double>(h.sum_ns) / 1e9, name, braced, cumulative);
}

}  // namespace

struct http_metrics::series {
  latency_histogram latency;
  std::array<std::atomic<std::uint64_t>, k_status_slots> statuses{};
};

http_metrics::http_metrics(std::vector<std::string> labels)
    : labels_(std::move(labels)), series_(std::make_unique<series[]>(labels_.size())) {}

http_metrics::~http_metrics() = default;

void http_metrics::observe(std::size_t route, double seconds, unsigned status) noexcept {
  if (route >= labels_.size()) return;
  series& s = series_[route];
  s.latency.observe(std::chrono::nanoseconds(static_cast<std::int64_t>(seconds * 1e9)));
  if (status < k_status_slots) s.statuses[status].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t http_metrics::count(std::size_t route) const noexcept {
  return route < labels_.size() ? series_[route].latency.count() : 0;
}

void http_metrics::render(std::string& out) const {
  auto it = std::back_inserter(out);
  render_connection_metrics(out, *connections_);
  append_family(out, "onceq_http_request_duration_seconds", "histogram",
                "Time from a complete request to its answer, per route.");
  for (std::size_t r = 0; r < labels_.size(); ++r) {
    append_histogram(out, "onceq_http_request_duration_seconds",
                     fmt::format("route=\"{}\"", escape_label(labels_[r])),
                     series_[r].latency.snapshot());
  }
  append_family(out, "onceq_http_responses_total", "counter",
                "Responses sent, per route and status code.");
  for (std::size_t r = 0; r < labels_.size(); ++r) {
    const std::string route = escape_label(labels_[r]);
    for (std::size_t code = 0; code < k_status_slots; ++code) {
      auto n = series_[r].statuses[code].load(std::memory_order_relaxed);
      if (n == 0) continue;
      fmt::format_to(it, "onceq_http_responses_total{{route=\"{}\",code=\"{}\"}} {}\n", route, code,
                     n);
    }
  }
}

std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

void render_broker_metrics(std::string& out, const std::vector<topic_info>& topics, millis now_ms) {
  auto it = std::back_inserter(out);

  append_family(out, "onceq_produced_total", "counter", "Messages stored, per topic.");
  for (const auto& t : topics) {
    fmt::format_to(it, "onceq_produced_total{{topic=\"{}\"}} {}\n", escape_label(t.name),
                   t.produced);
  }
  append_family(out, "onceq_produce_duplicates_total", "counter",
                "Produce requests answered from the dedup window without storing, per topic.");
  for (const auto& t : topics) {
    fmt::format_to(it, "onceq_produce_duplicates_total{{topic=\"{}\"}} {}\n", escape_label(t.name),
                   t.produce_duplicates);
  }

  struct group_family {
    std::string_view name;
    std::string_view type;
    std::string_view help;
    double (*value)(const group_stats&, millis now);
  };
  static constexpr group_family k_groups[] = {
      {"onceq_delivered_total", "counter", "Deliveries (first and later), per topic and group.",
       [](const group_stats& g, millis) { return static_cast<double>(g.delivered); }},
      {"onceq_redelivered_total", "counter",
       "Deliveries of a message delivered before (after a nack or lease expiry).",
       [](const group_stats& g, millis) { return static_cast<double>(g.redelivered); }},
      {"onceq_acked_total", "counter", "Messages acked by a consumer.",
       [](const group_stats& g, millis) { return static_cast<double>(g.acked); }},
      {"onceq_auto_acked_total", "counter",
       "Messages acknowledged without delivery because their idempotency key was committed.",
       [](const group_stats& g, millis) { return static_cast<double>(g.auto_acked); }},
      {"onceq_nacked_total", "counter", "Nacks accepted.",
       [](const group_stats& g, millis) { return static_cast<double>(g.nacked); }},
      {"onceq_lease_expired_total", "counter", "Leases that ran out before an ack.",
       [](const group_stats& g, millis) { return static_cast<double>(g.lease_expired); }},
      {"onceq_dead_lettered_total", "counter", "Messages moved to dlq.<topic>.",
       [](const group_stats& g, millis) { return static_cast<double>(g.dead_lettered); }},
      {"onceq_stale_acks_rejected_total", "counter",
       "Acks, nacks and extends rejected because the caller no longer held the delivery.",
       [](const group_stats& g, millis) { return static_cast<double>(g.stale_acks_rejected); }},
      {"onceq_superseded_total", "counter",
       "Waiting messages acknowledged because a newer message with their idempotency key "
       "arrived (key_conflict supersede).",
       [](const group_stats& g, millis) { return static_cast<double>(g.superseded); }},
      {"onceq_backlog", "gauge", "Messages waiting for delivery (not in flight).",
       [](const group_stats& g, millis) { return static_cast<double>(g.backlog); }},
      {"onceq_inflight", "gauge", "Messages leased to a consumer now.",
       [](const group_stats& g, millis) { return static_cast<double>(g.inflight); }},
      {"onceq_oldest_unacked_age_seconds", "gauge",
       "Age of the oldest message not yet acked by the group (0 when none).",
       [](const group_stats& g, millis now) {
         if (g.oldest_unacked_produced_at_ms == 0 || now <= g.oldest_unacked_produced_at_ms) {
           return 0.0;
         }
         return static_cast<double>(now - g.oldest_unacked_produced_at_ms) / 1000.0;
       }},
  };
  for (const auto& f : k_groups) {
    append_family(out, f.name, f.type, f.help);
    for (const auto& t : topics) {
      const std::string topic = escape_label(t.name);
      for (const auto& [group, g] : t.groups) {
        fmt::format_to(it, "{}{{topic=\"{}\",group=\"{}\"}} {}\n", f.name, topic,
                       escape_label(group), f.value(g, now_ms));
      }
    }
  }

  // One family for every duplicate a layer stopped (docs/DESIGN.md,
  // "Horizons"): produce (dedup window and already_committed, per topic),
  // consume (auto-acked on a committed key) and supersede (per group).
  append_family(out, "onceq_duplicates_suppressed_total", "counter",
                "Duplicates stopped, by the stage that stopped them.");
  for (const auto& t : topics) {
    const std::string topic = escape_label(t.name);
    fmt::format_to(it, "onceq_duplicates_suppressed_total{{stage=\"produce\",topic=\"{}\"}} {}\n",
                   topic, t.produce_duplicates + t.produce_already_committed);
    for (const auto& [group, g] : t.groups) {
      const std::string gl = escape_label(group);
      fmt::format_to(
          it,
          "onceq_duplicates_suppressed_total{{stage=\"consume\",topic=\"{}\",group=\"{}\"}} "
          "{}\n",
          topic, gl, g.auto_acked);
      fmt::format_to(
          it,
          "onceq_duplicates_suppressed_total{{stage=\"supersede\",topic=\"{}\",group=\"{}\"}}"
          " {}\n",
          topic, gl, g.superseded);
    }
  }
}

void render_storage_metrics(std::string& out, const storage::store_health& h) {
  append_family(out, "onceq_storage_writable", "gauge",
                "1 when the store accepts writes, 0 while a storage fault (disk full, I/O "
                "error, read-only filesystem) keeps it from writing.");
  fmt::format_to(std::back_inserter(out), "onceq_storage_writable {}\n", h.writable ? 1 : 0);
}

void render_shard_metrics(std::string& out, const std::vector<shard_gauges>& shards) {
  // One family, one series per shard: value(s) of each shard's gauges.
  auto family = [&](std::string_view name, std::string_view type, std::string_view help,
                    auto value) {
    append_family(out, name, type, help);
    for (const auto& s : shards) {
      fmt::format_to(std::back_inserter(out), "{}{{shard=\"{}\"}} {}\n", name, s.id, value(s));
    }
  };
  using g = const shard_gauges&;
  family("onceq_shard_writable", "gauge",
         "1 when the shard's store accepts writes; 0 during a storage fault, while "
         "the shard's topics answer 503.",
         [](g s) { return s.health.writable ? 1 : 0; });
  family("onceq_shard_queue_depth", "gauge",
         "Commands sent to the shard's loop from other loops, not run yet.",
         [](g s) { return s.queue_depth; });
  family("onceq_shard_topics", "gauge", "Topics placed on the shard (DLQs included).",
         [](g s) { return s.topics; });
  family("onceq_shard_write_stalls_total", "counter",
         "Writes the shard's loop had to wait for because RocksDB stalled writes "
         "(flushes or compactions behind).",
         [](g s) { return s.write_stalls; });
  family("onceq_shard_disk_reads_total", "counter",
         "Commands whose reads needed the disk: read on the shard's reader thread, "
         "then run again on its loop.",
         [](g s) { return s.disk_reads; });
  family("onceq_shard_loop_disk_reads_total", "counter",
         "Commands that read from the disk on the shard's loop (still missing memory "
         "on their third run, or while stopping).",
         [](g s) { return s.loop_disk_reads; });
  family("onceq_shard_loop_iterations_total", "counter",
         "Iterations of the shard's event loop (each ends with at most one WAL sync; a "
         "long one may hand its first commands to an idle syncer before).",
         [](g s) { return s.iterations; });
  family("onceq_shard_outbox_depth", "gauge",
         "Messages acks on the shard produced into topics of other shards, not taken by "
         "their shard yet (workflow steps).",
         [](g s) { return s.outbox_depth; });
  family("onceq_shard_outbox_age_seconds", "gauge",
         "How long the oldest message in the shard's outbox has waited; 0 when it is empty.",
         [](g s) { return s.outbox_age_seconds; });
  family("onceq_shard_loop_busy_ratio", "gauge",
         "Fraction of the last 50 ms window the shard's loop thread ran on a core (0 when "
         "it slept through it).",
         [](g s) { return s.loop_busy; });
  family("onceq_shard_loop_cpu_wait_ratio", "gauge",
         "Fraction of the last 50 ms window the shard's loop thread was ready to run but "
         "waited for a core (cores scarce).",
         [](g s) { return s.loop_waiting; });
}

void render_connection_metrics(std::string& out, const connection_stats& s) {
  auto it = std::back_inserter(out);
  constexpr auto relaxed = std::memory_order_relaxed;
  append_family(out, "onceq_connections_open", "gauge", "Client connections open now.");
  fmt::format_to(it, "onceq_connections_open {}\n", s.open.load(relaxed));
  append_family(out, "onceq_connections_accepted_total", "counter",
                "Client connections accepted and served.");
  fmt::format_to(it, "onceq_connections_accepted_total {}\n", s.accepted.load(relaxed));
  append_family(out, "onceq_connections_rejected_total", "counter",
                "Client connections closed at accept because max_connections were open.");
  fmt::format_to(it, "onceq_connections_rejected_total {}\n", s.rejected.load(relaxed));
  append_family(out, "onceq_http_header_timeouts_total", "counter",
                "Connections closed because a request header block did not arrive within "
                "header_timeout_ms.");
  fmt::format_to(it, "onceq_http_header_timeouts_total {}\n", s.header_timeouts.load(relaxed));
  append_family(out, "onceq_tls_handshake_failures_total", "counter",
                "TLS connections closed before a finished handshake (timeout, protocol or "
                "cipher mismatch, plain HTTP on the TLS port).");
  fmt::format_to(it, "onceq_tls_handshake_failures_total {}\n",
                 s.tls_handshake_failures.load(relaxed));
  append_family(out, "onceq_connections_migrated_total", "counter",
                "Connections moved to the loop of the shard their requests kept going to.");
  fmt::format_to(it, "onceq_connections_migrated_total {}\n", s.migrations.load(relaxed));
  append_family(out, "onceq_connections_spread_total", "counter",
                "Connections moved off a saturated loop to a loop with room (their commands "
                "then cross to the topic's loop).");
  fmt::format_to(it, "onceq_connections_spread_total {}\n", s.spreads.load(relaxed));
  append_family(out, "onceq_cpu_idle_cores", "gauge",
                "Idle cores (of those the process may run on) over the last 200 ms, as the last "
                "decision on where a connection runs read them; -1 before one or when unknown.");
  const std::int64_t idle = s.idle_cores_milli.load(relaxed);
  fmt::format_to(it, "onceq_cpu_idle_cores {}\n",
                 idle < 0 ? -1.0 : static_cast<double>(idle) / 1000.0);
}

void render_wal_sync_metrics(std::string& out, const storage::sync_stats& s) {
  append_family(out, "onceq_wal_sync_duration_seconds", "histogram",
                "Time of each WAL sync (fsync) that had new writes to cover.");
  append_histogram(out, "onceq_wal_sync_duration_seconds", "", s);
  append_family(out, "onceq_wal_sync_waiters_total", "counter",
                "Durability callbacks (one per round of the core thread) released by WAL syncs.");
  fmt::format_to(std::back_inserter(out), "onceq_wal_sync_waiters_total {}\n", s.waiters);
}

}  // namespace onceq::http
