#pragma once

// The CLI's verbs, one function each: options in, HTTP calls through
// api_client, text out. main() only parses flags into these structs, so
// the verbs know nothing of CLI11.
//
// Errors: every verb throws cli_error (see exit_code.hpp); an error answer
// of the server becomes "CODE: message" with the exit code of its class.

#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cmd/cli/api_client.hpp"

namespace onceq::cli {

// Where the output goes and what it is attached to: a terminal gets tables
// and progress bars, anything else gets machine-readable text.
struct terminal {
  bool stdout_tty = false;
  bool stderr_tty = false;
};

struct topic_create_options {
  std::string name;
  std::optional<std::int64_t> partitions;
  // ("lease_ms", 1000), ...: only the settings given on the command line,
  // so the server's defaults apply to the rest.
  std::vector<std::pair<std::string, std::int64_t>> settings;
};
void topics_create(api_client& c, const topic_create_options& o, std::ostream& out);
void topics_list(api_client& c, std::ostream& out);
void topics_show(api_client& c, const std::string& name, const terminal& t, std::ostream& out);
void topics_delete(api_client& c, const std::string& name, std::ostream& out);

struct produce_options {
  std::string topic;
  std::vector<std::string> values;  // empty: one message per stdin line
  std::optional<std::string> key;
  std::optional<std::string> idempotency_key;  // envelope.idempotency_key
  // envelope.msg_id; with several messages, message i gets "<msg_id>#<i>"
  // so that a re-run of the same input is deduplicated message by message.
  std::optional<std::string> msg_id;
  std::optional<std::string> envelope;  // a JSON object, the base envelope
  int batch = 1;                        // stdin lines per request, 1..1000
};
// in_size: stdin's size in bytes when it is a regular file (for the
// progress bar), else 0.
void produce(api_client& c, const produce_options& o, std::istream& in, std::uint64_t in_size,
             const terminal& t, std::ostream& out);

struct consume_options {
  std::string topic;
  std::string group;
  std::string owner;
  std::int64_t max = 0;                 // 0 = no limit
  std::optional<std::int64_t> wait_ms;  // default: 0, or 5000 with follow
  std::optional<std::int64_t> lease_ms;
  bool follow = false;
  bool ack = false;
};
// Without follow: leases what is available (waiting up to wait_ms for the
// first message) and stops at the first empty batch or at max. With
// follow: long-polls until SIGINT or max.
void consume(api_client& c, const consume_options& o, const terminal& t, std::ostream& out);

struct delivery_options {
  std::string topic;
  std::string group;
  std::string owner;
  std::int64_t partition = 0;
  std::int64_t offset = 0;
  std::optional<std::int64_t> attempts;
  std::optional<std::string> result;     // ack: JSON
  std::optional<std::string> reason;     // nack
  std::optional<std::int64_t> delay_ms;  // nack
  std::optional<std::int64_t> lease_ms;  // extend (required there)
};
void ack(api_client& c, const delivery_options& o, std::ostream& out);
void nack(api_client& c, const delivery_options& o, std::ostream& out);
void extend(api_client& c, const delivery_options& o, std::ostream& out);

struct key_options {
  std::string topic;
  std::string group;
  std::string key;
  std::optional<std::string> tenant_id;
  std::optional<std::int64_t> wait_ms;
};
void keys_get(api_client& c, const key_options& o, const terminal& t, std::ostream& out);

void dlq_redrive(api_client& c, const std::string& topic, std::optional<std::int64_t> max,
                 std::ostream& out);

struct replay_options {
  std::string topic;
  std::string group;
  // A time range (epoch ms, or RFC 3339 UTC "2026-11-24T14:00:00Z"), or
  // partition with an offset range; the server checks the range.
  std::optional<std::string> from;
  std::optional<std::string> to;
  std::optional<std::int64_t> partition;
  std::optional<std::int64_t> from_offset;
  std::optional<std::int64_t> to_offset;
  bool apply = false;                // false: a dry run
  std::optional<std::int64_t> page;  // max_messages per request
};
// Every page of the range (POST /v1/replay, following next): one table row
// per message, then the totals per outcome (and replayed, with apply).
void replay(api_client& c, const replay_options& o, std::ostream& out);

// "2026-11-24T14:00:00Z" (or with a fraction, or an offset "+01:00") or
// epoch ms as text -> epoch ms; cli_error(usage) otherwise.
std::int64_t epoch_ms_of(const std::string& text, const char* flag);

// One topic, or every topic when topic is empty.
void stats(api_client& c, const std::string& topic, std::ostream& out);

// GET /v1/cluster as two tables: the nodes, then the shards with their
// leader, term, commit and applied index and topics. From a server that
// places shards (its answer has "meta"), then the placement: a line on the
// meta group and its moves, each node's state, replicas and shard
// leaderships, and each shard's replicas (preferred leader first) and
// running move. Fields an older server lacks print as "-".
void cluster_status(api_client& c, std::ostream& out);

// POST /v1/cluster/nodes/{node}/drain: "node n3: draining". The server
// answers 404 for an unknown node (or on a single node), 409 when it
// refuses (the node is drained already), 503 while the meta group has no
// leader (retried like any 503).
void cluster_drain(api_client& c, const std::string& node, std::ostream& out);

// POST /v1/cluster/rebalance: "rebalancing".
void cluster_rebalance(api_client& c, std::ostream& out);

}  // namespace onceq::cli
