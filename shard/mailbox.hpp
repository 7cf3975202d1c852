#pragma once

// A loop's mailbox: how a job crosses to an event loop (an Asio io_context
// run by one thread, as a shard's) from any other thread, at the cost of
// one allocation and three atomic read-modify-writes per job, and one
// asio::post (a lock, an allocation, maybe a wake-up of the loop) per
// batch instead of one per job.
//
// push() links the job into a lock-free multi-producer single-consumer
// queue (Dmitry Vyukov's intrusive node-based MPSC queue: a producer does
// one exchange of the head and links its predecessor to it; the loop pops
// from the tail, past a stub node). The first push into an idle mailbox
// arms it and posts one drain to the loop; pushes that find it armed post
// nothing. The drain runs every job it finds, up to k_max_batch, then
// posts itself again behind the loop's other ready handlers (its sockets),
// so that a flooded mailbox delays them by one batch at most.
//
// Thread safety: push(), of() and the counters may be called from any
// thread, concurrently. The io_context must be run by one thread at a time
// (the drain is the queue's only consumer); jobs run on that thread.
//
// Ordering: the jobs of one producer thread run in the order it pushed
// them. Jobs of different producers interleave in the order their pushes
// reached the queue. A job pushed while the loop runs a job of this
// mailbox (from that job or from another thread) runs after it returns,
// never inside it. A producer preempted in the middle of a push delays
// the jobs pushed after it (they queue behind it) but loses none, and the
// loop does not spin waiting for it.
//
// Lifetime: the mailbox is a service of its io_context: created by the
// first of(), destroyed with the io_context, which must outlive every
// push(). A job is destroyed on the loop thread right after it has run.
// Jobs that never ran (the io_context was stopped, or destroyed with jobs
// queued) are destroyed without being run when the io_context shuts down,
// as Asio destroys handlers it never ran; so are jobs pushed during that
// shutdown (e.g. from a destroyed job's destructor).
//
// Errors: a job that throws: the exception leaves io_context::run() (or
// poll()) as any Asio handler's does; the jobs behind it stay queued and a
// drain is posted for them before the exception propagates, so they run
// on the next run(). push() throws only std::bad_alloc, and the job is
// then not queued (or, if the post failed, queued and run with the next
// push's drain).

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace onceq {

class mailbox : public boost::asio::execution_context::service {
 public:
  // Jobs one drain runs before it posts itself again behind the loop's
  // other handlers: a flood costs one post per 256 jobs, and the loop's
  // sockets wait for 256 jobs at most.
  static constexpr std::size_t k_max_batch = 256;

  // The key of the service in its io_context's registry.
  static inline boost::asio::execution_context::id id;

  // Called by the registry (use_service, of()). Only an io_context can
  // own a mailbox: use_service<mailbox> on any other execution_context
  // does not compile (Asio constructs a service from the owner's own
  // type).
  explicit mailbox(boost::asio::io_context& owner)
      : boost::asio::execution_context::service(owner), io_(owner) {}
  ~mailbox() override { destroy_queued(); }
  mailbox(const mailbox&) = delete;
  mailbox& operator=(const mailbox&) = delete;

  // The mailbox of io's loop, created on first use. Any thread. It takes
  // the registry's lock: look it up once and keep the reference.
  static mailbox& of(boost::asio::io_context& io) { return boost::asio::use_service<mailbox>(io); }

  // Queues fn to run on the loop: any callable with no argument (its
  // result is discarded), move-only ones too; it is moved into the job's
  // node, the one allocation of a push. Any thread, including the loop's
  // and a job of this mailbox.
  template <class F>
  void push(F&& fn) {
    using job = std::decay_t<F>;
    static_assert(std::invocable<job&>, "a job is called with no argument");
    link(new job_node<job>(std::forward<F>(fn)));
    producers_.pushed.fetch_add(1, std::memory_order_relaxed);
    // After the link, and a read-modify-write: see drain() for why no
    // wake-up is lost.
    if (!producers_.armed.exchange(true, std::memory_order_acq_rel)) post_drain();
  }

  // Jobs pushed so far. Any thread (a relaxed read: a recent value).
  std::uint64_t pushed() const noexcept {
    return producers_.pushed.load(std::memory_order_relaxed);
  }
  // asio::post calls made so far: one per wake-up of an idle mailbox, plus
  // one per drain that stopped at k_max_batch or at a throwing job. Any
  // thread (relaxed). pushed() - posts() is what the batching saved.
  std::uint64_t posts() const noexcept { return producers_.posts.load(std::memory_order_relaxed); }

 private:
  struct node {
    std::atomic<node*> next{nullptr};
    virtual ~node() = default;
    virtual void run() {}  // the stub's: never called
  };
  template <class F>
  struct job_node final : node {
    template <class G>
    explicit job_node(G&& g) : fn(std::forward<G>(g)) {}
    void run() override { fn(); }
    F fn;
  };

  // Producers' side of the queue (and the consumer's stub re-insertion).
  void link(node* n) noexcept {
    n->next.store(nullptr, std::memory_order_relaxed);
    // acquire: prev's own next = nullptr is done before we overwrite it;
    // release: n's contents go with it.
    node* prev = producers_.head.exchange(n, std::memory_order_acq_rel);
    // Between these two lines the queue is cut at prev: the loop sees
    // nothing after prev until this store lands.
    prev->next.store(n, std::memory_order_release);
  }

  // Loop only. The oldest linked job, or null if the queue is empty or cut
  // at its next node (a producer between its exchange and its link).
  node* pop() noexcept {
    node* tail = tail_;
    node* next = tail->next.load(std::memory_order_acquire);
    if (tail == &stub_) {
      if (next == nullptr) return nullptr;
      tail_ = next;
      tail = next;
      next = next->next.load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    // tail is the last linked node: it can go only if it is the head too,
    // once the stub is queued behind it to keep the queue non-empty.
    if (tail != producers_.head.load(std::memory_order_acquire)) return nullptr;
    link(&stub_);
    next = tail->next.load(std::memory_order_acquire);
    if (next == nullptr) return nullptr;  // a producer got in before the stub
    tail_ = next;
    return tail;
  }

  // Loop only: whether pop() will find a job. After a pop() that found
  // none, tail_ is either the stub or a job whose successor is not linked
  // yet (never the head), so a linked successor is the only sign of work.
  bool ready() const noexcept { return tail_->next.load(std::memory_order_acquire) != nullptr; }

  void post_drain() {
    producers_.posts.fetch_add(1, std::memory_order_relaxed);
    try {
      boost::asio::post(io_, [this] { drain(); });
    } catch (...) {
      // Out of memory: disarm, so that the next push posts again.
      producers_.armed.store(false, std::memory_order_release);
      throw;
    }
  }

  // Runs on the loop, holding the mailbox armed (one drain at a time).
  //
  // Why no wake-up is lost. A producer links its node (B), then arms with
  // an exchange (C). If C finds armed false, it posts a drain, which runs
  // after B. If C finds it true, a drain is owed: that drain's next disarm
  // below comes after C in armed's modification order, and only
  // read-modify-writes (other C's, the re-arm) can sit between the two;
  // so the disarm, an acquire exchange, synchronises with C, and the
  // re-check after it sees B. (A plain store to disarm would not: B and
  // the re-check could pass each other, store against load, as in
  // Dekker's.) If the re-check finds the queue cut at a node whose
  // producer was preempted between its exchange and its link, that
  // producer's own C has not come yet; when it does, the same holds for
  // it, and the drain that follows sees everything linked before too,
  // since drains run one after another on the loop thread. So a preempted
  // producer holds back the jobs queued behind it until it links, and the
  // loop goes back to its other work meanwhile instead of spinning.
  void drain() {
    try {
      std::size_t ran = 0;
      for (;;) {
        while (node* next = pop()) {
          std::unique_ptr<node> n(next);
          n->run();
          if (++ran == k_max_batch) {
            // Still armed: the next drain goes behind the loop's sockets.
            post_drain_again();
            return;
          }
        }
        producers_.armed.exchange(false, std::memory_order_acq_rel);
        if (!ready()) return;
        // Jobs arrived after the last pop. Take them on, unless a producer
        // armed first: its drain is posted and will.
        if (producers_.armed.exchange(true, std::memory_order_acq_rel)) return;
      }
    } catch (...) {
      // A job threw (pop() and the disarming do not): the mailbox is still
      // armed; the jobs behind it need a drain.
      post_drain_again();
      throw;
    }
  }

  void post_drain_again() {
    producers_.posts.fetch_add(1, std::memory_order_relaxed);
    boost::asio::post(io_, [this] { drain(); });
  }

  // Destroys every queued job without running it. The io_context is
  // shutting down: no drain will run (the one posted, if any, is
  // destroyed by the io_context), and nothing else pops.
  void shutdown() override {
    // Armed for good: pushes from now on (a job's destructor) post nothing.
    producers_.armed.store(true, std::memory_order_relaxed);
    destroy_queued();
  }

  void destroy_queued() noexcept {
    // No producer is between its two steps now (the io_context is going
    // away, pushing to it is over), so pop() stops only at the end.
    while (node* n = pop()) delete n;
  }

  boost::asio::io_context& io_;
  // What producers write on every push, on one cache line of its own (64:
  // std::hardware_destructive_interference_size is not ABI-stable, GCC
  // warns): after its head exchange a producer owns this line, so the arm
  // and the count cost it no further transfer.
  struct alignas(64) producer_side {
    std::atomic<node*> head;
    std::atomic<bool> armed{false};
    std::atomic<std::uint64_t> pushed{0};
    std::atomic<std::uint64_t> posts{0};
  };
  producer_side producers_{&stub_};
  // The loop's side.
  alignas(64) node* tail_ = &stub_;
  node stub_;
};

}  // namespace onceq
