#pragma once

// JSON <-> broker commands and replies (docs/API.md "Endpoints").
//
// Parsing is strict: unknown fields are rejected (except inside
// envelope.headers and result), integers must be JSON integers (from a
// query string: decimal text), strings must be strings, null is never
// valid, and every range the spec states is checked. Every parse error is
// errc::invalid_argument with a message naming the field. Commands own
// their strings: they outlive the params they were read from.
//
// Each parse_* reads its params in one pass (http/params.hpp: simdjson
// on-demand for JSON bodies), fields in the order the client wrote them:
// a body with several faults is answered with the first one met.
//
// Thread safety: free functions without shared state.
//
// One file a resource, each with the request it reads and the replies it
// writes: http/codec/topics, produce, consume, ack (with nack and extend),
// keys, dlq (redrive, envelope.dlq), replay; http/codec/inspector (the broker's
// message inspector); http/codec/common (the limits checked, dump). The
// readers they share are http/codec/detail.hpp, private to http/codec/.

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "broker/limits.hpp"
#include "http/codec/ack.hpp"
#include "http/codec/common.hpp"
#include "http/codec/consume.hpp"
#include "http/codec/dlq.hpp"
#include "http/codec/inspector.hpp"
#include "http/codec/keys.hpp"
#include "http/codec/outbox.hpp"
#include "http/codec/produce.hpp"
#include "http/codec/replay.hpp"
#include "http/codec/topics.hpp"
#include "http/json_write.hpp"
#include "http/params.hpp"
