#include "shard/disk_reader.hpp"

#include <pthread.h>

#include <fmt/format.h>

namespace onceq {

void disk_reader::start() {
  std::lock_guard lk(mu_);
  if (running_ || thread_.joinable()) return;
  running_ = true;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(),
                       fmt::format("onceq-read-{}", shard_id_).substr(0, 15).c_str());
    run();
  });
}

bool disk_reader::read(storage::read_misses m, std::function<void()> done) {
  {
    std::lock_guard lk(mu_);
    if (!running_) return false;
    queue_.push_back(item{std::move(m), std::move(done)});
    ++reads_;
  }
  cv_.notify_one();
  return true;
}

void disk_reader::stop() {
  {
    std::lock_guard lk(mu_);
    running_ = false;
  }
  cv_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool disk_reader::running() const {
  std::lock_guard lk(mu_);
  return running_;
}

std::uint64_t disk_reader::reads() const noexcept {
  std::lock_guard lk(mu_);
  return reads_;
}

void disk_reader::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return !queue_.empty() || !running_; });
    if (queue_.empty()) return;  // stopped, and everything queued answered
    item it = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    store_.warm(it.misses);
    it.done();
    lk.lock();
  }
}

}  // namespace onceq
