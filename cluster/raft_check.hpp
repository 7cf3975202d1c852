#pragma once

// raft_check: whether this binary may run a node of a cluster. raft 0.15
// as Debian ships it commits an entry of an earlier term by counting
// replicas (canonical/raft#220, Raft's Figure 8): an entry answered to a
// client can later be overwritten. onceq links Debian's library with
// upstream's rule linked in (scripts/raft-release.sh, third_party/raft/),
// and cluster/CMakeLists.txt refuses to configure without it; this is the
// same guard at run time, for a binary that was linked some other way.
//
// Two independent proofs, both required:
// - the stamp: third_party/raft/commit_rule.c defines
//   onceq_raft_commit_rule_stamp in the object that holds the rule (raft's
//   replication code); this file refers to it weakly, so it is null in a
//   binary linked with any other raft.
// - the probe: a leader re-elected in a later term, whose entry of the
//   earlier term is stored by every voter, on raft's own deterministic
//   fixture (raft/fixture.h: simulated time, network and disks; no
//   threads, sockets or files; about a millisecond). With the rule that
//   entry stays uncommitted; without it the leader commits it.
//
// onceqd calls check_raft() before it opens a cluster and refuses to start
// when it fails. Thread safety: any thread; no shared state.

#include <string_view>

#include "base/result.hpp"

namespace onceq::cluster {

// The stamp's text on success (onceqd logs it). Errors:
// errc::failed_precondition: clustering is not built into this binary
// (-DONCEQ_CLUSTER=OFF), or the raft it linked lacks the rule (no stamp, or
// the probe saw an earlier term's entry committed); errc::internal: the
// probe could not run to its end (the message says where).
result<std::string_view> check_raft();

// The parts of check_raft, for tests.
// The stamp linked into this binary, "" when there is none.
std::string_view raft_commit_rule_stamp() noexcept;

enum class commit_rule_probe {
  current_term_only,     // the earlier term's entry stayed uncommitted: the rule holds
  counts_earlier_terms,  // the leader committed it by counting replicas: canonical/raft#220
  not_built_in,          // -DONCEQ_CLUSTER=OFF: no raft in this binary
};
// Runs the probe. Errors: errc::internal (the fixture failed, or a step of
// the scenario did not happen within its bound of simulated time).
result<commit_rule_probe> probe_commit_rule();

}  // namespace onceq::cluster
