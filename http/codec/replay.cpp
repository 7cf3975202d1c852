#include "http/codec/replay.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "http/codec/detail.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

namespace {

// "<partition>:<offset>", as to_json writes next.
replay_position cursor_of(field& f) {
  const std::string_view s = f.str();
  replay_position pos;
  const auto colon = s.find(':');
  const char* end = s.data() + s.size();
  if (colon != std::string_view::npos) {
    auto [p, e1] = std::from_chars(s.data(), s.data() + colon, pos.partition);
    auto [o, e2] = std::from_chars(s.data() + colon + 1, end, pos.offset);
    if (e1 == std::errc() && e2 == std::errc() && p == s.data() + colon && o == end && colon > 0 &&
        colon + 1 < s.size())
      return pos;
  }
  fail(fmt::format("cursor must be a previous answer's next (\"<partition>:<offset>\"), got \"{}\"",
                   s));
}

}  // namespace

result<replay_cmd> parse_replay(const params& p) {
  return guarded<replay_cmd>([&] {
    reader r(p);
    replay_cmd c;
    r.each({"topic", "group", "from_ms", "to_ms", "from_offset", "to_offset", "partition",
            "dry_run", "max_messages", "cursor"},
           [&](std::size_t i, field& f) {
             switch (i) {
               case 0:
                 c.topic = topic_of(f);
                 break;
               case 1:
                 c.group = label_of(f);
                 break;
               case 2:
                 c.from_ms = f.integer(0, k_int_max);
                 break;
               case 3:
                 c.to_ms = f.integer(0, k_int_max);
                 break;
               case 4:
                 c.from_offset = f.integer(0, k_int_max);
                 break;
               case 5:
                 c.to_offset = f.integer(0, k_int_max);
                 break;
               case 6:
                 c.partition = f.integer(0, k_u32_max);
                 break;
               case 7:
                 c.dry_run = f.boolean();
                 break;
               case 8:
                 c.max_messages = f.integer(1, static_cast<std::int64_t>(k_max_batch));
                 break;
               default:
                 c.cursor = cursor_of(f);
                 break;
             }
           });
    if (c.topic.empty()) required(r, "topic");
    if (c.group.empty()) required(r, "group");
    return c;
  });
}

std::string_view to_string(replay_outcome o) {
  // Indexed by replay_outcome's values (0 .. k_replay_outcomes - 1).
  static constexpr std::array<std::string_view, k_replay_outcomes> k_names = {
      "already_committed", "would_deliver", "in_flight", "pending",
      "dead_lettered",     "superseded",    "gone"};
  const auto i = static_cast<std::size_t>(o);
  return i < k_names.size() ? k_names[i] : "unknown";
}

json to_json(const replay_reply& r) {
  json summary = json::object();
  for (std::size_t i = 0; i < k_replay_outcomes; ++i)
    summary[std::string(to_string(static_cast<replay_outcome>(i)))] = r.summary[i];
  json messages = json::array();
  for (const auto& m : r.messages) {
    json j = {{"partition", m.partition}, {"offset", m.offset}, {"outcome", to_string(m.outcome)}};
    if (m.outcome != replay_outcome::gone) {
      j["produced_at_ms"] = m.produced_at_ms;
      j["attempts"] = m.attempts;
    }
    if (!m.idempotency_key.empty()) j["idempotency_key"] = m.idempotency_key;
    if (!m.tenant_id.empty()) j["tenant_id"] = m.tenant_id;
    if (m.outcome == replay_outcome::in_flight) j["owner"] = m.owner;
    if (m.committed) {
      j["owner"] = m.committed->owner;
      j["committed_at_ms"] = m.committed->committed_at_ms;
      json res = nullptr;
      if (!m.committed->result_json.empty()) {
        res = json::parse(m.committed->result_json, nullptr, false);
        if (res.is_discarded()) res = nullptr;
      }
      j["result"] = std::move(res);
    }
    messages.push_back(std::move(j));
  }
  json out = {{"dry_run", r.dry_run},
              {"summary", std::move(summary)},
              {"replayed", r.replayed},
              {"messages", std::move(messages)}};
  out["next"] = r.next ? json(fmt::format("{}:{}", r.next->partition, r.next->offset)) : json();
  return out;
}

}  // namespace onceq::http
