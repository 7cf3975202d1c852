#include "http/codec/topics.hpp"

#include <fmt/format.h>

#include "http/codec/detail.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

result<create_topic_cmd> parse_create_topic(const params& p, const topic_settings& defaults) {
  return guarded<create_topic_cmd>([&] {
    reader r(p);
    create_topic_cmd c;
    c.settings = defaults;
    auto& s = c.settings;
    r.each(
        {"name",
         "partitions",
         "lease_ms",
         "max_attempts",
         "backoff_ms",
         "max_backoff_ms",
         "key_ttl_ms",
         "dedup_window_ms",
         "retention_ms",
         "max_backlog_messages",
         "max_backlog_bytes",
         "max_inflight",
         "idempotency_key_fields",
         "idempotency_key_include_topic",
         "idempotency_key_optional",
         "dedup_by_content",
         "key_conflict",
         "key_history",
         "replay_window_ms",
         "ordering"},
        [&](std::size_t i, field& f) {
          switch (i) {
            case 0:
              c.name = topic_of(f);
              break;
            case 1:
              c.partitions = f.integer(1, k_int_max);
              break;
            case 2:
              s.lease_ms = f.integer(1, k_int_max);
              break;
            case 3:
              s.max_attempts = f.integer(0, k_int_max);
              break;
            case 4:
              s.backoff_ms = f.integer(0, k_int_max);
              break;
            case 5:
              s.max_backoff_ms = f.integer(0, k_int_max);
              break;
            case 6:
              s.key_ttl_ms = f.integer(0, k_int_max);
              break;
            case 7:
              s.dedup_window_ms = f.integer(0, k_int_max);
              break;
            case 8:
              s.retention_ms = f.integer(0, k_int_max);
              break;
            case 9:
              s.max_backlog_messages = f.integer(0, k_int_max);
              break;
            case 10:
              s.max_backlog_bytes = f.integer(0, k_int_max);
              break;
            case 11:
              s.max_inflight = f.integer(0, k_int_max);
              break;
            case 12:
              // Source syntax (root, empty segments) is the broker's rule
              // (validate_key_fields); the types are checked here.
              s.idempotency_key_fields = f.strings(k_max_key_fields);
              break;
            case 13:
              s.idempotency_key_include_topic = f.boolean();
              break;
            case 14:
              s.idempotency_key_optional = f.boolean();
              break;
            case 15:
              s.dedup_by_content = f.boolean();
              break;
            case 16: {
              const std::string_view kc = f.str();
              if (kc == "hold") {
                s.key_conflict = topic_settings::conflict::hold;
              } else if (kc == "supersede") {
                s.key_conflict = topic_settings::conflict::supersede;
              } else {
                fail(fmt::format("key_conflict must be \"hold\" or \"supersede\", got \"{}\"", kc));
              }
              break;
            }
            case 17:
              s.key_history = f.boolean();
              break;
            case 18:
              s.replay_window_ms = f.integer(0, k_int_max);
              break;
            default: {
              const std::string_view o = f.str();
              if (o == "none") {
                s.ordering = topic_settings::ordering_mode::none;
              } else if (o == "key") {
                s.ordering = topic_settings::ordering_mode::key;
              } else {
                fail(fmt::format("ordering must be \"none\" or \"key\", got \"{}\"", o));
              }
              break;
            }
          }
        });
    if (c.name.empty()) required(r, "name");
    return c;
  });
}

json to_json(const topic_created& c) {
  return {{"status", "created"}, {"name", c.name}, {"partitions", c.partitions}};
}

json to_json(const topic_settings& s) {
  return {{"lease_ms", s.lease_ms},
          {"max_attempts", s.max_attempts},
          {"backoff_ms", s.backoff_ms},
          {"max_backoff_ms", s.max_backoff_ms},
          {"key_ttl_ms", s.key_ttl_ms},
          {"dedup_window_ms", s.dedup_window_ms},
          {"retention_ms", s.retention_ms},
          {"max_backlog_messages", s.max_backlog_messages},
          {"max_backlog_bytes", s.max_backlog_bytes},
          {"max_inflight", s.max_inflight},
          {"idempotency_key_fields", s.idempotency_key_fields},
          {"idempotency_key_include_topic", s.idempotency_key_include_topic},
          {"idempotency_key_optional", s.idempotency_key_optional},
          {"dedup_by_content", s.dedup_by_content},
          {"key_conflict",
           s.key_conflict == topic_settings::conflict::supersede ? "supersede" : "hold"},
          {"key_history", s.key_history},
          {"replay_window_ms", s.replay_window_ms},
          {"ordering", s.ordering == topic_settings::ordering_mode::key ? "key" : "none"}};
}

json to_json(const topic_info& t) {
  json groups = json::object();
  for (const auto& [name, g] : t.groups) {
    groups[name] = {{"backlog", g.backlog},
                    {"inflight", g.inflight},
                    {"acked", g.acked},
                    {"auto_acked", g.auto_acked},
                    {"redelivered", g.redelivered},
                    {"dead_lettered", g.dead_lettered},
                    {"superseded", g.superseded}};
  }
  return {{"name", t.name},
          {"partitions", t.partitions},
          {"settings", to_json(t.settings)},
          {"groups", std::move(groups)}};
}

}  // namespace onceq::http
