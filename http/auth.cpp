#include "http/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "broker/validation.hpp"

namespace onceq::http {

namespace {

using json = nlohmann::json;

constexpr std::size_t k_max_name_bytes = 128;

struct scope_name {
  scope s;
  std::string_view name;
};
constexpr scope_name k_scopes[] = {
    {scope::produce, "produce"},
    {scope::consume, "consume"},
    {scope::admin, "admin"},
    {scope::metrics, "metrics"},
};

// Token names become metric label values and log words: a safe alphabet
// means they never need escaping.
bool valid_token_name(std::string_view s) noexcept {
  if (s.empty() || s.size() > k_max_name_bytes) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == ':' || c == '@';
  });
}

bool valid_topic_pattern(std::string_view p) noexcept {
  if (!p.empty() && p.back() == '*') {
    p.remove_suffix(1);
    return p.empty() || (p.find('*') == std::string_view::npos && valid_topic_name(p));
  }
  return valid_topic_name(p);
}

std::optional<sha256_digest> parse_hex_digest(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  sha256_digest d{};
  for (std::size_t i = 0; i < d.size(); ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    d[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return d;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
           return lower(x) == lower(y);
         });
}

// Parse errors leave this file as errc::invalid_argument.
struct bad_file {
  std::string message;
};
[[noreturn]] void fail(std::string message) {
  throw bad_file{std::move(message)};
}

auth_token read_entry(const json& e, std::size_t index) {
  // Until the name is known the entry is named by index alone.
  std::string where = fmt::format("tokens[{}]", index);
  if (!e.is_object()) fail(fmt::format("{} must be an object", where));
  for (const auto& [key, value] : e.items()) {
    (void)value;
    if (key != "name" && key != "token" && key != "token_sha256" && key != "scopes" &&
        key != "topics") {
      fail(fmt::format("{}: unknown field '{}'", where, key));
    }
  }
  auth_token t;
  auto name = e.find("name");
  if (name == e.end() || !name->is_string()) fail(fmt::format("{}.name must be a string", where));
  t.name = name->get<std::string>();
  if (!valid_token_name(t.name)) {
    fail(fmt::format("{}.name must be 1..{} of [A-Za-z0-9._:@-]", where, k_max_name_bytes));
  }
  where = fmt::format("tokens[{}] ('{}')", index, t.name);

  auto plain = e.find("token");
  auto hashed = e.find("token_sha256");
  if ((plain == e.end()) == (hashed == e.end())) {
    fail(fmt::format("{} needs exactly one of token and token_sha256", where));
  }
  if (plain != e.end()) {
    if (!plain->is_string() || plain->get_ref<const std::string&>().empty()) {
      fail(fmt::format("{}.token must be a non-empty string", where));
    }
    t.digest = sha256(plain->get_ref<const std::string&>());
  } else {
    auto d = hashed->is_string() ? parse_hex_digest(hashed->get_ref<const std::string&>())
                                 : std::nullopt;
    if (!d) fail(fmt::format("{}.token_sha256 must be 64 hex digits", where));
    t.digest = *d;
  }

  auto scopes = e.find("scopes");
  if (scopes == e.end() || !scopes->is_array() || scopes->empty()) {
    fail(fmt::format("{}.scopes must be a non-empty array", where));
  }
  for (const auto& s : *scopes) {
    auto sc = s.is_string() ? parse_scope(s.get_ref<const std::string&>()) : std::nullopt;
    if (!sc) fail(fmt::format("{}.scopes: each must be produce, consume, admin or metrics", where));
    t.scopes |= static_cast<unsigned>(*sc);
  }

  auto topics = e.find("topics");
  if (topics == e.end() || !topics->is_array()) {
    fail(fmt::format("{}.topics must be an array", where));
  }
  for (const auto& p : *topics) {
    if (!p.is_string() || !valid_topic_pattern(p.get_ref<const std::string&>())) {
      fail(fmt::format("{}.topics: each must be a topic name or a prefix ending in '*'", where));
    }
    t.topics.push_back(p.get<std::string>());
  }
  return t;
}

}  // namespace

std::string_view to_string(scope s) noexcept {
  for (const auto& n : k_scopes) {
    if (n.s == s) return n.name;
  }
  return "none";
}

std::optional<scope> parse_scope(std::string_view name) noexcept {
  for (const auto& n : k_scopes) {
    if (n.name == name) return n.s;
  }
  return std::nullopt;
}

sha256_digest sha256(std::string_view data) {
  sha256_digest d{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != d.size()) {
    // Only an OpenSSL built without SHA-256 gets here; no token may match then.
    throw std::runtime_error("SHA-256 is unavailable in this OpenSSL");
  }
  return d;
}

bool topic_pattern_matches(std::string_view pattern, std::string_view topic) noexcept {
  if (!pattern.empty() && pattern.back() == '*') {
    return topic.starts_with(pattern.substr(0, pattern.size() - 1));
  }
  return pattern == topic;
}

bool auth_token::covers(std::string_view topic) const noexcept {
  auto any = [&](std::string_view t) {
    return std::any_of(topics.begin(), topics.end(),
                       [&](const std::string& p) { return topic_pattern_matches(p, t); });
  };
  if (any(topic)) return true;
  return topic.starts_with(k_dlq_prefix) && any(topic.substr(k_dlq_prefix.size()));
}

result<auth_table> auth_table::parse(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    // Not e.what(): it quotes the text it stopped at, which may be a token.
    return make_error(errc::invalid_argument, fmt::format("not valid JSON (at byte {})", e.byte));
  }
  try {
    if (!root.is_object()) fail("the top level must be an object");
    for (const auto& [key, value] : root.items()) {
      (void)value;
      if (key != "tokens") fail(fmt::format("unknown field '{}'", key));
    }
    auto tokens = root.find("tokens");
    if (tokens == root.end() || !tokens->is_array()) fail("tokens must be an array");
    auth_table table;
    for (std::size_t i = 0; i < tokens->size(); ++i) {
      auth_token t = read_entry((*tokens)[i], i);
      for (const auto& other : table.tokens_) {
        if (other.name == t.name) fail(fmt::format("tokens[{}]: name '{}' given twice", i, t.name));
        if (k_digest_compare(other.digest.data(), t.digest.data(), t.digest.size()) == 0) {
          fail(fmt::format("tokens[{}] ('{}') has the same token as '{}'", i, t.name, other.name));
        }
      }
      table.tokens_.push_back(std::move(t));
    }
    return table;
  } catch (const bad_file& e) {
    return make_error(errc::invalid_argument, e.message);
  }
}

result<auth_table> auth_table::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(errc::invalid_argument,
                      fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error(errc::invalid_argument, fmt::format("cannot read {}", path));
  auto t = parse(text.str());
  if (!t.ok())
    return make_error(errc::invalid_argument, fmt::format("{}: {}", path, t.err().message));
  return t;
}

std::optional<std::string_view> bearer_token(std::string_view h) noexcept {
  constexpr std::string_view k_scheme = "bearer";
  if (h.size() <= k_scheme.size() || !iequals(h.substr(0, k_scheme.size()), k_scheme)) {
    return std::nullopt;
  }
  h.remove_prefix(k_scheme.size());
  if (h.front() != ' ' && h.front() != '\t') return std::nullopt;
  while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.remove_prefix(1);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
  if (h.empty()) return std::nullopt;
  return h;
}

// ---- authenticator ----------------------------------------------------------

authenticator::authenticator(auth_table initial)
    : table_(std::make_shared<const auth_table>(std::move(initial))) {}

std::shared_ptr<const auth_table> authenticator::table() const {
  std::lock_guard lock(mu_);
  return table_;
}

void authenticator::replace(auth_table next) {
  auto t = std::make_shared<const auth_table>(std::move(next));
  std::lock_guard lock(mu_);
  table_ = std::move(t);
}

result<auth_grant> authenticator::authorize(std::string_view authorization, scope need) {
  auth_grant g;
  if (need == scope::none) return g;
  g.table = table();
  auto presented = bearer_token(authorization);
  g.token = presented ? g.table->find(*presented) : nullptr;
  if (g.token == nullptr) {
    count({}, deny_reason::unauthenticated);
    return make_error(errc::unauthenticated, presented ? "unknown bearer token"
                                                       : "this route needs Authorization: Bearer");
  }
  if (!g.token->has(need)) {
    count(g.token->name, deny_reason::forbidden);
    return make_error(errc::permission_denied, fmt::format("token '{}' lacks the scope '{}'",
                                                           g.token->name, to_string(need)));
  }
  return g;
}

error authenticator::deny_topic(const auth_grant& g, std::string_view topic) {
  const std::string_view name = g.token != nullptr ? std::string_view(g.token->name) : "";
  count(name, deny_reason::forbidden);
  return make_error(errc::permission_denied,
                    fmt::format("token '{}' may not use topic '{}'", name, topic));
}

void authenticator::count(std::string_view name, deny_reason why) {
  std::lock_guard lock(mu_);
  ++denied_[{std::string(name), why}];
}

void authenticator::render_metrics(std::string& out) const {
  out +=
      "# HELP onceq_auth_denied_total Requests refused by authentication (401) or "
      "authorization (403), by token name.\n"
      "# TYPE onceq_auth_denied_total counter\n";
  std::lock_guard lock(mu_);
  for (const auto& [key, n] : denied_) {
    out += fmt::format("onceq_auth_denied_total{{token=\"{}\",reason=\"{}\"}} {}\n", key.first,
                       key.second == deny_reason::unauthenticated ? "unauthenticated" : "forbidden",
                       n);
  }
}

}  // namespace onceq::http
