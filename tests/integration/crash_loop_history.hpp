#pragma once

// The client-side history of a crash-loop run and the checker that judges
// it. Pure: no I/O, no clock; the workload (crash_loop.cpp) records what it
// sent and what it was answered, with the machine's wall clock in Unix epoch
// milliseconds (the same clock onceqd uses for lease_expires_at_ms, so the
// two can be compared), and check() lists every broken promise.
//
// Thread safety: none; each workload thread fills its own history and the
// parts are merged with append() before check().

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace onceq::itest::crash_loop {

using millis = std::int64_t;
using position = std::pair<std::uint32_t, std::uint64_t>;  // (partition, offset)

// One produced message as finally answered (after any retries with the same
// dedup id). Unanswered produces (gave up) are not recorded.
struct produce_record {
  std::string dedup_id;  // Idempotency-Key header (or header#i for a batch)
  std::string key;       // envelope.idempotency_key
  position pos;
  bool duplicate = false;  // the answer said "duplicate": true
  millis answered_ms = 0;
};

// One message handed to an owner by one consume answer.
struct delivery_record {
  std::string owner;
  std::string key;       // envelope.idempotency_key
  std::string dedup_id;  // the value: the workload stores the dedup id there
  position pos;
  std::int64_t attempts = 0;
  millis lease_expires_at_ms = 0;
  millis consume_sent_ms = 0;      // before the consume request was written
  millis consume_answered_ms = 0;  // after its whole answer was read
  std::string node;                // the answer's X-Onceq-Node ("" when unknown)
};

// An ack or nack of one delivery, after any retries of the same request.
struct settle_record {
  enum class kind : std::uint8_t { ack, nack };
  enum class outcome : std::uint8_t {
    ok,        // 204, or "acked" in a batch answer
    rejected,  // an error status (409 FAILED_PRECONDITION: fenced)
    unknown,   // no answer (connection lost, server killed): may have applied
  };
  kind what = kind::ack;
  outcome result = outcome::unknown;
  std::string owner;
  std::string key;
  position pos;
  std::int64_t attempts = 0;
  millis sent_ms = 0;      // the first attempt
  millis answered_ms = 0;  // the answer that decided `result` (0 if unknown)
  std::string node;        // that answer's X-Onceq-Node ("" when unknown)
};

struct history {
  std::vector<produce_record> produces;
  std::vector<delivery_record> deliveries;
  std::vector<settle_record> settles;

  void append(history&& other);
};

// The state of each key at the end, from GET /v1/keys ("committed", ...).
using final_key_states = std::map<std::string, std::string>;

struct violation {
  std::string rule;  // short id: "lost_key", "double_ack", ...
  std::string detail;
};

struct figures {
  std::size_t produces_answered = 0;   // distinct dedup ids answered 2xx
  std::size_t produce_duplicates = 0;  // answers with "duplicate": true
  std::size_t keys_answered = 0;       // keys with at least one answered produce
  std::size_t deliveries = 0;
  std::size_t redeliveries = 0;  // deliveries with attempts > 1
  std::size_t acks_ok = 0;
  std::size_t acks_rejected = 0;  // fenced (409)
  std::size_t acks_unknown = 0;
  std::size_t nacks_ok = 0;
  // Messages of committed keys other than the one whose ack committed the
  // key: stored but never committed (auto-acked, or their ack fenced).
  std::size_t key_duplicates_suppressed = 0;
};

// Checks the history against the promises of docs/API.md:
//  lost_key        an answered produce whose key is not committed at the end
//  double_ack      two different deliveries of one key acked successfully
//  after_ack       a key delivered by a consume sent after one of its acks
//                  was answered
//  lease_overlap   two deliveries of one key certainly leased at the same
//                  time: each is certainly live from its consume's answer
//                  until min(lease_expires_at_ms, the first nack/ack sent
//                  for it), and those intervals intersect
//  ack_stole_key   an ack answered ok although, from before it was sent
//                  until after it was answered, another delivery of the
//                  key certainly held the key's lease (it must be 409)
//  id_moved        one dedup id seen at two (partition, offset)
// final_keys must hold every key of an answered produce.
std::vector<violation> check(const history& h, const final_key_states& final_keys);

figures count(const history& h, const final_key_states& final_keys);

// One node's apply trace of one shard (onceqd --apply-trace): a line
// "index tag digest" for each entry its replica applied, the digest of what
// the entry wrote. Lines that do not parse (one being written) are skipped.
struct apply_trace {
  std::string node;
  std::string text;
};

// Compares the traces of one shard's replicas:
//  replay_differs   one node applied an index twice (a restart replayed it)
//                   and wrote something else the second time
//  replicas_parted  two nodes applied an index and wrote different things:
//                   from there their states differ
// At most `listed` violations of each rule, earliest index first; the last
// listed one says how many indexes differ in all.
std::vector<violation> compare_apply_traces(const std::vector<apply_trace>& traces,
                                            std::size_t listed = 5);

}  // namespace onceq::itest::crash_loop
