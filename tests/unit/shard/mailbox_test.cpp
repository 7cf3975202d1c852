// The mailbox a job crosses to a loop by: where and in which order jobs
// run, that many producers lose or repeat none, that an idle loop wakes,
// that jobs may push more jobs, and what happens to jobs that never run.
// Loops run on their own threads; a test waits for a job's promise, with a
// bound that only fails the test (no sleep orders anything).
#include "shard/mailbox.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace onceq {
namespace {

namespace asio = boost::asio;

// Fails a wait, never paces one (TSan runs are slow).
constexpr auto k_bound = std::chrono::seconds(60);

// An io_context run by its own thread until the loop is destroyed (then
// stopped: jobs still queued are destroyed, not run). It has a timer, so
// that it sleeps in epoll_wait as a shard's loop with sockets does. Declared
// after what its jobs touch, so that its thread is joined first.
class running_loop {
 public:
  running_loop() : timer_(io_), work_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~running_loop() {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  asio::io_context& io() { return io_; }
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  asio::io_context io_;
  asio::steady_timer timer_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

constexpr auto k_one_job_bound = std::chrono::seconds(10);

bool ready(std::future<void>& f) {
  return f.wait_for(k_bound) == std::future_status::ready;
}

// A job's capture that counts its destructions (a moved-from shell does
// not count). Move-only, as the commands' answers are.
struct counted {
  explicit counted(std::atomic<int>& destroyed) : destroyed(&destroyed) {}
  counted(counted&& o) noexcept : destroyed(std::exchange(o.destroyed, nullptr)) {}
  counted& operator=(counted&&) = delete;
  ~counted() {
    if (destroyed != nullptr) destroyed->fetch_add(1);
  }
  std::atomic<int>* destroyed;
};

// Whether thread tid of this process sleeps in epoll_wait (Linux's
// /proc/<pid>/task/<tid>/syscall: the number of the call it blocks in).
bool blocked_in_epoll(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;
  if (!(in >> nr)) return false;  // "running"
#ifdef SYS_epoll_wait
  if (nr == SYS_epoll_wait) return true;
#endif
  return nr == SYS_epoll_pwait;
}

// Only an io_context has a loop to drain on (use_service<mailbox> on
// another execution_context does not compile).
static_assert(!std::is_constructible_v<mailbox, asio::execution_context&>);
static_assert(std::is_constructible_v<mailbox, asio::io_context&>);

TEST(MailboxTest, IsOnePerIoContext) {
  asio::io_context a, b;
  EXPECT_EQ(&mailbox::of(a), &mailbox::of(a));
  EXPECT_NE(&mailbox::of(a), &mailbox::of(b));
}

TEST(MailboxTest, JobsRunOnTheLoopThreadInPushOrder) {
  constexpr int k_jobs = 1000;
  std::vector<int> order;  // loop thread only
  int elsewhere = 0;       // loop thread only
  std::promise<void> done;
  running_loop loop;
  mailbox& box = mailbox::of(loop.io());
  for (int i = 0; i < k_jobs; ++i) {
    box.push([&, i] {
      order.push_back(i);
      if (std::this_thread::get_id() != loop.thread_id()) ++elsewhere;
      if (i == k_jobs - 1) done.set_value();
    });
  }
  auto f = done.get_future();
  ASSERT_TRUE(ready(f));
  EXPECT_EQ(elsewhere, 0);
  ASSERT_EQ(order.size(), std::size_t{k_jobs});
  for (int i = 0; i < k_jobs; ++i) ASSERT_EQ(order[i], i);
  EXPECT_EQ(box.pushed(), std::uint64_t{k_jobs});
}

TEST(MailboxTest, PushesFromAnIdleMailboxPostOnceUntilTheDrainRuns) {
  asio::io_context io;
  mailbox& box = mailbox::of(io);
  int ran = 0;
  for (int i = 0; i < 10; ++i) box.push([&] { ++ran; });
  EXPECT_EQ(box.posts(), 1u);
  io.run();
  EXPECT_EQ(ran, 10);
  box.push([&] { ++ran; });
  EXPECT_EQ(box.posts(), 2u);  // drained and disarmed: the next push wakes again
  io.restart();
  io.run();
  EXPECT_EQ(ran, 11);
  EXPECT_EQ(box.pushed(), 11u);
}

TEST(MailboxTest, FourProducersRunEveryJobOnceInEachProducersOrder) {
  constexpr int k_producers = 4;
  constexpr int k_each = 50'000;
  // Loop thread only.
  std::vector<std::uint8_t> runs(k_producers * k_each, 0);
  std::array<int, k_producers> next{};
  int out_of_order = 0;
  int elsewhere = 0;
  int total = 0;
  std::promise<void> done;
  running_loop loop;
  mailbox& box = mailbox::of(loop.io());

  std::latch start(k_producers);
  std::vector<std::thread> producers;
  for (int p = 0; p < k_producers; ++p) {
    producers.emplace_back([&, p] {
      start.arrive_and_wait();
      for (int i = 0; i < k_each; ++i) {
        box.push([&, p, i] {
          ++runs[p * k_each + i];
          if (next[p] != i) ++out_of_order;
          next[p] = i + 1;
          if (std::this_thread::get_id() != loop.thread_id()) ++elsewhere;
          if (++total == k_producers * k_each) done.set_value();
        });
      }
    });
  }
  for (auto& t : producers) t.join();
  auto f = done.get_future();
  ASSERT_TRUE(ready(f));

  int not_once = 0;
  for (auto r : runs) not_once += r != 1;
  EXPECT_EQ(not_once, 0);
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(elsewhere, 0);
  EXPECT_EQ(box.pushed(), std::uint64_t{k_producers * k_each});
  EXPECT_LE(box.posts(), box.pushed());
  RecordProperty("posts", std::to_string(box.posts()));
  std::printf("%llu posts for %llu pushes\n", static_cast<unsigned long long>(box.posts()),
              static_cast<unsigned long long>(box.pushed()));
}

// Pushes that land just as a drain finds the queue empty and disarms: a
// producer pushes its next job as soon as its previous one has started,
// and that job spins for a varying few hundred nanoseconds, so that the
// push falls at a varying point of the drain's end. Each such push must
// either post a drain or be seen by the ending one: one left behind
// leaves its producer waiting for good (nothing else pushes).
TEST(MailboxTest, APushAsTheDrainEndsIsNeverLeftBehind) {
  constexpr int k_cycles = 100'000;
  std::atomic<int> started{0};
  running_loop loop;
  mailbox& box = mailbox::of(loop.io());
  int stuck_at = -1;
  for (int i = 0; i < k_cycles && stuck_at < 0; ++i) {
    std::chrono::steady_clock::time_point give_up{};
    box.push([&started, i] {
      started.store(i + 1, std::memory_order_release);
      // 0 to 1023 rounds of a relaxed load: up to a µs or so.
      for (unsigned n = (i * 2654435761u) >> 22; n > 0; --n) {
        (void)started.load(std::memory_order_relaxed);
      }
    });
    for (unsigned spins = 1; started.load(std::memory_order_acquire) != i + 1; ++spins) {
      if (spins % 4096 != 0) continue;
      // One job that takes 10 s to start is lost (TSan takes microseconds).
      const auto now = std::chrono::steady_clock::now();
      if (give_up == std::chrono::steady_clock::time_point{}) give_up = now + k_one_job_bound;
      if (now > give_up) {
        stuck_at = i;
        break;
      }
    }
  }
  EXPECT_EQ(stuck_at, -1) << "a job pushed as the drain ended never ran";
  EXPECT_LE(box.posts(), box.pushed());
  std::printf("%llu posts for %llu pushes\n", static_cast<unsigned long long>(box.posts()),
              static_cast<unsigned long long>(box.pushed()));
}

TEST(MailboxTest, APushWakesALoopBlockedInEpoll) {
  std::promise<pid_t> tid;
  std::promise<void> done;
  running_loop loop;
  asio::io_context& io = loop.io();
  asio::post(io, [&] { tid.set_value(static_cast<pid_t>(::syscall(SYS_gettid))); });
  auto tid_f = tid.get_future();
  ASSERT_EQ(tid_f.wait_for(k_bound), std::future_status::ready);
  const pid_t loop_tid = tid_f.get();
  // Nothing else is queued: the loop goes to sleep in epoll_wait.
  const auto give_up = std::chrono::steady_clock::now() + k_bound;
  while (!blocked_in_epoll(loop_tid) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(blocked_in_epoll(loop_tid));

  mailbox& box = mailbox::of(io);
  box.push([&] { done.set_value(); });
  auto f = done.get_future();
  EXPECT_TRUE(ready(f));
  EXPECT_EQ(box.posts(), 1u);
}

TEST(MailboxTest, AJobPushedByAJobRunsAfterItAndChainsOutlastABatch) {
  // Loop thread only.
  bool inside = false;
  int ran_inside = 0;
  int chain = 0;
  std::promise<void> done;
  std::function<void()> link;
  running_loop loop;
  mailbox& box = mailbox::of(loop.io());
  // A chain of jobs each pushing the next, longer than a drain's batch:
  // the drain goes on through its re-posts.
  constexpr int k_chain = 3 * static_cast<int>(mailbox::k_max_batch) + 7;
  link = [&] {
    if (inside) ++ran_inside;
    if (++chain == k_chain) return done.set_value();
    box.push(link);
  };
  box.push([&] {
    inside = true;
    box.push(link);
    inside = false;
  });
  auto f = done.get_future();
  ASSERT_TRUE(ready(f));
  EXPECT_EQ(ran_inside, 0);
  EXPECT_EQ(chain, k_chain);
  // The wake-up, then one per full batch (776 jobs: 256, 256, 256, 8): a
  // batch is capped even when its own jobs feed it.
  EXPECT_EQ(box.posts(), 4u);
}

TEST(MailboxTest, JobsCrossBackAndForthBetweenTwoLoops) {
  constexpr int k_round_trips = 10'000;
  std::atomic<int> wrong_thread{0};
  int round_trips = 0;  // a's thread only
  std::promise<void> done;
  std::function<void()> serve;  // runs on a
  running_loop a, b;
  mailbox& to_a = mailbox::of(a.io());
  mailbox& to_b = mailbox::of(b.io());
  serve = [&] {
    if (std::this_thread::get_id() != a.thread_id()) ++wrong_thread;
    if (round_trips++ == k_round_trips) return done.set_value();
    to_b.push([&] {
      if (std::this_thread::get_id() != b.thread_id()) ++wrong_thread;
      to_a.push(serve);
    });
  };
  to_a.push(serve);
  auto f = done.get_future();
  ASSERT_TRUE(ready(f));
  EXPECT_EQ(wrong_thread.load(), 0);
}

TEST(MailboxTest, AFloodedMailboxLetsTheLoopsOtherHandlersRunBetweenBatches) {
  asio::io_context io;
  mailbox& box = mailbox::of(io);
  constexpr int k_jobs = 2 * static_cast<int>(mailbox::k_max_batch) + 88;
  int ran = 0;
  int ran_before_other = -1;
  for (int i = 0; i < k_jobs; ++i) box.push([&] { ++ran; });
  asio::post(io, [&] { ran_before_other = ran; });  // e.g. a socket's handler
  io.run();
  EXPECT_EQ(ran_before_other, static_cast<int>(mailbox::k_max_batch));
  EXPECT_EQ(ran, k_jobs);
  EXPECT_EQ(box.posts(), 3u);  // the wake-up, then one per full batch
}

TEST(MailboxTest, AThrowingJobLeavesRunAndTheJobsBehindItRunOnTheNextRun) {
  asio::io_context io;
  mailbox& box = mailbox::of(io);
  std::vector<int> ran;
  box.push([&] { ran.push_back(1); });
  box.push([] { throw std::runtime_error("job failed"); });
  box.push([&] { ran.push_back(3); });
  EXPECT_THROW(io.run(), std::runtime_error);
  EXPECT_EQ(ran, std::vector<int>{1});
  io.run();
  EXPECT_EQ(ran, (std::vector<int>{1, 3}));
  box.push([&] { ran.push_back(4); });  // not left armed for good
  io.restart();
  io.run();
  EXPECT_EQ(ran, (std::vector<int>{1, 3, 4}));
}

TEST(MailboxTest, AJobPushedAfterTheLoopStoppedIsDestroyedNotRun) {
  std::atomic<int> destroyed{0};
  bool ran_late = false;
  {
    auto io = std::make_unique<asio::io_context>();
    auto work = asio::make_work_guard(*io);
    mailbox& box = mailbox::of(*io);
    std::thread loop([&] { io->run(); });
    std::promise<void> first;
    box.push([&] { first.set_value(); });
    auto f = first.get_future();
    EXPECT_TRUE(ready(f));
    io->stop();
    loop.join();
    work.reset();
    ASSERT_TRUE(io->stopped());

    box.push([&, c = counted(destroyed)] { ran_late = true; });
    EXPECT_EQ(destroyed.load(), 0);  // queued, not lost
    io.reset();                      // the mailbox shuts down with the io_context
  }
  EXPECT_FALSE(ran_late);
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(MailboxTest, ShutdownDestroysQueuedJobsWithoutRunningThem) {
  constexpr int k_jobs = 100;
  std::atomic<int> destroyed{0};
  std::atomic<int> pushed_at_shutdown_destroyed{0};
  int ran = 0;
  {
    asio::io_context io;
    mailbox& box = mailbox::of(io);
    for (int i = 0; i < k_jobs; ++i) box.push([&, c = counted(destroyed)] { ++ran; });
    // A job whose destruction pushes another (a destroyed answer that
    // tells its loop): that one is destroyed too, not leaked.
    struct pushes_when_destroyed {
      mailbox* box;
      std::atomic<int>* destroyed;
      pushes_when_destroyed(mailbox& b, std::atomic<int>& d) : box(&b), destroyed(&d) {}
      pushes_when_destroyed(pushes_when_destroyed&& o) noexcept
          : box(std::exchange(o.box, nullptr)), destroyed(o.destroyed) {}
      ~pushes_when_destroyed() {
        if (box != nullptr) box->push([c = counted(*destroyed)] {});
      }
    };
    box.push([&, p = pushes_when_destroyed(box, pushed_at_shutdown_destroyed)] { ++ran; });
    EXPECT_EQ(box.posts(), 1u);
  }
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(destroyed.load(), k_jobs);
  EXPECT_EQ(pushed_at_shutdown_destroyed.load(), 1);
}

// A job may own I/O objects of its loop (an answer's socket, a timer):
// queued jobs are destroyed while the io_context's services still exist,
// not after (ASan would see the timer's service used after its delete).
TEST(MailboxTest, QueuedJobsAreDestroyedWhileTheirLoopsServicesStillExist) {
  std::atomic<int> destroyed{0};
  {
    asio::io_context io;
    mailbox& box = mailbox::of(io);  // before the timer's service: destroyed after it
    auto timer = std::make_unique<asio::steady_timer>(io, std::chrono::hours(1));
    timer->async_wait([](boost::system::error_code) {});
    box.push([t = std::move(timer), c = counted(destroyed)] {});
  }
  EXPECT_EQ(destroyed.load(), 1);
}

}  // namespace
}  // namespace onceq
