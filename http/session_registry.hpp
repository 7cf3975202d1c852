#pragma once

// What sessions share with the server: the options, the "stopping" flag and
// the set of live sessions (so that stop() can close the idle ones). Held by
// shared_ptr, so sessions may outlive the server object.
//
// Thread safety: every member may be called from any thread.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "http/options.hpp"

namespace onceq::http {

class session;

class session_registry {
 public:
  explicit session_registry(http_options opts) : opts_(std::move(opts)) {}

  const http_options& options() const noexcept { return opts_; }

  std::uint64_t add(std::weak_ptr<session> s);
  void remove(std::uint64_t id);
  std::size_t size() const;

  // Marks the server as stopping and asks every live session to shut down.
  void stop_all();
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

 private:
  const http_options opts_;
  mutable std::mutex mu_;
  std::uint64_t next_id_ = 0;
  std::vector<std::pair<std::uint64_t, std::weak_ptr<session>>> sessions_;
  std::atomic<bool> stopping_{false};
};

}  // namespace onceq::http
