#include "http/codec.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/evp.h>

#include "http/rfc3339.hpp"

namespace onceq::http {

namespace {

using json = nlohmann::json;

constexpr std::int64_t k_int_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t k_u32_max = std::numeric_limits<std::uint32_t>::max();
constexpr std::size_t k_max_idempotency_header = 1024;

// The readers (http/params.hpp) hand over the fields in the order they
// were written, once each; each is checked as it comes, and what is
// required is checked after the object. Errors are bad_input, which every
// public function turns into errc::invalid_argument.
[[noreturn]] void fail(std::string message) {
  throw_bad_input(std::move(message));
}

template <class T, class Fn>
result<T> guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const bad_input& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

[[noreturn]] void required(const reader& r, std::string_view name) {
  fail(fmt::format("{} is required", r.path(name)));
}

// A field the other form of a request has ("key" in a batch produce).
[[noreturn]] void unknown(const reader& r, std::string_view name) {
  fail(fmt::format("unknown field '{}'", r.path(name)));
}

std::string topic_of(field& f) {
  std::string s(f.str());
  if (!valid_topic_name(s)) fail(fmt::format("{} must match [A-Za-z0-9._-]{{1,200}}", f.path()));
  return s;
}

// group, owner: 1..200 bytes.
std::string label_of(field& f) {
  std::string s(f.str());
  if (s.empty() || s.size() > k_max_label_bytes) {
    fail(fmt::format("{} must be 1..{} bytes", f.path(), k_max_label_bytes));
  }
  return s;
}

// A fencing token: an integer >= 1.
std::uint64_t token_of(field& f) {
  return static_cast<std::uint64_t>(f.integer(1, k_int_max));
}

void read_envelope(field& f, message_in& m) {
  // As the producer wrote it, less whitespace: keys keep their order.
  m.envelope_json = f.object_text([&](reader& r) {
    r.each({"idempotency_key", "tenant_id", "run_id", "step_id", "parent_step_id", "target_topic",
            "partition_override", "deadline", "retry_policy", "msg_id", "key_ttl_ms", "delay_ms",
            "headers"},
           [&](std::size_t i, field& e) {
             switch (i) {
               case 0:
                 m.idempotency_key = e.str();
                 break;
               case 1:
                 m.tenant_id = e.str();
                 break;
               case 2:
               case 3:
               case 4:
               case 5:
                 (void)e.str();  // echoed to consumers only; checked for type
                 break;
               case 6:
                 m.partition_override = e.integer(0, k_u32_max);
                 break;
               case 7: {
                 auto ms = parse_rfc3339(e.str());
                 if (!ms.ok()) fail(fmt::format("{} is {}", e.path(), ms.err().message));
                 m.deadline_ms = *ms;
                 break;
               }
               case 8: {
                 reader p = e.object();
                 p.each({"max_attempts", "backoff_ms", "max_backoff_ms"},
                        [&](std::size_t k, field& x) {
                          const std::int64_t v = x.integer(0, k_int_max);
                          (k == 0   ? m.retry.max_attempts
                           : k == 1 ? m.retry.backoff_ms
                                    : m.retry.max_backoff_ms) = v;
                        });
                 break;
               }
               case 9:
                 m.msg_id = e.str();
                 break;
               case 10:
                 m.key_ttl_ms = e.integer(0, k_int_max);
                 break;
               case 11:
                 m.delay_ms = e.integer(0, k_int_max);
                 break;
               default:
                 e.string_map();  // headers: free-form strings
                 break;
             }
           });
  });
}

// One field of a message: 0 key, 1 value, 2 envelope.
void read_message_field(std::size_t i, field& f, message_in& m) {
  switch (i) {
    case 0:
      m.key = std::string(f.str());
      break;
    case 1:
      m.value = f.str();
      if (m.value.empty()) fail(fmt::format("{} must be a non-empty string", f.path()));
      break;
    default:
      read_envelope(f, m);
      break;
  }
}

message_in read_message(reader& r) {
  message_in m;
  r.each({"key", "value", "envelope"},
         [&](std::size_t i, field& f) { read_message_field(i, f, m); });
  if (m.value.empty()) required(r, "value");
  return m;
}

// The delivery a consumer names (ack, nack, extend): the fields of
// delivery_ref. take() reads one if it is one of them.
struct ref_reader {
  delivery_ref ref;
  bool partition = false, offset = false;

  bool take(field& f) {
    const std::string_view n = f.name();
    if (n == "topic") {
      ref.topic = topic_of(f);
    } else if (n == "group") {
      ref.group = label_of(f);
    } else if (n == "owner") {
      ref.owner = label_of(f);
    } else if (n == "partition") {
      ref.partition = static_cast<std::uint32_t>(f.integer(0, k_u32_max));
      partition = true;
    } else if (n == "offset") {
      ref.offset = static_cast<std::uint64_t>(f.integer(0, k_int_max));
      offset = true;
    } else if (n == "attempts") {
      ref.attempts = f.integer(0, k_int_max);
    } else if (n == "fencing_token") {
      ref.fencing_token = token_of(f);
    } else {
      return false;
    }
    return true;
  }

  // The required fields, in the order they are named in errors.
  delivery_ref done(const reader& r) {
    if (ref.topic.empty()) required(r, "topic");
    if (ref.group.empty()) required(r, "group");
    if (ref.owner.empty()) required(r, "owner");
    if (!partition) required(r, "partition");
    if (!offset) required(r, "offset");
    return std::move(ref);
  }
};

}  // namespace

bool valid_topic_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > k_max_label_bytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

result<create_topic_cmd> parse_create_topic(const params& p, const topic_settings& defaults) {
  return guarded<create_topic_cmd>([&] {
    reader r(p);
    create_topic_cmd c;
    c.settings = defaults;
    auto& s = c.settings;
    r.each(
        {"name", "partitions", "lease_ms", "max_attempts", "backoff_ms", "max_backoff_ms",
         "key_ttl_ms", "dedup_window_ms", "retention_ms", "max_backlog_messages",
         "max_backlog_bytes", "max_inflight", "idempotency_key_fields",
         "idempotency_key_include_topic", "idempotency_key_optional", "dedup_by_content",
         "key_conflict", "key_history"},
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
            default:
              s.key_history = f.boolean();
              break;
          }
        });
    if (c.name.empty()) required(r, "name");
    return c;
  });
}

result<produce_request> parse_produce(const params& p, std::string_view idempotency_header) {
  return guarded<produce_request>([&] {
    reader r(p);
    produce_request out;
    message_in single;
    std::string_view first_single;  // the single form's first field, if any
    r.each({"topic", "messages", "skip_if_committed", "key", "value", "envelope"},
           [&](std::size_t i, field& f) {
             switch (i) {
               case 0:
                 out.cmd.topic = topic_of(f);
                 break;
               case 1:
                 // The batch form: the single form's fields are unknown.
                 if (!first_single.empty()) unknown(r, first_single);
                 out.batch = true;
                 f.objects(k_max_batch, [&](std::size_t, reader& m) {
                   out.cmd.messages.push_back(read_message(m));
                 });
                 break;
               case 2:
                 out.cmd.skip_if_committed = f.strings(k_max_skip_groups);
                 break;
               default:
                 if (out.batch) unknown(r, f.name());
                 if (first_single.empty()) first_single = f.name();
                 read_message_field(i - 3, f, single);
                 break;
             }
           });
    if (out.cmd.topic.empty()) required(r, "topic");
    if (!out.batch) {
      if (single.value.empty()) required(r, "value");
      out.cmd.messages.push_back(std::move(single));
    }
    out.cmd.inspector = &json_inspector();
    if (idempotency_header.size() > k_max_idempotency_header) {
      fail(fmt::format("the Idempotency-Key header must be at most {} bytes",
                       k_max_idempotency_header));
    }
    out.cmd.idempotency_header = std::string(idempotency_header);
    return out;
  });
}

namespace {

// The items of a batch ack's "acks" (also carried on a consume): 1..1000
// objects of partition, offset and the optional fences and result.
std::vector<ack_item> ack_items_of(field& f) {
  std::vector<ack_item> items;
  f.objects(k_max_batch, [&](std::size_t, reader& a) {
    ack_item item;
    bool partition = false, offset = false;
    a.each({"partition", "offset", "attempts", "result", "fencing_token"},
           [&](std::size_t k, field& x) {
             switch (k) {
               case 0:
                 item.partition = static_cast<std::uint32_t>(x.integer(0, k_u32_max));
                 partition = true;
                 break;
               case 1:
                 item.offset = static_cast<std::uint64_t>(x.integer(0, k_int_max));
                 offset = true;
                 break;
               case 2:
                 item.attempts = x.integer(0, k_int_max);
                 break;
               case 3:
                 item.result_json = x.json();
                 break;
               default:
                 item.fencing_token = token_of(x);
                 break;
             }
           });
    if (!partition) required(a, "partition");
    if (!offset) required(a, "offset");
    items.push_back(std::move(item));
  });
  return items;
}

}  // namespace

result<consume_request> parse_consume(const params& p) {
  return guarded<consume_request>([&] {
    reader r(p);
    consume_request out;
    std::optional<std::int64_t> max;
    std::optional<std::string> deadline_text;
    r.each({"topic", "group", "owner", "lease_ms", "max_messages", "wait_ms", "deadline_ms",
            "deadline_rfc3339", "acks"},
           [&](std::size_t i, field& f) {
             switch (i) {
               case 0:
                 out.cmd.topic = topic_of(f);
                 break;
               case 1:
                 out.cmd.group = label_of(f);
                 break;
               case 2:
                 out.cmd.owner = label_of(f);
                 break;
               case 3:
                 out.cmd.lease_ms = f.integer(1, k_int_max);
                 break;
               case 4:
                 max = f.integer(1, static_cast<std::int64_t>(k_max_batch));
                 break;
               case 5:
                 out.wait_ms = f.integer(0, k_max_wait_ms);
                 break;
               case 6:
                 out.cmd.deadline_ms = f.integer(0, k_int_max);
                 break;
               case 7:
                 deadline_text = std::string(f.str());
                 break;
               default:
                 if (r.from_query()) fail("acks must be sent in a JSON body (POST), not a query");
                 out.acks = ack_items_of(f);
                 break;
             }
           });
    if (out.cmd.topic.empty()) required(r, "topic");
    if (out.cmd.group.empty()) required(r, "group");
    if (out.cmd.owner.empty()) required(r, "owner");
    out.stream = !max.has_value();
    out.cmd.max_messages = max.value_or(1);
    if (out.acks && out.stream) fail("acks needs max_messages (a long-poll batch, not a stream)");
    if (deadline_text) {
      if (out.cmd.deadline_ms) fail("give deadline_ms or deadline_rfc3339, not both");
      auto ms = parse_rfc3339(*deadline_text);
      if (!ms.ok()) fail(fmt::format("deadline_rfc3339 is {}", ms.err().message));
      out.cmd.deadline_ms = *ms;
    }
    return out;
  });
}

result<ack_request> parse_ack(const params& p) {
  return guarded<ack_request>([&]() -> ack_request {
    reader r(p);
    ref_reader single;
    std::string result_json;
    std::string_view first_single;  // the single form's first own field, if any
    ack_batch_cmd b;
    bool batch = false;
    r.each({"topic", "group", "owner", "acks", "partition", "offset", "attempts", "result",
            "fencing_token"},
           [&](std::size_t i, field& f) {
             if (i < 3) {
               single.take(f);
               return;
             }
             if (i == 3) {
               // The batch form: the single form's own fields are unknown.
               if (!first_single.empty()) unknown(r, first_single);
               batch = true;
               b.acks = ack_items_of(f);
               return;
             }
             if (batch) unknown(r, f.name());
             if (first_single.empty()) first_single = f.name();
             if (i == 7) {
               result_json = f.json();
             } else {
               single.take(f);
             }
           });
    if (batch) {
      if (single.ref.topic.empty()) required(r, "topic");
      if (single.ref.group.empty()) required(r, "group");
      if (single.ref.owner.empty()) required(r, "owner");
      b.topic = std::move(single.ref.topic);
      b.group = std::move(single.ref.group);
      b.owner = std::move(single.ref.owner);
      return b;
    }
    ack_cmd c;
    c.ref = single.done(r);
    c.result_json = std::move(result_json);
    return c;
  });
}

result<nack_cmd> parse_nack(const params& p) {
  return guarded<nack_cmd>([&] {
    reader r(p);
    ref_reader ref;
    nack_cmd c;
    std::optional<std::string> reason, error;
    r.each({"topic", "group", "owner", "partition", "offset", "attempts", "fencing_token", "reason",
            "error", "delay_ms"},
           [&](std::size_t i, field& f) {
             if (i == 7) {
               reason = std::string(f.str());
             } else if (i == 8) {
               error = std::string(f.str());  // DriftQ's name for the reason
             } else if (i == 9) {
               c.delay_ms = f.integer(0, k_int_max);
             } else {
               ref.take(f);
             }
           });
    c.ref = ref.done(r);
    if (reason && error) fail("give reason or error, not both");
    if (reason) c.reason = std::move(*reason);
    if (error) c.reason = std::move(*error);
    return c;
  });
}

result<extend_cmd> parse_extend(const params& p) {
  return guarded<extend_cmd>([&] {
    reader r(p);
    ref_reader ref;
    std::optional<std::int64_t> lease_ms;
    r.each(
        {"topic", "group", "owner", "partition", "offset", "attempts", "fencing_token", "lease_ms"},
        [&](std::size_t i, field& f) {
          if (i == 7) {
            lease_ms = f.integer(1, k_int_max);
          } else {
            ref.take(f);
          }
        });
    extend_cmd c;
    c.ref = ref.done(r);
    if (!lease_ms) required(r, "lease_ms");
    c.lease_ms = *lease_ms;
    return c;
  });
}

result<key_request> parse_key_query(const params& p) {
  return guarded<key_request>([&] {
    reader r(p);
    key_request out;
    std::optional<std::string> key;
    r.each({"topic", "group", "key", "tenant_id", "wait_ms"}, [&](std::size_t i, field& f) {
      switch (i) {
        case 0:
          out.q.topic = topic_of(f);
          break;
        case 1:
          out.q.group = label_of(f);
          break;
        case 2:
          key = std::string(f.str());
          break;
        case 3:
          out.q.tenant_id = f.str();
          break;
        default:
          out.wait_ms = f.integer(0, k_max_wait_ms);
          break;
      }
    });
    if (out.q.topic.empty()) required(r, "topic");
    if (out.q.group.empty()) required(r, "group");
    if (!key) required(r, "key");
    if (key->empty()) fail("key must be a non-empty string");
    out.q.key = std::move(*key);
    return out;
  });
}

result<key_query> parse_key_history_query(const params& p) {
  return guarded<key_query>([&] {
    reader r(p);
    key_query q;
    std::optional<std::string> key;
    r.each({"topic", "group", "key", "tenant_id"}, [&](std::size_t i, field& f) {
      switch (i) {
        case 0:
          q.topic = topic_of(f);
          break;
        case 1:
          q.group = label_of(f);
          break;
        case 2:
          key = std::string(f.str());
          break;
        default:
          q.tenant_id = f.str();
          break;
      }
    });
    if (q.topic.empty()) required(r, "topic");
    if (q.group.empty()) required(r, "group");
    if (!key) required(r, "key");
    if (key->empty()) fail("key must be a non-empty string");
    q.key = std::move(*key);
    return q;
  });
}

result<redrive_cmd> parse_redrive(const params& p) {
  return guarded<redrive_cmd>([&] {
    reader r(p);
    redrive_cmd c;
    r.each({"topic", "max_messages"}, [&](std::size_t i, field& f) {
      if (i == 0) {
        c.topic = topic_of(f);
      } else {
        c.max_messages = f.integer(1, k_int_max);
      }
    });
    if (c.topic.empty()) required(r, "topic");
    return c;
  });
}

// ---- replies ---------------------------------------------------------------

json to_json(const topic_created& c) {
  return {{"status", "created"}, {"name", c.name}, {"partitions", c.partitions}};
}

// The key order is nlohmann's (alphabetical), so the bytes are those the
// DOM-built replies had.
namespace {

// {"billing":{"committed_at_ms":..,"owner":..,"result":..},...}
void append_committed(std::string& out, const std::map<std::string, committed_key>& committed) {
  out += '{';
  bool first = true;
  for (const auto& [group, k] : committed) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, group);
    out += R"(:{"committed_at_ms":)";
    append_json_int(out, k.committed_at_ms);
    out += R"(,"owner":)";
    append_json_string(out, k.owner);
    if (!k.result_json.empty()) {
      out += R"(,"result":)";
      out += k.result_json;  // stored minified by the codec
    }
    out += '}';
  }
  out += '}';
}

}  // namespace

std::string produce_reply_json(const produce_reply& r, std::string_view topic, bool batch) {
  std::string out;
  if (!batch) {
    const produced& p = r.results.at(0);
    if (auto done = r.already_committed.find(0); done != r.already_committed.end()) {
      out += R"({"committed":)";
      append_committed(out, done->second);
      out += R"(,"status":"already_committed","topic":)";
      append_json_string(out, topic);
      out += '}';
      return out;
    }
    out.reserve(96 + topic.size());
    out += p.duplicate ? R"({"duplicate":true,"offset":)" : R"({"duplicate":false,"offset":)";
    append_json_int(out, p.offset);
    out += R"(,"partition":)";
    append_json_int(out, p.partition);
    out += R"(,"status":"produced","topic":)";
    append_json_string(out, topic);
    out += '}';
    return out;
  }
  out.reserve(64 + topic.size() + r.results.size() * 56);
  out += R"({"results":[)";
  for (std::size_t i = 0; i < r.results.size(); ++i) {
    const produced& p = r.results[i];
    if (i > 0) out += ',';
    if (auto done = r.already_committed.find(i); done != r.already_committed.end()) {
      out += R"({"committed":)";
      append_committed(out, done->second);
      out += R"(,"status":"already_committed"})";
      continue;
    }
    out += p.duplicate ? R"({"duplicate":true,"offset":)" : R"({"duplicate":false,"offset":)";
    append_json_int(out, p.offset);
    out += R"(,"partition":)";
    append_json_int(out, p.partition);
    out += '}';
  }
  out += R"(],"status":"produced","topic":)";
  append_json_string(out, topic);
  out += '}';
  return out;
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
          {"key_history", s.key_history}};
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

namespace {

// open, the outcomes as a JSON array (one object per ack, in order), close.
std::string ack_outcomes_in(std::string_view open, const std::vector<ack_outcome>& outcomes,
                            std::string_view close) {
  std::string out;
  out.reserve(16 + outcomes.size() * 64);
  out += open;
  out += '[';
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const ack_outcome& o = outcomes[i];
    if (i > 0) out += ',';
    out += '{';
    if (o.code != errc::ok) {
      out += R"("error":)";
      append_json_string(out, to_string(o.code));
      out += ',';
    }
    out += R"("offset":)";
    append_json_int(out, o.offset);
    out += R"(,"partition":)";
    append_json_int(out, o.partition);
    out += o.code == errc::ok ? R"(,"status":"acked"})" : R"(,"status":"error"})";
  }
  out += ']';
  out += close;
  return out;
}

}  // namespace

std::string ack_outcomes_json(const std::vector<ack_outcome>& outcomes) {
  return ack_outcomes_in(R"({"results":)", outcomes, "}");
}

std::string consumed_acks_line(const std::vector<ack_outcome>& outcomes) {
  return ack_outcomes_in(R"({"acks":)", outcomes, "}\n");
}

json to_json(const key_info& k) {
  json j = json::object();
  switch (k.st) {
    case key_info::state::none:
      j["state"] = "none";
      return j;
    case key_info::state::leased:
      j["state"] = "leased";
      break;
    case key_info::state::committed:
      j["state"] = "committed";
      break;
    case key_info::state::failed:
      j["state"] = "failed";
      break;
  }
  j["owner"] = k.owner;
  j["partition"] = k.partition;
  j["offset"] = k.offset;
  j["attempts"] = k.attempts;
  // 0: a key recorded before fencing tokens existed.
  if (k.fencing_token != 0) j["fencing_token"] = k.fencing_token;
  if (k.st == key_info::state::leased) j["lease_expires_at_ms"] = k.lease_expires_at_ms;
  if (k.st == key_info::state::committed) {
    j["committed_at_ms"] = k.committed_at_ms;
    // 0: the key never expires (key TTL 0); the field does not apply.
    if (k.expires_at_ms != 0) j["expires_at_ms"] = k.expires_at_ms;
    if (!k.result_json.empty()) {
      auto res = json::parse(k.result_json, nullptr, false);
      if (!res.is_discarded()) j["result"] = std::move(res);
    }
  }
  return j;
}

std::string_view to_string(key_event::kind k) {
  switch (k) {
    case key_event::kind::leased:
      return "leased";
    case key_event::kind::lease_expired:
      return "lease_expired";
    case key_event::kind::nacked:
      return "nacked";
    case key_event::kind::committed:
      return "committed";
    case key_event::kind::duplicate_auto_acked:
      return "duplicate_auto_acked";
    case key_event::kind::produce_duplicate:
      return "produce_duplicate";
    case key_event::kind::produce_committed:
      return "produce_already_committed";
    case key_event::kind::superseded:
      return "superseded";
    case key_event::kind::failed:
      return "failed";
  }
  return "unknown";
}

json to_json(const key_history& h) {
  json events = json::array();
  for (const auto& e : h.events) {
    json j = {{"event", to_string(e.what)}, {"at_ms", e.at_ms}};
    switch (e.what) {
      case key_event::kind::produce_committed:
        break;
      case key_event::kind::produce_duplicate:
      case key_event::kind::duplicate_auto_acked:
      case key_event::kind::superseded:
        j["partition"] = e.partition;
        j["offset"] = e.offset;
        break;
      default:
        j["owner"] = e.owner;
        j["partition"] = e.partition;
        j["offset"] = e.offset;
        j["attempts"] = e.attempts;
        j["fencing_token"] = e.fencing_token;
        break;
    }
    if (!e.reason.empty()) j["reason"] = e.reason;
    if (e.what == key_event::kind::committed) j["result_bytes"] = e.result_bytes;
    events.push_back(std::move(j));
  }
  return {{"events", std::move(events)}};
}

namespace {

// Dot paths into a parsed JSON text, and SHA-256 through OpenSSL.
class json_message_inspector final : public message_inspector {
 public:
  result<std::string> field(std::string_view doc, std::string_view dot_path) const override {
    return json_field(doc, dot_path);
  }

  std::string sha256_hex(std::string_view bytes) const override {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("SHA-256 failed");  // only on allocation failure
    std::string out;
    out.reserve(2 * n);
    for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", md[i]);
    return out;
  }
};

}  // namespace

const message_inspector& json_inspector() {
  static const json_message_inspector k_inspector;
  return k_inspector;
}

json to_json(const dlq_origin& d) {
  return {{"original_topic", d.original_topic},   {"original_partition", d.original_partition},
          {"original_offset", d.original_offset}, {"attempts", d.attempts},
          {"last_error", d.last_error},           {"routed_at_ms", d.routed_at_ms}};
}

}  // namespace onceq::http
