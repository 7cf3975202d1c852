// onceq-crossing-bench: what it costs a job to cross from one event loop to
// another, by a plain boost::asio::post and by shard/mailbox.hpp (a
// lock-free queue, one post per batch). No server: two io_contexts, each
// run by its own thread and sleeping in epoll_wait when idle, as shard
// loops with sockets do.
//   ping-pong: a job crosses to loop B, which sends one back to loop A,
//     which sends the next: ns per crossing (a round trip / 2). Each
//     crossing wakes a sleeping loop: the latency of a lone request.
//   flood: P producer threads push jobs to loop A as fast as they can,
//     until A has run them all: jobs per second (a busy shard's inbox);
//     for the mailbox, also the asio::post calls it made.
// Each figure is over N crossings (jobs), measured 3 times; the loops and
// threads are started outside the timing.
//
//   ninja -C build onceq-crossing-bench && build/bench/onceq-crossing-bench [N=1000000] [P=2]

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <latch>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "shard/mailbox.hpp"

namespace {

namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

// An io_context run by its own thread until destroyed. The timer gives it
// an epoll reactor, which a shard's loop has for its sockets.
class loop {
 public:
  loop() : timer_(io_), work_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~loop() {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  asio::io_context& io() { return io_; }
  onceq::mailbox& box() { return box_; }

 private:
  asio::io_context io_;
  onceq::mailbox& box_ = onceq::mailbox::of(io_);
  asio::steady_timer timer_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

enum class via { post, mailbox };

template <class F>
void send(loop& to, via how, F&& job) {
  if (how == via::post) {
    asio::post(to.io(), std::forward<F>(job));
  } else {
    to.box().push(std::forward<F>(job));
  }
}

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

// A ball sent back and forth; each job captures one pointer.
struct ping_pong {
  via how;
  long round_trips_left;
  std::promise<void> done;
  loop a, b;  // last: their threads stop before the rest goes

  void at_a() {
    if (round_trips_left-- == 0) return done.set_value();
    send(b, how, [this] { at_b(); });
  }
  void at_b() {
    send(a, how, [this] { at_a(); });
  }
};

// ns per crossing, over `crossings` crossings.
double ping_pong_ns(via how, long crossings) {
  ping_pong p{how, crossings / 2, {}, {}, {}};
  auto done = p.done.get_future();
  const auto t0 = steady::now();
  send(p.a, how, [&p] { p.at_a(); });
  done.wait();
  return seconds_since(t0) * 1e9 / static_cast<double>(crossings);
}

struct flood_result {
  long jobs;
  double jobs_per_s;
  std::uint64_t posts;  // mailbox only
};

flood_result flood(via how, long jobs, int producers) {
  const long each = jobs / producers;
  const long total = each * producers;
  long ran = 0;  // loop a's thread only
  std::promise<void> done;
  auto finished = done.get_future();
  std::latch go(producers + 1);
  loop a;
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&] {
      go.arrive_and_wait();
      for (long i = 0; i < each; ++i) {
        send(a, how, [&ran, &done, total] {
          if (++ran == total) done.set_value();
        });
      }
    });
  }
  go.arrive_and_wait();
  const auto t0 = steady::now();
  finished.wait();
  const double s = seconds_since(t0);
  for (auto& t : threads) t.join();
  return {total, static_cast<double>(total) / s, a.box().posts()};
}

const char* name(via how) {
  return how == via::post ? "asio::post" : "mailbox";
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1'000'000;
  const int producers = argc > 2 ? std::atoi(argv[2]) : 2;
  if (n < 2 || producers < 1) {
    fmt::print(stderr, "usage: onceq-crossing-bench [crossings >= 2] [producers >= 1]\n");
    return 2;
  }
  fmt::print("{} crossings per figure, {} flood producers, {} hardware threads\n", n, producers,
             std::thread::hardware_concurrency());
  for (int run = 1; run <= 3; ++run) {
    for (via how : {via::post, via::mailbox}) {
      fmt::print("run {}  ping-pong  {:<10}  {:8.0f} ns/crossing\n", run, name(how),
                 ping_pong_ns(how, n));
    }
    for (via how : {via::post, via::mailbox}) {
      auto r = flood(how, n, producers);
      fmt::print("run {}  flood x{}   {:<10}  {:8.2f} M jobs/s", run, producers, name(how),
                 r.jobs_per_s / 1e6);
      if (how == via::mailbox) fmt::print("  ({} posts for {} jobs)", r.posts, r.jobs);
      fmt::print("\n");
    }
  }
}
