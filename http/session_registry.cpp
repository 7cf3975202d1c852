#include "http/session_registry.hpp"

#include <algorithm>

#include "http/session.hpp"

namespace onceq::http {

void session_registry::set_loads(std::vector<const loop_load*> loads, cpu_idle::reader idle) {
  loads_ = std::move(loads);
  idle_ = idle ? std::move(idle) : cpu_idle::proc_stat_reader();
  // Zeros: the steady clock's epoch, more than a window before any now.
  spread_turns_ = std::make_unique<std::atomic<std::int64_t>[]>(loads_.size());
}

loop_reading session_registry::reading(std::uint32_t loop,
                                       std::chrono::steady_clock::time_point now) const {
  return loop < loads_.size() ? loads_[loop]->read(now) : loop_reading{};
}

void session_registry::readings(std::chrono::steady_clock::time_point now,
                                std::vector<loop_reading>& out) const {
  out.resize(loads_.size());
  for (std::size_t i = 0; i < loads_.size(); ++i) out[i] = loads_[i]->read(now);
}

std::optional<double> session_registry::idle_cores(std::chrono::steady_clock::time_point now) {
  if (!idle_) return std::nullopt;
  const auto idle = idle_(now);
  stats_.idle_cores_milli.store(idle ? static_cast<std::int64_t>(*idle * 1000.0) : -1,
                                std::memory_order_relaxed);
  return idle;
}

bool session_registry::take_spread_turn(std::uint32_t loop,
                                        std::chrono::steady_clock::time_point now) {
  if (loop >= loads_.size()) return false;
  const std::int64_t t = now.time_since_epoch().count();
  const std::int64_t gap =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(loop_load::k_window).count();
  std::int64_t last = spread_turns_[loop].load(std::memory_order_relaxed);
  if (t - last < gap) return false;
  return spread_turns_[loop].compare_exchange_strong(last, t, std::memory_order_relaxed);
}

std::uint64_t session_registry::add(std::weak_ptr<session> s) {
  std::lock_guard lock(mu_);
  std::uint64_t id = ++next_id_;
  sessions_.emplace_back(id, std::move(s));
  stats_.open.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void session_registry::remove(std::uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(sessions_.begin(), sessions_.end(),
                         [id](const auto& e) { return e.first == id; });
  if (it == sessions_.end()) return;
  stats_.open.fetch_sub(1, std::memory_order_relaxed);
  *it = std::move(sessions_.back());
  sessions_.pop_back();
}

std::size_t session_registry::size() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

void session_registry::stop_all() {
  stopping_.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<session>> live;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, weak] : sessions_) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  // Outside the lock: a session may unregister as its last reference goes.
  for (auto& s : live) s->shutdown();
}

}  // namespace onceq::http
