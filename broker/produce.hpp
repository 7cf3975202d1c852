#pragma once

// Internal to broker/: the produce that POST /v1/produce and an ack's
// produce list (a workflow step's next messages) share.

#include <string_view>

#include "broker/commands.hpp"
#include "broker/core.hpp"
#include "broker/txn.hpp"

namespace onceq {

// Stages cmd's messages into t in tx, exactly as broker::produce stores
// them (dedup window, derived keys, skip_if_committed, backlog caps), with
// the memory side as tx's effect. cmd.topic names t. On an error tx may
// hold part of it: the caller drops tx or rolls back to its savepoint.
result<produce_reply> stage_produce(core& c, topic& t, const produce_cmd& cmd, millis now, txn& tx);

// The checks of one message that need no topic (a message for another
// shard's topic; its target checks the rest). where: its place in errors,
// e.g. "produce[2]." ("" for none).
result<void> validate_produced_message(const message_in& m, std::string_view where, millis now,
                                       const broker_options& opts);

}  // namespace onceq
