#include "shard/local_path.hpp"

#include <algorithm>
#include <utility>
#include <variant>

#include "broker/validation.hpp"
#include "shard/shard.hpp"

namespace onceq {

namespace {
using steady = std::chrono::steady_clock;
// Longest the loop sleeps without a deadline: bounds how late a manual or
// adjusted clock is noticed.
constexpr auto k_idle_wait = std::chrono::milliseconds(200);
// How often the loop asks a store that refuses writes to resume.
constexpr auto k_resume_every = std::chrono::milliseconds(500);
// A round goes to an idle syncer before the iteration ends once it is about
// one WAL sync old (shard_options::early_sync_age) and its answers took
// k_early_answer_cost each on average: long commands (batches of 100
// messages: 300+ us each), whose sync then overlaps the next ones. Many
// cheap answers (64 connections of one message each, 16 us) wait for the
// iteration's end instead: a sync of its own for the first few of them cost
// more CPU than the overlap saved (docs/BENCHMARKS.md, "Fourteenth round").
constexpr auto k_early_answer_cost = std::chrono::microseconds(50);
// Runs of a request's step with reads from memory before one that may
// read from the disk on the loop (run_reading): each miss first goes to the
// reader thread, so only a step that missed memory on two runs in a row
// (another read, or blocks evicted again) waits here.
constexpr int k_memory_tries = 3;

template <class T>
bool would_block(const result<T>& r) {
  return !r.ok() && r.code() == errc::would_block;
}
}  // namespace

// The jobs the shard posts to its loop (shard::post: run() there, or
// refuse()); each is also the step run_reading runs again after a miss.
struct local_path::command_step {
  local_path* path;
  log_command cmd;
  reply_fn done;
  bool operator()() { return path->apply(cmd, done); }
  void run() { path->run_reading(std::move(*this)); }
  void refuse(error e) { done(std::move(e)); }
};

struct local_path::read_step {
  local_path* path;
  std::unique_ptr<broker_job> job;
  bool operator()() { return job->run(path->broker_); }
  void run() { path->run_reading(std::move(*this)); }
  void refuse(error e) { job->refuse(std::move(e)); }
};

struct local_path::consume_step {
  local_path* path;
  std::shared_ptr<consume_waiter> w;
  bool operator()() { return path->try_consume(w); }
  void run() { path->run_reading(std::move(*this)); }
  void refuse(error e) { path->shard_.answer(std::move(w), std::move(e)); }
};

struct local_path::key_step {
  local_path* path;
  std::shared_ptr<key_waiter> w;
  bool last;
  bool operator()() { return path->try_key(w, last); }
  void run() { path->run_reading(std::move(*this)); }
  void refuse(error e) { path->shard_.answer(std::move(w), std::move(e)); }
};

local_path::local_path(shard& s, broker& b, storage::store& store, const clock& time)
    : shard_(s), broker_(b), store_(store), clock_(time), reader_(store, s.id()) {}

void local_path::start() {
  // From here on the store is written from the loop: count the writes it
  // had to wait for (onceq_shard_write_stalls_total).
  store_.watch_write_stalls();
  // A request's reads come from memory; what needs the disk is read on the
  // reader thread (run_reading).
  reader_.start();
  reading_from_memory_ = true;
}

void local_path::stop() {
  // The reader answers what it holds first (posted to the loop, which runs
  // those steps again with reads from the disk), then stops.
  reader_.stop();
}

void local_path::write(log_command cmd, reply_fn done) {
  shard_.post(command_step{this, std::move(cmd), std::move(done)});
}

void local_path::read(bool /*fresh: the job's own*/, std::unique_ptr<broker_job> job) {
  shard_.post(read_step{this, std::move(job)});
}

void local_path::consume(std::shared_ptr<consume_waiter> w, bool first) {
  if (first) return shard_.post(consume_step{this, std::move(w)});
  run_reading(consume_step{this, std::move(w)});
}

void local_path::check_key(std::shared_ptr<key_waiter> w, bool first, bool last) {
  if (first) return shard_.post(key_step{this, std::move(w), last});
  run_reading(key_step{this, std::move(w), last});
}

bool local_path::apply(const log_command& cmd, reply_fn& done) {
  auto r = run_command(broker_, cmd);
  if (would_block(r)) return false;
  report_topics(cmd);
  if (!r.ok()) {
    done(std::move(r));
  } else {
    shard_.answer_when_durable(std::move(r), std::move(done));
  }
  return true;
}

void local_path::report_topics(const log_command& cmd) {
  if (!shard_.topic_change_) return;
  auto report = [this](const std::string& name) {
    shard_.topic_change_(name, broker_.get_topic(name).ok());
  };
  if (const auto* c = std::get_if<create_topic_cmd>(&cmd)) {
    report(c->name);
  } else if (const auto* d = std::get_if<delete_topic_cmd>(&cmd)) {
    report(d->name);
    // A DLQ that outlives its topic keeps its own entry (its shard).
    report(dlq_topic_of(d->name));
  }
}

bool local_path::try_consume(const std::shared_ptr<consume_waiter>& w) {
  if (w->acks) {
    // command_traits<consume_after_acks_cmd>, in two steps: the consume
    // may park, or read the disk, after the acks are written.
    auto acked = command_traits<consume_after_acks_cmd>::acks(broker_, *w->acks);
    if (would_block(acked)) return false;
    w->acks.reset();
    if (!acked.ok()) {
      shard_.answer(w, std::move(acked).err());
      return true;
    }
    w->acked = std::move(*acked);
    w->wrote = true;
  }
  auto r = command_traits<consume_cmd>::run(broker_, w->cmd);
  if (would_block(r)) return false;
  shard_.consumed(w, std::move(r));
  return true;
}

bool local_path::try_key(const std::shared_ptr<key_waiter>& w, bool last) {
  auto r = broker_.get_key(w->q);
  if (would_block(r)) return false;
  shard_.key_checked(w, std::move(r), last);
  return true;
}

void local_path::read_then_retry(std::function<bool()> step, int tries) {
  auto misses = store_.take_read_misses();
  auto held = std::make_shared<std::function<bool()>>(std::move(step));
  const bool queued = !misses.empty() && reader_.read(std::move(misses), [this, held, tries] {
    shard_.mailbox_.push([this, held, tries] { retry_reading(std::move(*held), tries); });
  });
  if (!queued) {
    // Nothing to read ahead of it (a store that blocked without saying on
    // what), or the reader is stopping: the disk is read here, on the loop.
    loop_disk_reads_.fetch_add(1, std::memory_order_relaxed);
    (*held)();
  }
}

void local_path::retry_reading(std::function<bool()> step, int tries) {
  if (tries + 1 >= k_memory_tries || !reader_.running()) {
    loop_disk_reads_.fetch_add(1, std::memory_order_relaxed);
    step();  // reads may wait: it ends here
    return;
  }
  bool done = false;
  {
    memory_reads_scope scope(store_);
    done = step();
  }
  if (!done) read_then_retry(std::move(step), tries + 1);
}

void local_path::after_durable(durable_fn fn) {
  if (round_.empty()) round_began_ = steady::now();
  round_.push_back(std::move(fn));
}

std::function<void(result<void>)> local_path::take_round() {
  auto release = [batch = std::move(round_)](result<void> durable) mutable {
    for (auto& fn : batch) fn(durable);
  };
  round_.clear();
  return release;
}

void local_path::flush() {
  if (round_.empty()) return;
  // Every connection of this loop waits for an answer (or has been quiet
  // for a generation): no request can arrive for the loop to apply while
  // the sync runs, so the loop makes it itself rather than wake the idle
  // syncer and be woken by its answers (docs/BENCHMARKS.md, "Eighteenth
  // round", "Twentieth round").
  if (shard_.clients_.all_waiting() && store_.sync_idle()) return store_.sync_here(take_round());
  store_.when_durable(take_round());
  // A store that syncs on its caller does it here, on the loop: one sync
  // for the whole iteration (Redis's beforeSleep). Others sync on their
  // own thread while the loop goes on.
  store_.sync_pending();
}

void local_path::flush_if_disk_idle() {
  if (round_.empty()) return;
  const auto age = steady::now() - round_began_;
  if (age >= shard_.opts_.early_sync_age && age >= k_early_answer_cost * round_.size() &&
      store_.sync_idle())
    store_.when_durable(take_round());
}

void local_path::end_iteration() {
  try_resume();
  broker_.tick();
  // Parked consumers try again where their topic got messages; key waiters
  // check again when a key was committed.
  const auto ready = broker_.take_ready_topics();
  const bool committed = !broker_.take_committed_keys().empty();
  shard_.wake(ready, false, committed);
}

void local_path::try_resume() {
  auto now = steady::now();
  if (!store_.health().writable && now >= next_resume_) {
    next_resume_ = now + k_resume_every;
    auto r = store_.resume();
    // Reopened: writes that were not synced may be gone, so memory follows
    // the store. Not cleared yet: try again later.
    if (r.ok() && *r == storage::resume_outcome::reopened) needs_recover_ = true;
  }
  // A failed rebuild is tried again every iteration.
  if (needs_recover_) needs_recover_ = !broker_.recover().ok();
}

steady::time_point local_path::wake_by(steady::time_point now) const {
  auto wake = now + k_idle_wait;
  if (auto d = broker_.next_deadline()) {
    auto in = std::max<millis>(0, *d - clock_.now_ms());
    wake = std::min(wake, now + std::chrono::milliseconds(in));
  }
  if (!store_.health().writable) wake = std::min(wake, next_resume_);
  return wake;
}

}  // namespace onceq
