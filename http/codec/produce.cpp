#include "http/codec/produce.hpp"

#include <cstddef>

#include <fmt/format.h>

#include "http/codec/detail.hpp"
#include "http/json_write.hpp"
#include "http/rfc3339.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

namespace {

constexpr std::size_t k_max_idempotency_header = 1024;

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

}  // namespace

namespace codec_detail {

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

}  // namespace codec_detail

namespace {

message_in read_message(reader& r) {
  message_in m;
  r.each({"key", "value", "envelope"},
         [&](std::size_t i, field& f) { read_message_field(i, f, m); });
  if (m.value.empty()) required(r, "value");
  return m;
}

// The key order is nlohmann's (alphabetical), so the bytes are those the
// DOM-built replies had.
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
    if (idempotency_header.size() > k_max_idempotency_header) {
      fail(fmt::format("the Idempotency-Key header must be at most {} bytes",
                       k_max_idempotency_header));
    }
    out.cmd.idempotency_header = std::string(idempotency_header);
    return out;
  });
}

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

}  // namespace onceq::http
