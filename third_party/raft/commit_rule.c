/* onceq: raft 0.15's commit rule, fixed (canonical/raft#220, upstream's fix
 * in raft 0.17 is PR #336). See README.md beside this file.
 *
 * Raft dissertation §3.6.2: "Raft never commits log entries from previous
 * terms by counting replicas. Only log entries from the leader's current
 * term are committed by counting replicas." raft 0.15's replicationQuorum()
 * (src/replication.c) sets commit_index = index as soon as a majority of
 * voters has match_index >= index, whatever the term of that entry.
 *
 * scripts/raft-release.sh links this function into Debian's own libraft.a
 * under raft's internal name, replicationQuorum, and gives Debian's compiled
 * function the name onceq_raft015_replication_quorum: raft's two callers
 * (the leader's disk write callback and the AppendEntries result handler,
 * both in replication.c) then reach it first. Earlier entries become
 * committed as before, indirectly, once an entry of the current term at or
 * above them is committed: raft 0.15 always asks about its last stored
 * index, and a leader's new entries are of its term. A single voter still
 * commits its own entries at once: they are of its current term.
 *
 * onceq_raft_commit_rule_stamp is linked into the same object, so a program
 * that links raft's replication code has it exactly when it has the rule:
 * onceqd refers to it weakly and refuses to run a cluster without it
 * (cluster/raft_check.hpp). Its text is also what a stripped binary can be
 * searched for (tests/packaging/dockerfile_test.sh). */
#include <raft.h>

__attribute__((visibility("default"))) extern const char onceq_raft_commit_rule_stamp[];
const char onceq_raft_commit_rule_stamp[] =
    "onceq-raft-commit-rule-1: raft 0.15 counts replicas only for entries of "
    "the current term (canonical/raft#220, upstream PR #336)";

/* raft 0.15 internals (src/log.h, src/replication.h), hidden in the shared
 * library, plain global symbols in the static one. */
raft_term logTermOf(struct raft_log *l, raft_index index);
void replicationQuorum(struct raft *r, const raft_index index);
void onceq_raft015_replication_quorum(struct raft *r, const raft_index index);

void replicationQuorum(struct raft *r, const raft_index index)
{
    if (index <= r->commit_index) {
        return;
    }
    /* Also covers 0: no such entry (raft 0.15 returns in that case too). */
    if (logTermOf(&r->log, index) != r->current_term) {
        return;
    }
    onceq_raft015_replication_quorum(r, index);
}
