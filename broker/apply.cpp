#include "broker/apply.hpp"

#include <algorithm>
#include <utility>

namespace onceq {

result<log_reply> apply_entry(broker& b, log_clock& time, const log_entry& e) {
  time.advance_to(e.now_ms);
  return run_command(b, e.cmd);
}

result<std::optional<log_reply>> apply_at(broker& b, log_clock& time,
                                          storage::applied_index_store& applied,
                                          std::uint64_t index, const log_entry& e) {
  if (index <= applied.applied().index) return std::optional<log_reply>{};
  // The reading the entry runs at, as apply_entry will set it.
  applied.begin({index, std::max(time.now_ms(), e.now_ms)});
  auto r = apply_entry(b, time, e);
  // Whatever the command answered, what it wrote is the entry's: one batch.
  if (auto w = applied.finish(); !w.ok()) {
    return make_error(errc::unavailable,
                      "writing log entry " + std::to_string(index) + ": " + w.err().message);
  }
  if (!r.ok()) return std::move(r).err();
  return std::optional<log_reply>(std::move(*r));
}

void resume_clock(log_clock& time, const storage::applied_index_store& applied) {
  time.advance_to(applied.applied().now_ms);
}

}  // namespace onceq
