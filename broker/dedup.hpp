#pragma once

// Produce dedup: a retried produce with the same dedup id (envelope.msg_id,
// else the Idempotency-Key header) inside the topic's window is answered
// with the first produce's partition and offset instead of being stored
// again. The window counts from the first stored produce and does not slide.

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/commands.hpp"
#include "broker/txn.hpp"
#include "storage/schema.hpp"
#include "storage/store.hpp"

namespace onceq {

class produce_dedup {
 public:
  // Each message's dedup id: its msg_id, else the header for a single
  // message, else "<header>#<i>" for message i of a batch, else
  // content_ids[i] when given (dedup_by_content; "" = none).
  produce_dedup(const produce_cmd& cmd, storage::topic_id topic, millis window_ms,
                const std::vector<std::string>& content_ids = {});

  // Reads the stored records of every id of the request in one MultiGet.
  void load(storage::store& store);

  // Where message i was stored already, if it was: earlier in this request,
  // or by a produce inside the window. Read failures are errors.
  result<std::optional<produced>> earlier(std::size_t i, millis now);

  // Records that message i is stored at `at` (puts its dedup record).
  void remember(std::size_t i, produced at, millis now, txn& tx);

 private:
  static constexpr std::size_t k_none = static_cast<std::size_t>(-1);
  millis window_;
  std::vector<std::string> ids_;
  std::vector<std::string> keys_;
  std::vector<std::size_t> slot_;  // message -> index in keys_, or k_none
  std::vector<result<std::string>> stored_;
  std::unordered_map<std::string, produced> seen_;  // ids within this request
};

}  // namespace onceq
