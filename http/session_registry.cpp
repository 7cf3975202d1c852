#include "http/session_registry.hpp"

#include <algorithm>

#include "http/session.hpp"

namespace onceq::http {

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
