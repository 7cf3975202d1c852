#include "http/codec/keys.hpp"

#include <optional>

#include "http/codec/detail.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

namespace {

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
    case key_event::kind::replayed:
      return "replayed";
  }
  return "unknown";
}

}  // namespace

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
    if (!e.reason.empty()) j["reason"] = e.reason;
    if (e.what == key_event::kind::committed) j["result_bytes"] = e.result_bytes;
    events.push_back(std::move(j));
  }
  return {{"events", std::move(events)}};
}

}  // namespace onceq::http
