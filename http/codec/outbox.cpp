#include "http/codec/outbox.hpp"

#include <nlohmann/json.hpp>

#include "broker/limits.hpp"
#include "http/codec/detail.hpp"
#include "http/json_write.hpp"

namespace onceq::http {

using namespace codec_detail;

std::string outbox_append_json(const outbox_append_cmd& cmd) {
  std::string out = R"({"source":)";
  append_json_int(out, cmd.source);
  out += R"(,"entries":[)";
  for (std::size_t i = 0; i < cmd.entries.size(); ++i) {
    const auto& e = cmd.entries[i];
    const auto& m = e.msg.message;
    if (i > 0) out += ',';
    out += R"({"seq":)";
    append_json_int(out, e.seq);
    out += R"(,"created_at_ms":)";
    append_json_int(out, e.created_at_ms);
    out += R"(,"topic":)";
    append_json_string(out, e.msg.topic);
    if (m.key) {
      out += R"(,"key":)";
      append_json_string(out, *m.key);
    }
    out += R"(,"value":)";
    append_json_string(out, m.value);
    if (!m.envelope_json.empty()) {
      out += R"(,"envelope":)";
      out += m.envelope_json;
    }
    out += '}';
  }
  out += "]}";
  return out;
}

result<outbox_append_cmd> parse_outbox_append(const params& p) {
  return guarded<outbox_append_cmd>([&] {
    reader r(p);
    outbox_append_cmd cmd;
    bool source = false;
    r.each({"source", "entries"}, [&](std::size_t i, field& f) {
      if (i == 0) {
        cmd.source = static_cast<std::uint32_t>(f.integer(0, k_u32_max));
        source = true;
        return;
      }
      f.objects(k_max_batch, [&](std::size_t, reader& e) {
        outbox_entry entry;
        bool seq = false;
        e.each({"seq", "created_at_ms", "topic", "key", "value", "envelope"},
               [&](std::size_t k, field& x) {
                 switch (k) {
                   case 0:
                     entry.seq = static_cast<std::uint64_t>(x.integer(1, k_int_max));
                     seq = true;
                     break;
                   case 1:
                     entry.created_at_ms = x.integer(0, k_int_max);
                     break;
                   case 2:
                     entry.msg.topic = topic_of(x);
                     break;
                   default:
                     read_message_field(k - 3, x, entry.msg.message);
                     break;
                 }
               });
        if (!seq) required(e, "seq");
        if (entry.msg.topic.empty()) required(e, "topic");
        if (entry.msg.message.value.empty()) required(e, "value");
        cmd.entries.push_back(std::move(entry));
      });
    });
    if (!source) required(r, "source");
    if (cmd.entries.empty()) required(r, "entries");
    return cmd;
  });
}

std::string outbox_appended_json(const std::vector<outbox_appended>& results) {
  std::string out = R"({"results":[)";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& a = results[i];
    if (i > 0) out += ',';
    out += R"({"seq":)";
    append_json_int(out, a.seq);
    out += R"(,"code":)";
    append_json_int(out, static_cast<int>(a.code));
    out += R"(,"message":)";
    append_json_string(out, a.message);
    out += a.stored ? R"(,"stored":true)" : R"(,"stored":false)";
    out += a.duplicate ? R"(,"duplicate":true)" : R"(,"duplicate":false)";
    out += R"(,"partition":)";
    append_json_int(out, a.partition);
    out += R"(,"offset":)";
    append_json_int(out, a.offset);
    out += '}';
  }
  out += "]}";
  return out;
}

result<std::vector<outbox_appended>> parse_outbox_appended(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("results") || !j["results"].is_array())
    return make_error(errc::unavailable, "the target node's outbox answer is not JSON");
  std::vector<outbox_appended> out;
  try {
    for (const auto& r : j["results"]) {
      outbox_appended a;
      a.seq = r.at("seq").get<std::uint64_t>();
      const int code = r.at("code").get<int>();
      if (code < 0 || code > static_cast<int>(errc::would_block))
        return make_error(errc::unavailable, "the target node answered an unknown code");
      a.code = static_cast<errc>(code);
      a.message = r.at("message").get<std::string>();
      a.stored = r.at("stored").get<bool>();
      a.duplicate = r.at("duplicate").get<bool>();
      a.partition = r.at("partition").get<std::uint32_t>();
      a.offset = r.at("offset").get<std::uint64_t>();
      out.push_back(std::move(a));
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error(errc::unavailable,
                      std::string("the target node's outbox answer: ") + e.what());
  }
  return out;
}

}  // namespace onceq::http
