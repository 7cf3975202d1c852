#pragma once

// Internal to broker/: workflow steps (docs/DESIGN.md, "Workflow steps"):
// the messages an ack produces, stored in the ack's own txn, and the
// outbox that carries those for topics on other shards.

#include <string>
#include <vector>

#include "broker/commands.hpp"
#include "broker/core.hpp"
#include "broker/txn.hpp"
#include "storage/schema.hpp"

namespace onceq {

// The ack a step's messages come from: the committing key's idem_key ("" if
// the message has none) and the acked message's position.
struct step_source {
  std::string scope;
  position pos;
};

// Stages msgs in tx, in order: a topic of this broker through
// stage_produce (grouped per topic, so one dedup window sees them
// together), any other topic as an outbox record (validated as far as a
// message can be without its topic; the target checks the rest). Answers
// each message's place, in msgs' order. On an error tx may hold part of
// it: the caller rolls back.
result<std::vector<step_produced>> stage_steps(core& c, const std::vector<step_message>& msgs,
                                               const step_source& from, millis now, txn& tx);

// The key record's form of what an ack produced, and back.
std::vector<storage::produced_ref> produced_refs(const std::vector<step_produced>& p);
std::vector<step_produced> step_produced_of(const std::vector<storage::produced_ref>& p);

// Rebuilds the outbox's memory (next sequence, records) from the store.
result<void> recover_outbox(core& c);

}  // namespace onceq
