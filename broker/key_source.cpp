#include "broker/key_source.hpp"

#include <fmt/format.h>

#include "broker/limits.hpp"

namespace onceq {

namespace {

error no_inspector() {
  return make_error(errc::internal, "derived keys need a message inspector (none was given)");
}

}  // namespace

result<std::string> message_key(const storage::topic_record& t, const message_in& m,
                                const message_inspector* inspector, std::string_view where) {
  const auto& s = t.settings;
  if (!m.idempotency_key.empty() || s.idempotency_key_fields.empty()) return m.idempotency_key;
  if (inspector == nullptr) return no_inspector();
  std::string key;
  bool first = true;
  if (s.idempotency_key_include_topic) {
    key = t.name;
    first = false;
  }
  for (const auto& source : s.idempotency_key_fields) {
    const auto dot = source.find('.');
    const std::string_view root = std::string_view(source).substr(0, dot);
    const std::string_view path = std::string_view(source).substr(dot + 1);
    const std::string_view doc = root == "envelope" ? std::string_view(m.envelope_json) : m.value;
    result<std::string> v = doc.empty() ? result<std::string>(make_error(errc::not_found, ""))
                                        : inspector->field(doc, path);
    if (!v.ok()) {
      if (s.idempotency_key_optional) return std::string();
      if (v.code() == errc::not_found)
        return make_error(errc::invalid_argument,
                          fmt::format("{}: idempotency key source '{}' is missing", where, source));
      return make_error(errc::invalid_argument, fmt::format("{}: idempotency key source '{}': {}",
                                                            where, source, v.err().message));
    }
    if (!first) key += ':';
    first = false;
    key += *v;
  }
  if (key.size() > k_max_derived_key_bytes) return "sha256:" + inspector->sha256_hex(key);
  return key;
}

std::string content_id(const message_inspector& inspector, const message_in& m) {
  std::string in;
  const std::string_view key = m.key ? std::string_view(*m.key) : std::string_view{};
  in.reserve(24 + key.size() + m.value.size());
  in += m.key ? fmt::format("{}:", key.size()) : std::string("-:");
  in += key;
  in += m.value;
  return "content:" + inspector.sha256_hex(in);
}

}  // namespace onceq
