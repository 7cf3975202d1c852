// meta_machine: the meta group's state machine (meta.hpp).

#include "cluster/meta.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace onceq::cluster {

meta_machine::meta_machine(std::size_t shards) : s_(meta_state::empty(0, shards)) {}

std::string meta_machine::apply(std::uint64_t index, std::string_view entry) {
  auto cmd = decode_command(entry);
  std::string reply;
  std::lock_guard lock(mu_);
  if (!cmd.ok()) {
    reply = fmt::format("refused: {}", cmd.err().message);
  } else if (auto r = apply_command(s_, *cmd); !r.ok()) {
    reply = fmt::format("refused: {}", r.err().message);
  } else {
    reply = std::string(k_meta_ok);
  }
  applied_ = index;
  changed_.notify_all();
  return reply;
}

std::string meta_machine::snapshot() {
  std::lock_guard lock(mu_);
  return encode(s_);
}

void meta_machine::restore(std::string_view snapshot) {
  auto s = decode_state(snapshot);
  if (!s.ok()) throw std::runtime_error(fmt::format("meta snapshot: {}", s.err().message));
  std::lock_guard lock(mu_);
  // The shard count is fixed (--shards, the same on every node); a
  // snapshot of another count would not fit.
  if (s->shards.size() != s_.shards.size()) {
    throw std::runtime_error(fmt::format("meta snapshot of {} shards; this node has {}",
                                         s->shards.size(), s_.shards.size()));
  }
  s_ = std::move(*s);
  changed_.notify_all();
}

meta_state meta_machine::state() const {
  std::lock_guard lock(mu_);
  return s_;
}

std::uint64_t meta_machine::applied() const {
  std::lock_guard lock(mu_);
  return applied_;
}

std::uint64_t meta_machine::wait_past(std::uint64_t after,
                                      std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return applied_ > after; });
  return applied_;
}

std::vector<member> meta_members(std::size_t n) {
  const std::size_t voters = n >= 5 ? 5 : std::min<std::size_t>(n, 3);
  std::vector<member> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(member{i + 1, i < voters ? member_role::voter : member_role::standby});
  }
  return out;
}

}  // namespace onceq::cluster
