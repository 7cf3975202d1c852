#pragma once

// Idempotency keys derived from the message (topic setting
// idempotency_key_fields) and content dedup ids (dedup_by_content). The
// JSON lookups and SHA-256 come from the caller's message_inspector, so the
// core includes neither a JSON parser nor a crypto library.

#include <string>
#include <string_view>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "storage/schema.hpp"

namespace onceq {

// Message m's idempotency key under topic t: envelope.idempotency_key if
// given, else its sources' values joined with ':' (after "<topic>:" when
// idempotency_key_include_topic), as "sha256:<hex>" when longer than
// k_max_derived_key_bytes; "" when the topic derives none. A missing source
// or a value that is not JSON is errc::invalid_argument naming the source
// (where prefixes it), or "" when idempotency_key_optional.
result<std::string> message_key(const storage::topic_record& t, const message_in& m,
                                const message_inspector* inspector, std::string_view where);

// The dedup id of a message by its content (dedup_by_content): SHA-256 over
// its key and value, length-prefixed so that no two (key, value) pairs
// share an input.
std::string content_id(const message_inspector& inspector, const message_in& m);

}  // namespace onceq
