#include "storage/rocksdb/fault_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/log.hpp"

namespace onceq::storage {
namespace {

// The retry hint on errors while the store is not writable: the runner asks
// resume() about every 500 ms, and RocksDB's SstFileManager re-checks free
// space every 5 s, so a client retrying after a second sees the store back
// soon after the fault cleared without hammering it before.
constexpr millis k_fault_retry_after_ms = 1'000;

// Written, synced and removed by probe_write().
constexpr const char* k_probe_name = ".onceq-write-probe";
constexpr std::size_t k_probe_bytes = 4096;

const char* reason_name(rocksdb::BackgroundErrorReason r) {
  using R = rocksdb::BackgroundErrorReason;
  switch (r) {
    case R::kFlush:
    case R::kFlushNoWAL:
      return "flush";
    case R::kCompaction:
      return "compaction";
    case R::kWriteCallback:
      return "write";
    case R::kMemTable:
      return "memtable insert";
    case R::kManifestWrite:
    case R::kManifestWriteNoWAL:
      return "manifest write";
  }
  return "background work";
}

// Called on RocksDB's threads, with its DB mutex released; the callbacks
// only take the fault state's lock.
class fault_listener final : public rocksdb::EventListener {
 public:
  using report = std::function<void(std::string)>;
  fault_listener(report on_fault, report on_note)
      : on_fault_(std::move(on_fault)), on_note_(std::move(on_note)) {}

  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* e) override {
    if (e == nullptr || e->ok()) return;
    const std::string what = fmt::format("{} failed: {}", reason_name(reason), e->ToString());
    if (e->severity() >= rocksdb::Status::Severity::kHardError) {
      on_fault_(what);
    } else {
      on_note_(what + " (writes go on; RocksDB retries)");
    }
  }

  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) override {
    if (info.old_bg_error.ok()) return;  // nothing was wrong (RocksDB reports those too)
    if (info.new_bg_error.ok()) {
      on_note_("RocksDB recovered by itself from: " + info.old_bg_error.ToString());
    } else {
      on_note_("RocksDB's own recovery failed: " + info.new_bg_error.ToString());
    }
  }

 private:
  report on_fault_;
  report on_note_;
};

}  // namespace

void fault_state::set(std::string reason) {
  {
    std::lock_guard lk(mu_);
    if (!writable_.load(std::memory_order_relaxed)) return;  // the first reason stays
    reason_ = reason;
    since_ = std::chrono::steady_clock::now();
    writable_.store(false, std::memory_order_release);
  }
  log(log_level::error, "storage", fmt::format("not writable: {}", reason));
}

void fault_state::clear(std::string_view how) {
  std::chrono::steady_clock::duration down{};
  {
    std::lock_guard lk(mu_);
    down = std::chrono::steady_clock::now() - since_;
    reason_.clear();
    writable_.store(true, std::memory_order_release);
  }
  log(log_level::warn, "storage",
      fmt::format("writable again after {} ms ({})",
                  std::chrono::duration_cast<std::chrono::milliseconds>(down).count(), how));
}

void fault_state::update_reason(std::string reason) {
  std::lock_guard lk(mu_);
  if (!writable_.load(std::memory_order_relaxed)) reason_ = std::move(reason);
}

store_health fault_state::health() const {
  // Healthy: no lock (GET /v1/healthz asks every shard's store).
  if (writable_.load(std::memory_order_acquire)) return {true, {}};
  std::lock_guard lk(mu_);
  return {writable_.load(std::memory_order_relaxed), reason_};
}

error fault_state::error_now() const {
  error e = make_error(errc::unavailable, "storage is not writable: " + health().reason);
  e.retry_after_ms = k_fault_retry_after_ms;
  return e;
}

std::shared_ptr<rocksdb::EventListener> make_fault_listener(fault_state& faults) {
  return std::make_shared<fault_listener>(
      [&faults](std::string why) { faults.set(std::move(why)); },
      [](std::string note) { log(log_level::warn, "storage", note); });
}

result<void> probe_write(const std::string& dir) {
  const std::string path = dir + "/" + k_probe_name;
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return make_error(errc::unavailable,
                      fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  const std::array<char, k_probe_bytes> zeros{};
  std::size_t done = 0;
  int failed = 0;
  while (done < zeros.size() && failed == 0) {
    const ssize_t w = ::write(fd, zeros.data() + done, zeros.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      failed = w < 0 ? errno : ENOSPC;
    } else {
      done += static_cast<std::size_t>(w);
    }
  }
  if (failed == 0 && ::fsync(fd) != 0) failed = errno;
  ::close(fd);
  (void)::unlink(path.c_str());  // swallowed: a leftover probe is harmless and rewritten next time
  if (failed != 0) {
    return make_error(errc::unavailable,
                      fmt::format("cannot write {}: {}", path, std::strerror(failed)));
  }
  return {};
}

}  // namespace onceq::storage
