#pragma once

#include <string>
#include <string_view>

namespace onceq {

// Error codes of the whole server. Values are explicit and never renumbered:
// they appear in logs and tests. http/error_table.cpp maps each one to an
// HTTP status and the wire name (docs/API.md "Errors").
enum class errc : int {
  ok = 0,
  invalid_argument = 1,
  unauthenticated = 2,
  permission_denied = 3,
  not_found = 4,
  method_not_allowed = 5,
  already_exists = 6,
  failed_precondition = 7,
  payload_too_large = 8,
  resource_exhausted = 9,
  unavailable = 10,
  internal = 11,
  // A read from memory only (store::memory_reads) that would have waited
  // for the disk. Never leaves the shard: it reads the data into memory on
  // its reader thread and runs the command again (shard/shard.hpp). Should
  // one escape, it reads as UNAVAILABLE (503), a retry being right.
  would_block = 12,
};

// Wire name of a code, e.g. "INVALID_ARGUMENT".
std::string_view to_string(errc code) noexcept;

struct error {
  errc code = errc::internal;
  std::string message;
  // resource_exhausted / unavailable: a hint of when a retry may succeed, in
  // ms (http/ sends it as Retry-After and retry_after_ms); 0 = no hint.
  long long retry_after_ms = 0;
  // unavailable, from a node of a cluster that does not lead the command's
  // shard: the node that does, as its position in the cluster file plus 1
  // (its raft id), 0 when none is known. Nothing was done here: http/
  // forwards the request there (docs/API.md, "Clusters").
  unsigned leader = 0;
};

}  // namespace onceq
