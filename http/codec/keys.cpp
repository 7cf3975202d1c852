#include "http/codec/keys.hpp"

#include <array>
#include <optional>

#include "http/codec/detail.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

namespace {

// Indexed by key_event::kind's values, in declaration order.
constexpr std::array<std::string_view, 11> k_event_names = {"leased",
                                                            "lease_expired",
                                                            "nacked",
                                                            "committed",
                                                            "duplicate_auto_acked",
                                                            "produce_duplicate",
                                                            "produce_already_committed",
                                                            "superseded",
                                                            "failed",
                                                            "replayed",
                                                            "produced"};
static_assert(static_cast<std::size_t>(key_event::kind::produced) + 1 == k_event_names.size());

std::string_view to_string(key_event::kind k) {
  const auto i = static_cast<std::size_t>(k);
  return i < k_event_names.size() ? k_event_names[i] : "unknown";
}

// The fields of a key query (topic, group, key, tenant_id) and, when
// wait_ms is given, the long poll's wait_ms; any other field is unknown.
key_query read_key_query(const params& p, millis* wait_ms) {
  reader r(p);
  key_query q;
  std::optional<std::string> key;
  auto fn = [&](std::size_t i, field& f) {
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
      case 3:
        q.tenant_id = f.str();
        break;
      default:
        *wait_ms = f.integer(0, k_max_wait_ms);
        break;
    }
  };
  if (wait_ms != nullptr) {
    r.each({"topic", "group", "key", "tenant_id", "wait_ms"}, fn);
  } else {
    r.each({"topic", "group", "key", "tenant_id"}, fn);
  }
  if (q.topic.empty()) required(r, "topic");
  if (q.group.empty()) required(r, "group");
  if (!key) required(r, "key");
  if (key->empty()) fail("key must be a non-empty string");
  q.key = std::move(*key);
  return q;
}

}  // namespace

result<key_request> parse_key_query(const params& p) {
  return guarded<key_request>([&] {
    key_request out;
    out.q = read_key_query(p, &out.wait_ms);
    return out;
  });
}

result<key_query> parse_key_history_query(const params& p) {
  return guarded<key_query>([&] { return read_key_query(p, nullptr); });
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

json to_json(const key_history& h) {
  json events = json::array();
  for (const auto& e : h.events) {
    json j = {{"event", to_string(e.what)}, {"at_ms", e.at_ms}};
    switch (e.what) {
      case key_event::kind::produce_committed:
        break;
      case key_event::kind::produced:  // reason: the topic the step produced into
        j["topic"] = e.reason;
        j["partition"] = e.partition;
        j["offset"] = e.offset;
        break;
      case key_event::kind::produce_duplicate:
      case key_event::kind::duplicate_auto_acked:
      case key_event::kind::superseded:
      case key_event::kind::replayed:
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
    if (!e.reason.empty() && e.what != key_event::kind::produced) j["reason"] = e.reason;
    if (e.what == key_event::kind::committed) j["result_bytes"] = e.result_bytes;
    events.push_back(std::move(j));
  }
  return {{"events", std::move(events)}};
}

}  // namespace onceq::http
