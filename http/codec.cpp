#include "http/codec.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <initializer_list>
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

// Parse errors travel as this exception inside this file only; every public
// function turns it into errc::invalid_argument.
struct bad_input {
  std::string message;
};

[[noreturn]] void fail(std::string message) {
  throw bad_input{std::move(message)};
}

// Strict decimal: an optional '-', then digits; nothing else.
std::optional<std::int64_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.front() == '+') return std::nullopt;
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Reads the fields of one JSON object, naming them by their path in errors.
// The path is built only for an error: a reader knows its parent and its
// name (or index) in it.
class reader {
 public:
  // The top level (where "") or an object given by name.
  reader(const jvalue& obj, std::string_view where, bool from_query = false)
      : obj_(obj), name_(where), from_query_(from_query) {
    if (!obj_.is_object()) fail(fmt::format("{} must be an object", where_path()));
  }
  // parent's field name.
  reader(const jvalue& obj, const reader& parent, std::string_view name)
      : obj_(obj), parent_(&parent), name_(name) {
    if (!obj_.is_object()) fail(fmt::format("{} must be an object", where_path()));
  }
  // Item index of parent's array field name.
  reader(const jvalue& obj, const reader& parent, std::string_view name, std::size_t index)
      : obj_(obj), parent_(&parent), name_(name), index_(index) {
    if (!obj_.is_object()) fail(fmt::format("{} must be an object", where_path()));
  }

  std::string path(std::string_view name) const {
    std::string where = where_path();
    return where.empty() ? std::string(name) : fmt::format("{}.{}", where, name);
  }

  // Rejects every field not in names (typos must not pass silently).
  void only(std::initializer_list<std::string_view> names) const {
    for (const jmember& m : obj_.members()) {
      if (std::find(names.begin(), names.end(), m.key) == names.end()) {
        fail(fmt::format("unknown field '{}'", path(m.key)));
      }
    }
  }

  bool has(std::string_view name) const { return obj_.find(name) != nullptr; }

  // The field, or nullptr when absent; null is never a valid value.
  const jvalue* find(std::string_view name) const {
    const jvalue* v = obj_.find(name);
    if (v != nullptr && v->is_null()) fail(fmt::format("{} must not be null", path(name)));
    return v;
  }

  const jvalue& require(std::string_view name) const {
    const jvalue* v = find(name);
    if (v == nullptr) fail(fmt::format("{} is required", path(name)));
    return *v;
  }

  std::optional<std::string> opt_string(std::string_view name) const {
    const jvalue* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(fmt::format("{} must be a string", path(name)));
    return std::string(v->str());
  }

  std::string req_string(std::string_view name) const {
    auto s = opt_string(name);
    if (!s) fail(fmt::format("{} is required", path(name)));
    return std::move(*s);
  }

  std::optional<std::int64_t> opt_int(std::string_view name, std::int64_t lo,
                                      std::int64_t hi = k_int_max) const {
    const jvalue* v = find(name);
    if (v == nullptr) return std::nullopt;
    std::int64_t x = 0;
    if (from_query_ && v->is_string()) {
      auto d = parse_decimal(v->str());
      if (!d) fail(fmt::format("{} must be a decimal integer", path(name)));
      x = *d;
    } else if (v->is_integer()) {
      const std::string_view t = v->number_text();
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
      (void)end;  // the parser checked the grammar: all of t is read
      if (ec != std::errc{}) {
        // Past int64. Up to uint64 max it is an integer out of range;
        // beyond, and below int64 min, JSON readers take it as a float.
        std::uint64_t u = 0;
        if (t.front() != '-' &&
            std::from_chars(t.data(), t.data() + t.size(), u).ec == std::errc{}) {
          out_of_range(name, lo, hi);
        }
        fail(fmt::format("{} must be an integer", path(name)));
      }
    } else {
      fail(fmt::format("{} must be an integer", path(name)));
    }
    if (x < lo || x > hi) out_of_range(name, lo, hi);
    return x;
  }

  // true / false (from a query string: the text "true" or "false").
  std::optional<bool> opt_bool(std::string_view name) const {
    const jvalue* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (v->is_bool()) return v->as_bool();
    if (from_query_ && v->is_string() && (v->str() == "true" || v->str() == "false"))
      return v->str() == "true";
    fail(fmt::format("{} must be true or false", path(name)));
  }

  // An array of strings (from a query string: comma-separated text).
  std::optional<std::vector<std::string>> opt_strings(std::string_view name,
                                                      std::size_t max) const {
    const jvalue* v = find(name);
    if (v == nullptr) return std::nullopt;
    std::vector<std::string> out;
    if (from_query_ && v->is_string()) {
      std::string_view rest = v->str();
      while (!rest.empty()) {
        auto comma = rest.find(',');
        out.emplace_back(rest.substr(0, comma));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else {
      if (!v->is_array()) fail(fmt::format("{} must be an array of strings", path(name)));
      for (std::size_t i = 0; i < v->elements().size(); ++i) {
        const jvalue& e = v->elements()[i];
        if (!e.is_string()) fail(fmt::format("{}[{}] must be a string", path(name), i));
        out.emplace_back(e.str());
      }
    }
    if (out.size() > max) fail(fmt::format("{} holds at most {} items", path(name), max));
    return out;
  }

  // A fencing token: an integer >= 1.
  std::optional<std::uint64_t> opt_token(std::string_view name) const {
    auto v = opt_int(name, 1);
    if (!v) return std::nullopt;
    return static_cast<std::uint64_t>(*v);
  }

  std::int64_t req_int(std::string_view name, std::int64_t lo, std::int64_t hi = k_int_max) const {
    auto v = opt_int(name, lo, hi);
    if (!v) fail(fmt::format("{} is required", path(name)));
    return *v;
  }

  std::string req_topic(std::string_view name) const {
    std::string s = req_string(name);
    if (!valid_topic_name(s)) {
      fail(fmt::format("{} must match [A-Za-z0-9._-]{{1,200}}", path(name)));
    }
    return s;
  }

  // group, owner: 1..200 bytes.
  std::string req_label(std::string_view name) const {
    std::string s = req_string(name);
    if (s.empty() || s.size() > k_max_label_bytes) {
      fail(fmt::format("{} must be 1..{} bytes", path(name), k_max_label_bytes));
    }
    return s;
  }

  const jvalue& obj() const { return obj_; }

 private:
  static constexpr std::size_t k_no_index = static_cast<std::size_t>(-1);

  // "messages[3].envelope"; "" at the top level.
  std::string where_path() const {
    std::string out = parent_ == nullptr ? std::string(name_) : parent_->path(name_);
    if (index_ != k_no_index) out += fmt::format("[{}]", index_);
    return out;
  }

  [[noreturn]] void out_of_range(std::string_view name, std::int64_t lo, std::int64_t hi) const {
    if (hi == k_int_max) fail(fmt::format("{} must be >= {}", path(name), lo));
    fail(fmt::format("{} must be between {} and {}", path(name), lo, hi));
  }

  const jvalue& obj_;
  const reader* parent_ = nullptr;
  std::string_view name_;
  std::size_t index_ = k_no_index;
  bool from_query_ = false;
};

reader top(const params& p) {
  return reader(p.obj(), "", p.from_query);
}

// Runs fn, turning a bad_input into errc::invalid_argument.
template <class T, class Fn>
result<T> guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const bad_input& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

const jvalue& require_array(const reader& r, std::string_view name, std::size_t max) {
  const jvalue& a = r.require(name);
  if (!a.is_array()) fail(fmt::format("{} must be an array", r.path(name)));
  if (a.empty() || a.size() > max) {
    fail(fmt::format("{} must hold 1..{} items", r.path(name), max));
  }
  return a;
}

void read_envelope(const reader& r, message_in& m) {
  r.only({"idempotency_key", "tenant_id", "run_id", "step_id", "parent_step_id", "target_topic",
          "partition_override", "deadline", "retry_policy", "msg_id", "key_ttl_ms", "delay_ms",
          "headers"});
  if (auto v = r.opt_string("idempotency_key")) m.idempotency_key = std::move(*v);
  if (auto v = r.opt_string("tenant_id")) m.tenant_id = std::move(*v);
  if (auto v = r.opt_string("msg_id")) m.msg_id = std::move(*v);
  // Echoed to consumers only; checked for type.
  for (std::string_view name : {"run_id", "step_id", "parent_step_id", "target_topic"}) {
    const jvalue* v = r.find(name);
    if (v != nullptr && !v->is_string()) fail(fmt::format("{} must be a string", r.path(name)));
  }
  m.partition_override = r.opt_int("partition_override", 0, k_u32_max);
  m.key_ttl_ms = r.opt_int("key_ttl_ms", 0);
  m.delay_ms = r.opt_int("delay_ms", 0);
  if (auto d = r.opt_string("deadline")) {
    auto ms = parse_rfc3339(*d);
    if (!ms.ok()) fail(fmt::format("{} is {}", r.path("deadline"), ms.err().message));
    m.deadline_ms = *ms;
  }
  if (const jvalue* rp = r.find("retry_policy")) {
    reader p(*rp, r, "retry_policy");
    p.only({"max_attempts", "backoff_ms", "max_backoff_ms"});
    m.retry.max_attempts = p.opt_int("max_attempts", 0);
    m.retry.backoff_ms = p.opt_int("backoff_ms", 0);
    m.retry.max_backoff_ms = p.opt_int("max_backoff_ms", 0);
  }
  if (const jvalue* h = r.find("headers")) {
    if (!h->is_object()) fail(fmt::format("{} must be an object", r.path("headers")));
    for (const jmember& hm : h->members()) {
      if (!hm.value.is_string()) {
        fail(fmt::format("{}.{} must be a string", r.path("headers"), hm.key));
      }
    }
  }
  // As the producer wrote it, less whitespace: keys keep their order.
  m.envelope_json = minified(r.obj());
}

message_in read_message(const reader& r) {
  message_in m;
  m.key = r.opt_string("key");
  m.value = r.req_string("value");
  if (m.value.empty()) fail(fmt::format("{} must be a non-empty string", r.path("value")));
  if (const jvalue* env = r.find("envelope")) read_envelope(reader(*env, r, "envelope"), m);
  return m;
}

delivery_ref read_ref(const reader& r) {
  delivery_ref ref;
  ref.topic = r.req_topic("topic");
  ref.group = r.req_label("group");
  ref.owner = r.req_label("owner");
  ref.partition = static_cast<std::uint32_t>(r.req_int("partition", 0, k_u32_max));
  ref.offset = static_cast<std::uint64_t>(r.req_int("offset", 0));
  ref.attempts = r.opt_int("attempts", 0);
  ref.fencing_token = r.opt_token("fencing_token");
  return ref;
}

std::string read_result(const reader& r) {
  const jvalue* res = r.find("result");
  return res == nullptr ? std::string{} : minified(*res);
}

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
    reader r = top(p);
    r.only({"name", "partitions", "lease_ms", "max_attempts", "backoff_ms", "max_backoff_ms",
            "key_ttl_ms", "dedup_window_ms", "retention_ms", "max_backlog_messages",
            "max_backlog_bytes", "max_inflight", "idempotency_key_fields",
            "idempotency_key_include_topic", "idempotency_key_optional", "dedup_by_content",
            "key_conflict", "key_history"});
    create_topic_cmd c;
    c.name = r.req_topic("name");
    c.partitions = r.opt_int("partitions", 1).value_or(1);
    c.settings = defaults;
    auto& s = c.settings;
    s.lease_ms = r.opt_int("lease_ms", 1).value_or(s.lease_ms);
    s.max_attempts = r.opt_int("max_attempts", 0).value_or(s.max_attempts);
    s.backoff_ms = r.opt_int("backoff_ms", 0).value_or(s.backoff_ms);
    s.max_backoff_ms = r.opt_int("max_backoff_ms", 0).value_or(s.max_backoff_ms);
    s.key_ttl_ms = r.opt_int("key_ttl_ms", 0).value_or(s.key_ttl_ms);
    s.dedup_window_ms = r.opt_int("dedup_window_ms", 0).value_or(s.dedup_window_ms);
    s.retention_ms = r.opt_int("retention_ms", 0).value_or(s.retention_ms);
    s.max_backlog_messages = r.opt_int("max_backlog_messages", 0).value_or(s.max_backlog_messages);
    s.max_backlog_bytes = r.opt_int("max_backlog_bytes", 0).value_or(s.max_backlog_bytes);
    s.max_inflight = r.opt_int("max_inflight", 0).value_or(s.max_inflight);
    // Source syntax (root, empty segments) is the broker's rule
    // (validate_key_fields); the types are checked here.
    if (auto f = r.opt_strings("idempotency_key_fields", k_max_key_fields))
      s.idempotency_key_fields = std::move(*f);
    s.idempotency_key_include_topic =
        r.opt_bool("idempotency_key_include_topic").value_or(s.idempotency_key_include_topic);
    s.idempotency_key_optional =
        r.opt_bool("idempotency_key_optional").value_or(s.idempotency_key_optional);
    s.dedup_by_content = r.opt_bool("dedup_by_content").value_or(s.dedup_by_content);
    if (auto kc = r.opt_string("key_conflict")) {
      if (*kc == "hold") {
        s.key_conflict = topic_settings::conflict::hold;
      } else if (*kc == "supersede") {
        s.key_conflict = topic_settings::conflict::supersede;
      } else {
        fail(fmt::format("key_conflict must be \"hold\" or \"supersede\", got \"{}\"", *kc));
      }
    }
    s.key_history = r.opt_bool("key_history").value_or(s.key_history);
    return c;
  });
}

result<void> parse_envelope(const jvalue& env, message_in& m, std::string_view where) {
  try {
    read_envelope(reader(env, where), m);
    return {};
  } catch (const bad_input& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

result<produce_request> parse_produce(const params& p, std::string_view idempotency_header) {
  return guarded<produce_request>([&] {
    reader r = top(p);
    produce_request out;
    if (r.has("messages")) {
      r.only({"topic", "messages", "skip_if_committed"});
      out.batch = true;
      out.cmd.topic = r.req_topic("topic");
      const auto msgs = require_array(r, "messages", k_max_batch).elements();
      out.cmd.messages.reserve(msgs.size());
      for (std::size_t i = 0; i < msgs.size(); ++i) {
        reader m(msgs[i], r, "messages", i);
        m.only({"key", "value", "envelope"});
        out.cmd.messages.push_back(read_message(m));
      }
    } else {
      r.only({"topic", "key", "value", "envelope", "skip_if_committed"});
      out.cmd.topic = r.req_topic("topic");
      out.cmd.messages.push_back(read_message(r));
    }
    if (auto groups = r.opt_strings("skip_if_committed", k_max_skip_groups))
      out.cmd.skip_if_committed = std::move(*groups);
    out.cmd.inspector = &json_inspector();
    if (idempotency_header.size() > k_max_idempotency_header) {
      fail(fmt::format("the Idempotency-Key header must be at most {} bytes",
                       k_max_idempotency_header));
    }
    out.cmd.idempotency_header = std::string(idempotency_header);
    return out;
  });
}

result<consume_request> parse_consume(const params& p) {
  return guarded<consume_request>([&] {
    reader r = top(p);
    r.only({"topic", "group", "owner", "lease_ms", "max_messages", "wait_ms", "deadline_ms",
            "deadline_rfc3339"});
    consume_request out;
    out.cmd.topic = r.req_topic("topic");
    out.cmd.group = r.req_label("group");
    out.cmd.owner = r.req_label("owner");
    out.cmd.lease_ms = r.opt_int("lease_ms", 1);
    auto max = r.opt_int("max_messages", 1, static_cast<std::int64_t>(k_max_batch));
    out.stream = !max.has_value();
    out.cmd.max_messages = max.value_or(1);
    out.wait_ms = r.opt_int("wait_ms", 0, k_max_wait_ms).value_or(0);
    out.cmd.deadline_ms = r.opt_int("deadline_ms", 0);
    if (auto d = r.opt_string("deadline_rfc3339")) {
      if (out.cmd.deadline_ms) fail("give deadline_ms or deadline_rfc3339, not both");
      auto ms = parse_rfc3339(*d);
      if (!ms.ok()) fail(fmt::format("deadline_rfc3339 is {}", ms.err().message));
      out.cmd.deadline_ms = *ms;
    }
    return out;
  });
}

result<ack_request> parse_ack(const params& p) {
  return guarded<ack_request>([&]() -> ack_request {
    reader r = top(p);
    if (r.has("acks")) {
      r.only({"topic", "group", "owner", "acks"});
      ack_batch_cmd b;
      b.topic = r.req_topic("topic");
      b.group = r.req_label("group");
      b.owner = r.req_label("owner");
      const auto acks = require_array(r, "acks", k_max_batch).elements();
      b.acks.reserve(acks.size());
      for (std::size_t i = 0; i < acks.size(); ++i) {
        reader a(acks[i], r, "acks", i);
        a.only({"partition", "offset", "attempts", "result", "fencing_token"});
        ack_item item;
        item.partition = static_cast<std::uint32_t>(a.req_int("partition", 0, k_u32_max));
        item.offset = static_cast<std::uint64_t>(a.req_int("offset", 0));
        item.attempts = a.opt_int("attempts", 0);
        item.fencing_token = a.opt_token("fencing_token");
        item.result_json = read_result(a);
        b.acks.push_back(std::move(item));
      }
      return b;
    }
    r.only(
        {"topic", "group", "owner", "partition", "offset", "attempts", "result", "fencing_token"});
    ack_cmd c;
    c.ref = read_ref(r);
    c.result_json = read_result(r);
    return c;
  });
}

result<nack_cmd> parse_nack(const params& p) {
  return guarded<nack_cmd>([&] {
    reader r = top(p);
    r.only({"topic", "group", "owner", "partition", "offset", "attempts", "fencing_token", "reason",
            "error", "delay_ms"});
    nack_cmd c;
    c.ref = read_ref(r);
    // "error" is DriftQ's name for the reason.
    if (r.has("reason") && r.has("error")) fail("give reason or error, not both");
    if (auto reason = r.opt_string("reason")) c.reason = std::move(*reason);
    if (auto error = r.opt_string("error")) c.reason = std::move(*error);
    c.delay_ms = r.opt_int("delay_ms", 0);
    return c;
  });
}

result<extend_cmd> parse_extend(const params& p) {
  return guarded<extend_cmd>([&] {
    reader r = top(p);
    r.only({"topic", "group", "owner", "partition", "offset", "attempts", "fencing_token",
            "lease_ms"});
    extend_cmd c;
    c.ref = read_ref(r);
    c.lease_ms = r.req_int("lease_ms", 1);
    return c;
  });
}

result<key_request> parse_key_query(const params& p) {
  return guarded<key_request>([&] {
    reader r = top(p);
    r.only({"topic", "group", "key", "tenant_id", "wait_ms"});
    key_request out;
    out.q.topic = r.req_topic("topic");
    out.q.group = r.req_label("group");
    out.q.key = r.req_string("key");
    if (out.q.key.empty()) fail("key must be a non-empty string");
    out.q.tenant_id = r.opt_string("tenant_id").value_or("");
    out.wait_ms = r.opt_int("wait_ms", 0, k_max_wait_ms).value_or(0);
    return out;
  });
}

result<key_query> parse_key_history_query(const params& p) {
  return guarded<key_query>([&] {
    reader r = top(p);
    r.only({"topic", "group", "key", "tenant_id"});
    key_query q;
    q.topic = r.req_topic("topic");
    q.group = r.req_label("group");
    q.key = r.req_string("key");
    if (q.key.empty()) fail("key must be a non-empty string");
    q.tenant_id = r.opt_string("tenant_id").value_or("");
    return q;
  });
}

result<redrive_cmd> parse_redrive(const params& p) {
  return guarded<redrive_cmd>([&] {
    reader r = top(p);
    r.only({"topic", "max_messages"});
    redrive_cmd c;
    c.topic = r.req_topic("topic");
    c.max_messages = r.opt_int("max_messages", 1);
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

std::string ack_outcomes_json(const std::vector<ack_outcome>& outcomes) {
  std::string out;
  out.reserve(16 + outcomes.size() * 64);
  out += R"({"results":[)";
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
  out += "]}";
  return out;
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
    jdoc d;
    if (!d.parse(doc)) return make_error(errc::invalid_argument, "the document is not JSON");
    const jvalue* v = &d.root();
    std::string_view rest = dot_path;
    for (;;) {
      auto dot = rest.find('.');
      if (!v->is_object()) return make_error(errc::not_found, "absent");
      v = v->find(rest.substr(0, dot));
      if (v == nullptr) return make_error(errc::not_found, "absent");
      if (dot == std::string_view::npos) break;
      rest.remove_prefix(dot + 1);
    }
    switch (v->type()) {
      case jtype::null:
        return make_error(errc::not_found, "null");
      case jtype::string:
        return std::string(v->str());
      case jtype::number:
        return std::string(v->number_text());
      case jtype::boolean:
        return std::string(v->as_bool() ? "true" : "false");
      default:
        return make_error(errc::invalid_argument, "names an object or array, not a value");
    }
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
