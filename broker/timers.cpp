#include "broker/timers.hpp"

namespace onceq {

std::vector<timer> timer_queue::take_due(millis now) {
  std::vector<timer> out;
  while (!heap_.empty() && heap_.top().at <= now) {
    out.push_back(heap_.top());
    heap_.pop();
  }
  return out;
}

std::optional<millis> timer_queue::next() const {
  if (heap_.empty()) return std::nullopt;
  return heap_.top().at;
}

}  // namespace onceq
