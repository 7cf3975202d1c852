#include "shard/outbox_relay.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/log.hpp"
#include "broker/limits.hpp"

namespace onceq {

namespace {

// A target that did not take an entry now, but may later.
bool retry_later(errc code) {
  return code == errc::resource_exhausted || code == errc::unavailable ||
         code == errc::would_block || code == errc::internal;
}

step_produced outcome_of(const std::string& topic, const outbox_appended& a) {
  step_produced p;
  p.topic = topic;
  p.outbox_seq = a.seq;
  if (a.code != errc::ok) {
    p.code = a.code;
    p.message = a.message;
    return p;
  }
  p.duplicate = a.duplicate;
  p.no_position = !a.stored && !a.duplicate;
  p.partition = a.partition;
  p.offset = a.offset;
  return p;
}

}  // namespace

// Counts a call to a shard whose answer holds the relay.
class outbox_relay::call_guard {
 public:
  explicit call_guard(outbox_relay& r) : r_(&r) { r_->calls_.fetch_add(1); }
  call_guard(call_guard&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  call_guard(const call_guard&) = delete;
  call_guard& operator=(const call_guard&) = delete;
  call_guard& operator=(call_guard&&) = delete;
  ~call_guard() {
    if (r_ != nullptr) r_->calls_.fetch_sub(1);
  }

 private:
  outbox_relay* r_;
};

// One pass's answers from its targets, collected until the last one.
struct outbox_relay::pass_state {
  std::mutex mu;
  std::size_t waiting = 0;  // targets not answered yet
  std::map<std::uint64_t, std::string> topics;
  std::vector<outbox_appended> done;
  std::map<std::uint64_t, step_produced> taken;
  bool more = false;
};

outbox_relay::outbox_relay(shard_set& shards, deliver_fn deliver)
    : shards_(shards), deliver_(std::move(deliver)) {
  if (!deliver_) {
    deliver_ = [this](std::uint32_t target, outbox_append_cmd cmd,
                      std::function<void(result<std::vector<outbox_appended>>)> done) {
      shards_.at(target).submit(std::move(cmd), std::move(done));
    };
  }
  for (std::size_t i = 0; i < shards_.size(); ++i)
    sources_.push_back(std::make_unique<source_state>());
}

outbox_relay::~outbox_relay() {
  stop();
}

void outbox_relay::start() {
  std::lock_guard lock(run_mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(run_mu_);
    while (!stopping_) {
      run_cv_.wait_for(lock, k_retry_ms, [this] { return stopping_; });
      if (stopping_) break;
      lock.unlock();
      for (std::uint32_t s = 0; s < sources_.size(); ++s) kick_fresh(s);
      lock.lock();
    }
  });
}

void outbox_relay::stop() {
  {
    std::lock_guard lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  stopped_.store(true);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (calls_.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void outbox_relay::kick_fresh(std::uint32_t source) {
  if (source >= sources_.size()) return;
  {
    std::lock_guard lock(sources_[source]->mu);
    sources_[source]->fresh_next = true;
  }
  kick(source);
}

void outbox_relay::kick(std::uint32_t source) {
  if (source >= sources_.size() || stopped_.load()) return;
  auto& s = *sources_[source];
  std::uint64_t pass = 0;
  bool fresh = false;
  {
    std::lock_guard lock(s.mu);
    if (s.running) {
      s.again = true;
      return;
    }
    s.running = true;
    pass = ++s.pass;
    fresh = std::exchange(s.fresh_next, false);
  }
  run_pass(source, pass, fresh);
}

void outbox_relay::flush(std::uint32_t source, std::vector<std::uint64_t> seqs, flushed_fn done) {
  if (source >= sources_.size()) {
    std::map<std::uint64_t, step_produced> none;
    for (auto seq : seqs) none[seq].pending = true;
    return done(std::move(none));
  }
  auto& s = *sources_[source];
  {
    std::lock_guard lock(s.mu);
    // The pass running now (if any) may have read the outbox before these
    // entries were in it: the next one answers.
    for (auto seq : seqs) s.durable_upto = std::max(s.durable_upto, seq);
    s.waiters.push_back(waiter{std::move(seqs), std::move(done), s.pass + 1});
  }
  kick(source);
}

void outbox_relay::run_pass(std::uint32_t source, std::uint64_t pass, bool fresh) {
  shards_.at(source).query<std::vector<outbox_entry>>(
      fresh, [](broker& b) { return b.outbox_pending(k_max_batch); },
      [this, source, pass, fresh,
       guard = std::make_shared<call_guard>(*this)](result<std::vector<outbox_entry>> r) {
        if (!r.ok() || r->empty()) {
          took(source, pass, {});
          return end_pass(source, false);
        }
        auto st = std::make_shared<pass_state>();
        st->more = r->size() >= k_max_batch;
        {
          // Taken already, their outbox_done on its way: not again. Read
          // as it is: only what is durable.
          auto& s = *sources_[source];
          std::lock_guard lock(s.mu);
          if (fresh && !r->empty()) s.durable_upto = std::max(s.durable_upto, r->back().seq);
          std::erase_if(*r, [&](const outbox_entry& e) {
            return s.finishing.contains(e.seq) || e.seq > s.durable_upto;
          });
        }
        if (r->empty()) {
          took(source, pass, {});
          return end_pass(source, st->more);
        }
        std::map<std::uint32_t, outbox_append_cmd> by_target;
        for (auto& e : *r) {
          st->topics.emplace(e.seq, e.msg.topic);
          auto& cmd = by_target[shards_.of(e.msg.topic).id()];
          cmd.source = source;
          cmd.entries.push_back(std::move(e));
        }
        st->waiting = by_target.size();
        for (auto& [target, cmd] : by_target) {
          deliver_(target, std::move(cmd),
                   [this, st, source, pass, guard = std::make_shared<call_guard>(*this)](
                       result<std::vector<outbox_appended>> got) {
                     bool last = false;
                     {
                       std::lock_guard lock(st->mu);
                       if (got.ok()) {
                         for (auto& a : *got) {
                           if (a.code != errc::ok && retry_later(a.code)) continue;
                           if (a.code != errc::ok)
                             log(log_level::warn, "outbox",
                                 "a target refused an outbox entry for good; it is dropped",
                                 {log_number("shard", source),
                                  log_number("seq", a.seq),
                                  {"reason", a.message}});
                           st->taken.emplace(a.seq, outcome_of(st->topics[a.seq], a));
                           st->done.push_back(std::move(a));
                         }
                       }
                       last = --st->waiting == 0;
                     }
                     if (!last) return;
                     // Stored for good on their targets: the acks waiting
                     // for them can answer now.
                     took(source, pass, st->taken);
                     if (st->done.empty()) return end_pass(source, false);
                     std::vector<std::uint64_t> seqs;
                     {
                       auto& s = *sources_[source];
                       std::lock_guard lock(s.mu);
                       for (const auto& a : st->done) {
                         s.finishing.insert(a.seq);
                         seqs.push_back(a.seq);
                       }
                     }
                     shards_.at(source).submit(
                         outbox_done_cmd{std::move(st->done)},
                         [this, source, seqs = std::move(seqs),
                          guard = std::make_shared<call_guard>(*this)](result<void>) {
                           // Not written: the records stay and go again (their
                           // targets drop them as repeats).
                           auto& s = *sources_[source];
                           std::lock_guard lock(s.mu);
                           for (auto seq : seqs) s.finishing.erase(seq);
                         });
                     end_pass(source, st->more);
                   });
        }
      });
}

void outbox_relay::took(std::uint32_t source, std::uint64_t pass,
                        std::map<std::uint64_t, step_produced> taken) {
  auto& s = *sources_[source];
  std::vector<std::pair<waiter, std::map<std::uint64_t, step_produced>>> ready;
  {
    std::lock_guard lock(s.mu);
    for (auto& [seq, p] : taken) {
      // A resend answered as a repeat knows no place: keep the first answer's.
      auto [it, fresh] = s.recent.try_emplace(seq, p);
      if (!fresh && !(p.no_position && !it->second.no_position)) it->second = p;
    }
    while (s.recent.size() > k_recent_max) s.recent.erase(s.recent.begin());
    for (auto it = s.waiters.begin(); it != s.waiters.end();) {
      if (it->from_pass > pass) {
        ++it;
        continue;
      }
      std::map<std::uint64_t, step_produced> out;
      for (auto seq : it->seqs) {
        auto r = s.recent.find(seq);
        if (r != s.recent.end()) {
          out.emplace(seq, r->second);
        } else {
          step_produced p;
          p.pending = true;
          p.outbox_seq = seq;
          out.emplace(seq, std::move(p));
        }
      }
      ready.emplace_back(std::move(*it), std::move(out));
      it = s.waiters.erase(it);
    }
  }
  for (auto& [w, out] : ready) w.done(std::move(out));
}

void outbox_relay::end_pass(std::uint32_t source, bool more) {
  auto& s = *sources_[source];
  bool again = false;
  {
    std::lock_guard lock(s.mu);
    s.running = false;
    again = s.again || more;
    s.again = false;
  }
  if (again) kick(source);
}

}  // namespace onceq
