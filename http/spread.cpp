#include "http/spread.hpp"

namespace onceq::http {

namespace {
bool has_room(loop_reading r) noexcept {
  return r.busy <= k_room && r.waiting < k_scarce;
}
bool cores_to_spare(std::optional<double> idle_cores) noexcept {
  return idle_cores && *idle_cores >= k_spare_cores;
}
}  // namespace

bool stays_off(loop_reading owner, loop_reading here, std::optional<double> idle_cores) noexcept {
  return cores_to_spare(idle_cores) && owner.busy >= k_stay_away && owner.waiting < k_scarce &&
         has_room(here);
}

std::optional<std::uint32_t> spread_to(std::uint32_t home, std::span<const loop_reading> loops,
                                       std::optional<double> idle_cores) noexcept {
  if (home >= loops.size() || !cores_to_spare(idle_cores)) return std::nullopt;
  const loop_reading self = loops[home];
  if (self.busy < k_saturated || self.waiting >= k_scarce) return std::nullopt;
  std::optional<std::uint32_t> best;
  for (std::uint32_t i = 0; i < loops.size(); ++i) {
    if (i == home || !has_room(loops[i])) continue;
    if (!best || loops[i].busy < loops[*best].busy) best = i;
  }
  return best;
}

}  // namespace onceq::http
