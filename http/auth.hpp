#pragma once

// Bearer-token authentication and per-scope, per-topic authorization
// (docs/SECURITY.md). An auth_table is the parsed --auth-file: immutable
// once built. The authenticator holds the current table, swapped whole on
// SIGHUP, and counts denials for /metrics.
//
// Secrets: a table keeps only the SHA-256 digest of each token, never the
// token. No function here puts a token (presented or configured) into an
// error message; a token's `name` is not secret and may appear in
// messages and metric labels.

#include <openssl/crypto.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.hpp"

namespace onceq::http {

// What a route needs. Bit values: a token holds a set of them.
enum class scope : unsigned {
  none = 0,  // open: no token needed (healthz, version)
  produce = 1,
  consume = 2,
  admin = 4,
  metrics = 8,
};

std::string_view to_string(scope s) noexcept;
// "produce", "consume", "admin", "metrics"; nullopt for anything else.
std::optional<scope> parse_scope(std::string_view name) noexcept;

using sha256_digest = std::array<unsigned char, 32>;
sha256_digest sha256(std::string_view data);

// One "topics" entry against a topic name: an exact name, or a prefix glob
// ending in '*' ("orders.*", "*"). No other wildcard exists.
bool topic_pattern_matches(std::string_view pattern, std::string_view topic) noexcept;

struct auth_token {
  std::string name;  // not secret: logs, messages and metric labels use it
  sha256_digest digest{};
  unsigned scopes = 0;              // bit set of scope
  std::vector<std::string> topics;  // patterns, see topic_pattern_matches

  bool has(scope s) const noexcept { return (scopes & static_cast<unsigned>(s)) != 0; }
  // Whether some pattern covers topic, or covers <t> when topic is the DLQ
  // "dlq.<t>" (a DLQ belongs to whoever may use its topic).
  bool covers(std::string_view topic) const noexcept;
};

// How token digests are compared: OpenSSL's CRYPTO_memcmp, whose time
// depends only on the length, not on where the first difference is.
using digest_compare_fn = int (*)(const void*, const void*, std::size_t);
inline constexpr digest_compare_fn k_digest_compare = &CRYPTO_memcmp;

class auth_table {
 public:
  // The file's JSON text: {"tokens":[{"name","token"|"token_sha256","scopes","topics"}]}.
  // Errors (errc::invalid_argument): bad JSON (position only, never the
  // text around it), unknown or missing fields, a bad name, digest, scope
  // or topic pattern, a name or token given twice. Messages name the entry
  // by index and name, never by its secret.
  static result<auth_table> parse(std::string_view json_text);
  // Reads and parses path; errc::invalid_argument naming path if unreadable.
  static result<auth_table> load(const std::string& path);

  // The entry whose token is `token`, or nullptr. Hashes token and compares
  // the digest with every entry in constant time (no early exit), so the
  // time taken says nothing about how close a guess was or which entry.
  const auth_token* find(std::string_view token) const noexcept {
    return find_with(token, k_digest_compare);
  }
  // find() with the digest comparison given (a memcmp-like function), so
  // that a test can count the comparisons.
  template <class Compare>
  const auth_token* find_with(std::string_view token, Compare compare) const noexcept {
    const sha256_digest presented = sha256(token);
    const auth_token* found = nullptr;
    // Every entry is compared, whatever matched before: no early exit.
    for (const auto& t : tokens_) {
      const bool same = compare(t.digest.data(), presented.data(), presented.size()) == 0;
      if (same) found = &t;
    }
    return found;
  }

  const std::vector<auth_token>& tokens() const noexcept { return tokens_; }

 private:
  std::vector<auth_token> tokens_;
};

// The token of an "Authorization: Bearer <token>" header value (scheme
// case-insensitive); nullopt for another scheme or an empty token.
std::optional<std::string_view> bearer_token(std::string_view authorization) noexcept;

enum class deny_reason { unauthenticated, forbidden };

// What a request was granted. Holds the table it was decided on, so a
// reload during the request changes nothing for it.
struct auth_grant {
  std::shared_ptr<const auth_table> table;
  const auth_token* token = nullptr;  // nullptr: auth is off, everything is allowed

  bool may_use(std::string_view topic) const noexcept {
    return token == nullptr || token->covers(topic);
  }
};

// Thread safety: every member may be called from any thread; the table is
// swapped under a mutex and read as a shared_ptr copy.
class authenticator {
 public:
  explicit authenticator(auth_table initial);

  // The table in force now.
  std::shared_ptr<const auth_table> table() const;
  // Replaces it; requests already granted keep the one they got.
  void replace(auth_table next);

  // Checks the Authorization header value against the current table and
  // the route's scope. errc::unauthenticated (no or unknown token) or
  // errc::permission_denied (a known token without the scope); counted.
  // need == scope::none: always granted, without a token.
  result<auth_grant> authorize(std::string_view authorization, scope need);

  // A granted token that may not use topic: the 403 to answer (counted).
  error deny_topic(const auth_grant& g, std::string_view topic);

  // onceq_auth_denied_total{token,reason} in Prometheus text.
  void render_metrics(std::string& out) const;

 private:
  void count(std::string_view name, deny_reason why);

  mutable std::mutex mu_;
  std::shared_ptr<const auth_table> table_;                              // guarded by mu_
  std::map<std::pair<std::string, deny_reason>, std::uint64_t> denied_;  // guarded by mu_
};

}  // namespace onceq::http
