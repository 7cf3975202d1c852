#include "bench/workload.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <latch>
#include <list>
#include <mutex>
#include <random>
#include <thread>

#include "bench/histogram.hpp"
#include "bench/message.hpp"
#include "bench/progress.hpp"

namespace onceq::bench {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t k_keys_to_check = 1000;

// Everything the threads of one run share. Counters are relaxed atomics:
// they are read for progress and after the threads have joined.
struct shared_run {
  explicit shared_run(std::size_t n_, std::uint64_t base = 0) : n(n_), seq_base(base), counts(n_) {}

  const std::size_t n;  // unique work items
  // Work item i has seq seq_base + i: a history phase uses other keys than
  // the measured one on the same server.
  const std::uint64_t seq_base;
  std::uint64_t deadline_ns = 0;

  std::atomic<std::size_t> next_seq{0};
  std::atomic<std::size_t> produced_unique{0};
  std::atomic<std::size_t> sent{0};
  std::atomic<std::size_t> duplicates_sent{0};
  std::atomic<std::size_t> duplicates_detected{0};
  std::atomic<int> producers_running{0};
  std::atomic<std::uint64_t> producers_done_ns{0};

  std::atomic<std::size_t> keys_done{0};
  std::atomic<std::size_t> deliveries{0};
  std::atomic<std::size_t> not_acked{0};
  std::atomic<std::size_t> acks_refused{0};
  std::atomic<std::size_t> extra{0};
  std::atomic<std::size_t> steps_pending{0};
  std::atomic<std::uint64_t> keys_done_ns{0};
  std::atomic<std::uint64_t> last_delivery_ns{0};
  std::vector<std::atomic<std::uint16_t>> counts;  // acked processings per seq

  std::atomic<bool> stop{false};
  std::atomic<bool> timed_out{false};
  std::mutex mu;
  std::string error;

  void fail(std::string what) {
    std::lock_guard lock(mu);
    if (error.empty()) error = std::move(what);
    stop = true;
  }
};

struct producer_plan {
  std::size_t batch = 1;
  double duplicate_ratio = 0;
  std::uint64_t interval_ns = 0;  // per producer, per message; 0 = as fast as possible
};

struct consumer_plan {
  bool record_latency = true;  // false for a drain: its "latency" is the backlog's age
  double no_ack_ratio = 0;
  // After every key is done, keep consuming until nothing was delivered for
  // this long (catches late redeliveries). 0 = stop at once.
  std::uint64_t quiet_ns = 0;
};

// Connects one client of the run, then waits at gate for the others, so
// that every thread starts at once. Null when it could not connect (st
// says why).
template <class Make>
auto connect_then_wait(Make make, std::string_view what, int index, shared_run& st,
                       std::latch& gate) {
  decltype(make()) client;
  try {
    client = make();
  } catch (const std::exception& e) {
    st.fail(fmt::format("{} {} connect: {}", what, index, e.what()));
  }
  gate.arrive_and_wait();
  return client;
}

void producer_loop(system_driver& drv, const run_setup& s, const bench_options& o, shared_run& st,
                   int index, const producer_plan& plan, std::latch& gate) {
  auto p =
      connect_then_wait([&] { return drv.make_producer(s, index); }, "producer", index, st, gate);
  auto finish = [&] {
    if (--st.producers_running == 0) st.producers_done_ns = steady_now_ns();
  };
  if (!p || st.stop) return finish();

  std::mt19937_64 rng(0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(index));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<bench_message> msgs(plan.batch * 2);
  std::vector<std::uint64_t> history;  // this producer's seqs, for duplicates
  std::size_t duplicates_made = 0;
  const std::uint64_t start_ns = steady_now_ns();
  std::uint64_t scheduled = 0;
  try {
    while (!st.stop.load(std::memory_order_relaxed)) {
      if (steady_now_ns() > st.deadline_ns) {
        st.timed_out = true;
        break;
      }
      const std::size_t first = st.next_seq.fetch_add(plan.batch);
      if (first >= st.n) break;
      const std::size_t count = std::min(plan.batch, st.n - first);
      std::uint64_t sent_ns = steady_now_ns();
      if (plan.interval_ns > 0) {
        // Latency counts from the scheduled time, so a slow server cannot
        // hide its queueing by slowing the producer (coordinated omission).
        const std::uint64_t due = start_ns + scheduled * plan.interval_ns;
        scheduled += count;
        if (due > st.deadline_ns) {
          st.timed_out = true;
          break;
        }
        if (due > sent_ns) std::this_thread::sleep_for(std::chrono::nanoseconds(due - sent_ns));
        sent_ns = due;
      }
      std::size_t used = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t seq = st.seq_base + first + i;
        make_message(msgs[used], seq, sent_ns, o.payload);
        msgs[used].order_key.clear();
        if (s.order_keys > 0) {
          fmt::format_to(std::back_inserter(msgs[used].order_key), "o{}", seq % s.order_keys);
        }
        ++used;
      }
      std::size_t dups = 0;
      if (plan.duplicate_ratio > 0 && !history.empty()) {
        for (std::size_t i = 0; i < count; ++i) {
          if (coin(rng) >= plan.duplicate_ratio) continue;
          const auto seq = history[rng() % history.size()];
          // Half re-send the same message (same msg_id: produce dedup), half
          // send a new message for the same work (same key, new msg_id).
          const unsigned variant =
              duplicates_made % 2 == 0 ? 0u : static_cast<unsigned>(duplicates_made);
          ++duplicates_made;
          make_message(msgs[used++], st.seq_base + seq, sent_ns, o.payload, variant);
          ++dups;
        }
      }
      const std::size_t detected = p->produce(std::span<const bench_message>(msgs.data(), used));
      st.sent += used;
      st.duplicates_sent += dups;
      st.duplicates_detected += detected;
      st.produced_unique += count;
      if (plan.duplicate_ratio > 0) {
        for (std::size_t i = 0; i < count; ++i) history.push_back(first + i);
      }
    }
  } catch (const std::exception& e) {
    st.fail(fmt::format("producer {}: {}", index, e.what()));
  }
  finish();
}

void consumer_loop(system_driver& drv, const run_setup& s, shared_run& st, int index,
                   const consumer_plan& plan, std::latch& gate, histogram& hist) {
  auto c =
      connect_then_wait([&] { return drv.make_consumer(s, index); }, "consumer", index, st, gate);
  if (!c || st.stop) return;

  std::mt19937_64 rng(0x2545f4914f6cdd1dULL + static_cast<std::uint64_t>(index));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<std::size_t> to_ack;
  std::vector<payload_header> heads;
  try {
    while (!st.stop.load(std::memory_order_relaxed)) {
      const std::uint64_t now = steady_now_ns();
      if (now > st.deadline_ns) {
        st.timed_out = true;
        break;
      }
      if (st.keys_done.load() >= st.n) {
        if (plan.quiet_ns == 0) break;
        const std::uint64_t last = std::max(st.last_delivery_ns.load(), st.keys_done_ns.load());
        if (now > last && now - last >= plan.quiet_ns) break;
      }
      const auto& payloads = c->fetch(s.batch, std::chrono::milliseconds(s.wait_ms));
      if (payloads.empty()) continue;
      st.deliveries += payloads.size();
      st.last_delivery_ns = steady_now_ns();
      to_ack.clear();
      heads.clear();
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        auto h = parse_payload(payloads[i]);
        if (!h || h->seq < st.seq_base || h->seq - st.seq_base >= st.n) {
          throw std::runtime_error(
              fmt::format("unexpected payload '{}'", payloads[i].substr(0, 40)));
        }
        h->seq -= st.seq_base;
        if (plan.no_ack_ratio > 0 && coin(rng) < plan.no_ack_ratio) {
          ++st.not_acked;  // this consumer "crashes" on it: no ack, no nack
          continue;
        }
        to_ack.push_back(i);
        heads.push_back(*h);
      }
      if (to_ack.empty()) continue;
      std::vector<char> accepted;
      if (is_step(s.mode)) {
        // One workflow step per delivery, each timed on its own.
        for (const auto i : to_ack) {
          const std::uint64_t t = steady_now_ns();
          const auto got = c->step(i);
          hist.record(steady_now_ns() - t);
          accepted.push_back(got.acked ? 1 : 0);
          if (got.pending) ++st.steps_pending;
        }
      } else {
        accepted = c->ack(to_ack);
      }
      const std::uint64_t acked_ns = steady_now_ns();
      for (std::size_t j = 0; j < heads.size(); ++j) {
        if (!accepted[j]) {
          ++st.acks_refused;
          continue;
        }
        if (st.counts[heads[j].seq].fetch_add(1) == 0) {
          if (plan.record_latency) {
            hist.record(acked_ns > heads[j].sent_ns ? acked_ns - heads[j].sent_ns : 0);
          }
          if (++st.keys_done == st.n) st.keys_done_ns = acked_ns;
        } else {
          ++st.extra;
        }
      }
    }
    c->flush();  // acks still held (piggyback)
  } catch (const std::exception& e) {
    st.fail(fmt::format("consumer {}: {}", index, e.what()));
  }
}

// After workflow steps: reads topic B (s.next_topic) in a group of its own
// (untimed) until every work item's next message came, or nothing came for
// 5 s; returns how many distinct work items it found there.
std::size_t count_next_topic(system_driver& drv, const run_setup& s, std::size_t n) {
  run_setup v = s;
  v.topic = s.next_topic;
  v.next_topic.clear();
  v.group = "check-next";
  v.mode = consume_mode::batch;
  auto c = drv.make_consumer(v, 0);
  std::vector<char> seen(n, 0);
  std::size_t found = 0;
  std::vector<std::size_t> all;
  std::uint64_t last = steady_now_ns();
  while (found < n && steady_now_ns() - last < 5'000'000'000ULL) {
    const auto& payloads = c->fetch(s.batch, 100ms);
    if (payloads.empty()) continue;
    last = steady_now_ns();
    all.clear();
    for (std::size_t i = 0; i < payloads.size(); ++i) {
      const auto h = parse_payload(payloads[i]);
      if (h && h->seq < n && seen[h->seq] == 0) {
        seen[h->seq] = 1;
        ++found;
      }
      all.push_back(i);
    }
    c->ack(all);
  }
  return found;
}

// Starts producers and/or consumers, waits until every thread is connected,
// then returns the start time; join() waits for them while showing progress.
class phase {
 public:
  phase(system_driver& drv, const run_setup& s, const bench_options& o, shared_run& st,
        int producers, const producer_plan& pp, int consumers, const consumer_plan& cp)
      : st_(st), hists_(static_cast<std::size_t>(consumers)), gate_(producers + consumers + 1) {
    st.producers_running = producers;
    for (int i = 0; i < producers; ++i) {
      threads_.emplace_back([&, i, pp] { producer_loop(drv, s, o, st, i, pp, gate_); });
    }
    for (int i = 0; i < consumers; ++i) {
      threads_.emplace_back([&, i, cp] {
        consumer_loop(drv, s, st, i, cp, gate_, hists_[static_cast<std::size_t>(i)]);
      });
    }
  }

  phase(const phase&) = delete;
  phase& operator=(const phase&) = delete;

  // Only reached without join() when the run is failing: stop the threads.
  ~phase() {
    if (joined_) return;
    st_.stop = true;
    if (!started_) gate_.count_down();
    for (auto& t : threads_) {
      if (t.thread.joinable()) t.thread.join();
    }
  }

  // Opens the gate; returns the start time.
  std::uint64_t start(double time_limit_s) {
    // The deadline is set before the gate opens; threads read it after.
    st_.deadline_ns = steady_now_ns() + static_cast<std::uint64_t>(time_limit_s * 1e9);
    started_ = true;
    gate_.arrive_and_wait();
    return steady_now_ns();
  }

  // Polls `done` every 20 ms until it is true or all threads ended; calls
  // `at_done` once at that moment (for CPU readings), then joins.
  template <typename Done, typename AtDone, typename Text>
  void join(Done done, AtDone at_done, Text text, progress_line& progress) {
    bool fired = false;
    for (;;) {
      const bool all_ended = std::all_of(threads_.begin(), threads_.end(),
                                         [](const worker& t) { return t.ended.load(); });
      if (!fired && (done() || all_ended || st_.stop)) {
        at_done();
        fired = true;
      }
      if (all_ended) break;
      progress.update(text());
      std::this_thread::sleep_for(20ms);
    }
    for (auto& t : threads_) t.thread.join();
    joined_ = true;
  }

  histogram merged() const {
    histogram h;
    for (const auto& x : hists_) h.merge(x);
    return h;
  }

 private:
  struct worker {
    template <typename F>
    explicit worker(F f)
        : thread([this, f = std::move(f)] {
            f();
            ended = true;
          }) {}
    std::atomic<bool> ended{false};
    std::thread thread;
  };

  shared_run& st_;
  std::vector<histogram> hists_;
  std::latch gate_;
  bool started_ = false;
  bool joined_ = false;
  std::list<worker> threads_;
};

}  // namespace

std::string_view id_of(workload_kind k) {
  switch (k) {
    case workload_kind::w1_batch:
      return "w1-batch";
    case workload_kind::w1_single:
      return "w1-single";
    case workload_kind::w2_drain:
      return "w2-drain";
    case workload_kind::w2_piggyback:
      return "w2-piggyback";
    case workload_kind::w2_stream:
      return "w2-stream";
    case workload_kind::w3_e2e:
      return "w3-e2e";
    case workload_kind::w3_rate:
      return "w3-rate";
    case workload_kind::w3_rate_aged:
      return "w3-rate-aged";
    case workload_kind::w4_faults:
      return "w4-faults";
    case workload_kind::w5_step_ack_produce:
      return "w5-step-ack-produce";
    case workload_kind::w5_step_separate:
      return "w5-step-separate";
    case workload_kind::w6_drain_ordered:
      return "w6-drain-ordered";
    case workload_kind::w6_drain_unordered:
      return "w6-drain-unordered";
  }
  return "?";
}

std::string describe(workload_kind k, const bench_options& o) {
  switch (k) {
    case workload_kind::w1_batch:
      return fmt::format("W1 produce only, {} producers, batches of {}", o.producers, o.batch);
    case workload_kind::w1_single:
      return fmt::format("W1 produce only, {} producers, one message per request",
                         o.single_producers);
    case workload_kind::w2_drain:
      return fmt::format("W2 drain a backlog, {} consumers, fetch/ack batches of {}", o.consumers,
                         o.batch);
    case workload_kind::w2_piggyback:
      return fmt::format(
          "W2 with each batch's acks carried on the next fetch (onceq: consume `acks`; Redis: "
          "XACK pipelined with XREADGROUP; JetStream: its asynchronous acks, as in w2-drain)");
    case workload_kind::w2_stream:
      return fmt::format(
          "W2 through onceq's streaming consume (no max_messages), acks in batches of up to {}",
          o.batch);
    case workload_kind::w3_e2e:
      return fmt::format("W3 produce+consume ({}p batches of {}, {}c), end-to-end", o.producers,
                         o.batch, o.consumers);
    case workload_kind::w3_rate:
      return fmt::format(
          "W3 at a fixed {} msg/s offered by {} producers in produce calls of {} message(s), "
          "for {} s",
          o.rate, o.producers, o.rate_batch, o.rate_seconds);
    case workload_kind::w3_rate_aged:
      return fmt::format(
          "w3-rate on a server that first moved {} messages (produce, consume, ack; untimed) "
          "through the same topic",
          o.history);
    case workload_kind::w4_faults:
      return fmt::format("W4 = W3 with {:.0f}% duplicate produces, {:.0f}% deliveries not acked",
                         o.duplicate_ratio * 100, o.no_ack_ratio * 100);
    case workload_kind::w5_step_ack_produce:
      return fmt::format(
          "W5 workflow steps from a backlog of topic A, {} workers (fetch up to {}): per "
          "delivery one POST /v1/ack whose `produce` writes the next message to topic B; "
          "latency per step (onceq only)",
          o.consumers, o.batch);
    case workload_kind::w5_step_separate:
      return "W5 the same steps as two requests: POST /v1/produce to B, then POST /v1/ack; "
             "latency per step (onceq only)";
    case workload_kind::w6_drain_ordered:
      return fmt::format(
          "W6 w2-drain of a topic created with \"ordering\":\"key\", messages over {} "
          "ordering keys (onceq only)",
          o.order_keys);
    case workload_kind::w6_drain_unordered:
      return "W6 the same drain, the topic created with \"ordering\":\"none\" (onceq only)";
  }
  return "?";
}

std::vector<workload_kind> expand_workloads(const bench_options& o) {
  std::vector<workload_kind> out;
  for (const auto& w : o.workloads) {
    if (w == "w1") {
      out.push_back(workload_kind::w1_batch);
      out.push_back(workload_kind::w1_single);
    } else if (w == "w2") {
      out.push_back(workload_kind::w2_drain);
      out.push_back(workload_kind::w2_piggyback);
      out.push_back(workload_kind::w2_stream);
    } else if (w == "w3") {
      out.push_back(workload_kind::w3_e2e);
      if (o.rate > 0) out.push_back(workload_kind::w3_rate);
      if (o.rate > 0 && o.history > 0) out.push_back(workload_kind::w3_rate_aged);
    } else if (w == "w4") {
      out.push_back(workload_kind::w4_faults);
    } else if (w == "w5") {
      out.push_back(workload_kind::w5_step_ack_produce);
      out.push_back(workload_kind::w5_step_separate);
    } else if (w == "w6") {
      out.push_back(workload_kind::w6_drain_ordered);
      out.push_back(workload_kind::w6_drain_unordered);
    }
  }
  return out;
}

run_result run_workload(system_driver& drv, workload_kind kind, durability d,
                        const bench_options& o) {
  run_result r;
  r.workload = std::string(id_of(kind));
  if (!describe_system(r, drv, d)) return r;

  std::size_t n = o.messages;
  const bool steps =
      kind == workload_kind::w5_step_ack_produce || kind == workload_kind::w5_step_separate;
  const bool ordered_drain =
      kind == workload_kind::w6_drain_ordered || kind == workload_kind::w6_drain_unordered;
  // Every one of these drains a backlog produced first (not timed).
  const bool drain = kind == workload_kind::w2_drain || kind == workload_kind::w2_piggyback ||
                     kind == workload_kind::w2_stream || steps || ordered_drain;
  const bool fixed_rate = kind == workload_kind::w3_rate || kind == workload_kind::w3_rate_aged;
  if (kind == workload_kind::w1_single) n = o.single_messages;
  if (fixed_rate) {
    n = std::max<std::size_t>(
        1, static_cast<std::size_t>(static_cast<double>(o.rate) * o.rate_seconds));
  }
  r.target = n;

  run_setup s;
  s.lease_ms = kind == workload_kind::w4_faults ? o.lease_ms : 30000;
  s.partitions = o.partitions;
  s.topics = o.topics;
  s.consumers = o.consumers;
  s.batch = o.batch;
  s.wait_ms = o.wait_ms;
  if (kind == workload_kind::w2_piggyback) s.mode = consume_mode::piggyback;
  if (kind == workload_kind::w2_stream) s.mode = consume_mode::stream;
  if (kind == workload_kind::w5_step_ack_produce) s.mode = consume_mode::step_ack_produce;
  if (kind == workload_kind::w5_step_separate) s.mode = consume_mode::step_separate;
  if (steps) s.next_topic = "bench-next";
  if (ordered_drain) {
    s.ordering = kind == workload_kind::w6_drain_ordered ? "key" : "none";
    s.order_keys = o.order_keys;
  }
  if (std::string why; !drv.supports(s.mode, why)) {
    r.skipped = why;
    return r;
  }
  if (ordered_drain && r.system != "onceq") {
    r.skipped = "no per-key ordering setting (onceq's topic \"ordering\")";
    return r;
  }

  const auto made = make_temp_dir(
      o.tmp_root, fmt::format("onceq-bench-{}-{}-{}", r.system, r.durability, r.workload), r.error);
  if (!made) return r;
  const std::filesystem::path dir = *made;
  const std::string label = fmt::format("[{} {} {}]", r.system, r.durability, r.workload);
  progress_line progress;
  shared_run st(n);

  try {
    drv.start(d, dir);
    drv.prepare(s);
    if (auto* cc = drv.cluster()) r.clients = cc->client_placement(s);
    r.ran = true;

    const bool produce_only = kind == workload_kind::w1_batch || kind == workload_kind::w1_single;
    producer_plan pp;
    pp.batch = kind == workload_kind::w1_single ? 1 : fixed_rate ? o.rate_batch : o.batch;
    if (kind == workload_kind::w4_faults) pp.duplicate_ratio = o.duplicate_ratio;
    if (fixed_rate) {
      pp.interval_ns = static_cast<std::uint64_t>(1e9 * o.producers / static_cast<double>(o.rate));
    }
    consumer_plan cp;
    cp.record_latency = !drain;  // steps record their own latency, per step
    if (kind == workload_kind::w4_faults) {
      cp.no_ack_ratio = o.no_ack_ratio;
      cp.quiet_ns = static_cast<std::uint64_t>(o.lease_ms + 1000) * 1'000'000;
    }

    if (kind == workload_kind::w3_rate_aged) {
      // History first, not timed: other keys, the same topic, acked at full
      // speed, so the measured run meets a server with a past (a bigger
      // LSM, flushes and compactions behind and under way, retention).
      shared_run past(o.history, std::uint64_t{1} << 40);
      producer_plan hp;
      hp.batch = o.batch;
      consumer_plan hc;
      hc.record_latency = false;
      phase aging(drv, s, o, past, o.producers, hp, o.consumers, hc);
      aging.start(std::max(o.time_limit_s, 600.0));
      aging.join(
          [&] { return past.keys_done.load() >= past.n; }, [] {},
          [&] { return fmt::format("{} history {}/{}", label, past.keys_done.load(), past.n); },
          progress);
      if (!past.error.empty()) throw std::runtime_error("history: " + past.error);
      if (past.keys_done.load() < past.n)
        throw std::runtime_error("history did not finish in time");
    }

    if (drain) {
      // The backlog is produced first and not timed.
      producer_plan preload;
      preload.batch = o.batch;
      phase fill(drv, s, o, st, o.producers, preload, 0, cp);
      fill.start(o.time_limit_s);
      fill.join(
          [&] { return st.producers_running.load() == 0; }, [] {},
          [&] { return fmt::format("{} preloading {}/{}", label, st.produced_unique.load(), n); },
          progress);
      if (!st.error.empty()) throw std::runtime_error("preload: " + st.error);
      if (st.produced_unique.load() < n) throw std::runtime_error("preload did not finish in time");
    }

    const int producers = drain                              ? 0
                          : kind == workload_kind::w1_single ? o.single_producers
                                                             : o.producers;
    const int consumers = produce_only ? 0 : o.consumers;
    phase run(drv, s, o, st, producers, pp, consumers, cp);
    const process_usage before = drv.usage();
    const double client_before = self_cpu_seconds();
    const std::uint64_t t0 = run.start(o.time_limit_s);
    process_usage after;
    double client_after = 0;
    std::uint64_t t_end = 0;

    auto done = [&] {
      return produce_only ? st.producers_running.load() == 0 : st.keys_done.load() >= n;
    };
    auto at_done = [&] {
      after = drv.usage();
      client_after = self_cpu_seconds();
      t_end = produce_only ? st.producers_done_ns.load() : st.keys_done_ns.load();
      if (t_end == 0) t_end = steady_now_ns();  // stopped early
    };
    auto text = [&] {
      const double secs = static_cast<double>(steady_now_ns() - t0) / 1e9;
      const std::size_t count = produce_only ? st.produced_unique.load() : st.keys_done.load();
      return fmt::format("{} {:5.1f}s  produced {}  done {}/{}  {:.1f}k msg/s", label, secs,
                         st.produced_unique.load(), count, n,
                         secs > 0 ? static_cast<double>(count) / secs / 1000 : 0.0);
    };
    run.join(done, at_done, text, progress);

    r.seconds = static_cast<double>(t_end - t0) / 1e9;
    r.messages = produce_only ? st.produced_unique.load() : st.keys_done.load();
    r.msgs_per_s = r.seconds > 0 ? static_cast<double>(r.messages) / r.seconds : 0;
    r.timed_out = st.timed_out.load() && r.messages < n;
    r.server_cpu_s = after.cpu_seconds - before.cpu_seconds;
    const double millions = static_cast<double>(std::max<std::size_t>(r.messages, 1)) / 1e6;
    r.server_cpu_s_per_m = r.server_cpu_s / millions;
    r.client_cpu_s_per_m = (client_after - client_before) / millions;
    r.peak_rss_kb = drv.usage().peak_rss_kb;

    const histogram h = run.merged();
    r.latency_samples = h.count();
    if (h.count() > 0) {
      r.p50_ms = static_cast<double>(h.quantile(0.50)) / 1e6;
      r.p99_ms = static_cast<double>(h.quantile(0.99)) / 1e6;
      r.p999_ms = static_cast<double>(h.quantile(0.999)) / 1e6;
      r.max_ms = static_cast<double>(h.max()) / 1e6;
    }
    r.sent = st.sent.load();
    r.duplicates_sent = st.duplicates_sent.load();
    r.duplicates_detected = st.duplicates_detected.load();
    r.deliveries = st.deliveries.load();
    r.not_acked = st.not_acked.load();
    r.acks_refused = st.acks_refused.load();
    r.extra_processings = st.extra.load();
    r.steps_pending = st.steps_pending.load();
    for (const auto& c : st.counts) r.keys_more_than_once += c.load() > 1 ? 1 : 0;

    if (!produce_only && st.error.empty() && r.messages > 0) {
      // Read back a spread of committed keys (systems that have key state).
      std::vector<std::uint64_t> sample;
      const std::size_t step = std::max<std::size_t>(1, n / k_keys_to_check);
      for (std::size_t seq = 0; seq < n && sample.size() < k_keys_to_check; seq += step) {
        if (st.counts[seq].load() > 0) sample.push_back(seq);
      }
      r.keys_checked = drv.check_keys(s, sample);
    }
    if (steps && st.error.empty()) r.next_topic_found = count_next_topic(drv, s, n);
    if (!st.error.empty()) r.error = st.error;
  } catch (const std::exception& e) {
    r.error = st.error.empty() ? e.what() : fmt::format("{}; {}", e.what(), st.error);
  }
  r.server_exit = drv.stop();
  progress.finish(fmt::format("{} {}: {:.0f} msg/s over {:.2f}s{}{}", label,
                              r.error.empty() ? "done" : "FAILED", r.msgs_per_s, r.seconds,
                              r.timed_out ? " (time limit)" : "",
                              r.error.empty() ? "" : " — " + r.error));
  if (o.keep_data || !r.error.empty()) {
    std::fprintf(stderr, "%s data and logs kept in %s\n", label.c_str(), dir.c_str());
  } else {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  // Let the kernel finish writing back this row's data before the next row
  // starts: otherwise that writeback competes with the next system's
  // fsyncs, and whichever system runs after a write-heavy row pays for it
  // in tail latency (measured: onceq's fixed-rate p99.9 after the W3 rows
  // was 8-10 ms, 3.4-4.5 ms alone).
  ::sync();
  return r;
}

}  // namespace onceq::bench
