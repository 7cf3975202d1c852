#include "cluster/shard_group.hpp"

#include <memory>
#include <utility>

#include <fmt/format.h>

namespace onceq::cluster {

namespace {
// The hint of a 503 while a shard elects a leader: raft's election timeout
// is 1-2 s.
constexpr long long k_election_retry_ms = 1'000;

error not_started(unsigned group) {
  return make_error(errc::unavailable, fmt::format("shard {}: raft is not running", group));
}
}  // namespace

shard_group::shard_group(unsigned group, replica& r, const cluster_config& config, millis grace_ms,
                         millis max_lease_ms)
    : group_(group),
      replica_(r),
      config_(config),
      self_(config.self().id),
      grace_(grace_ms, max_lease_ms) {}

error shard_group::error_of(const op_result& r) const {
  error e;
  e.code = errc::unavailable;
  switch (r.code) {
    case raft_errc::not_leader:
      if (auto id = config_.raft_id_of(r.leader); id && r.leader != self_) {
        e.message = fmt::format("shard {} is led by node {}", group_, r.leader);
        e.leader = static_cast<unsigned>(*id);
      } else if (const std::uint64_t hint = hint_ ? hint_() : 0;
                 r.leader.empty() && hint != 0 && config_.node_of(hint) != nullptr) {
        // This node holds no replica: the node the placement names.
        e.message = fmt::format("shard {} is held by node {}", group_, config_.node_of(hint)->id);
        e.leader = static_cast<unsigned>(hint);
      } else {
        e.message = fmt::format("shard {} has no leader (an election is under way)", group_);
        e.retry_after_ms = k_election_retry_ms;
      }
      break;
    case raft_errc::leadership_lost:
      e.message = fmt::format(
          "shard {}: the leader changed before the command was committed, so it may or may "
          "not have been applied: retry it (a produce with the same msg_id or Idempotency-Key "
          "is stored once)",
          group_);
      e.retry_after_ms = k_election_retry_ms;
      break;
    case raft_errc::shutting_down:
      e.message = "server is shutting down";
      break;
    case raft_errc::failed:
    case raft_errc::ok:
      e.message = fmt::format("shard {}: {}", group_, r.message);
      break;
  }
  return e;
}

void shard_group::propose(log_entry e, reply_fn done) {
  raft_node* n = node();
  if (n == nullptr) return done(not_started(group_));
  if (const std::uint64_t term = n->leader_term(group_); term != 0) {
    e.now_ms = grace_.stamp(term, e.now_ms);
  }
  auto shared_done = std::make_shared<reply_fn>(std::move(done));
  auto queued = n->propose(group_, encode_entry(e), [this, shared_done](op_result r) {
    if (!r.ok()) return (*shared_done)(error_of(r));
    // Its entry was applied just now, on this thread, and nothing since.
    auto reply = replica_.take_reply();
    if (!reply) {
      return (*shared_done)(make_error(errc::internal, "an applied entry left no reply"));
    }
    (*shared_done)(std::move(*reply));
  });
  if (!queued.ok()) (*shared_done)(std::move(queued).err());
}

void shard_group::read(bool fresh, std::function<void(broker&)> fn,
                       std::function<void(error)> fail) {
  raft_node* n = node();
  if (n == nullptr) return fail(not_started(group_));
  auto shared_fail = std::make_shared<std::function<void(error)>>(std::move(fail));
  auto queued = n->read(group_, fresh, [this, fn = std::move(fn), shared_fail](op_result r) {
    if (!r.ok()) return (*shared_fail)(error_of(r));
    fn(replica_.core());
  });
  if (!queued.ok()) (*shared_fail)(std::move(queued).err());
}

void shard_group::on_applied(std::function<void(log_tag, std::string_view)> fn) {
  topics_ = replica_.core().list_topics();  // before raft starts: this thread alone
  replica_.on_applied([this, fn = std::move(fn)](log_tag tag, std::string_view topic) {
    // A restored snapshot calls with a tick and no topic, as does a tick.
    const bool restored =
        tag == log_tag::tick && topic.empty() && replica_.restores() != restores_seen_;
    if (tag == log_tag::create_topic || tag == log_tag::delete_topic || restored) {
      restores_seen_ = replica_.restores();
      auto now = replica_.core().list_topics();
      std::lock_guard lock(topics_mu_);
      topics_ = std::move(now);
    }
    if (fn) fn(tag, topic);
  });
}

std::vector<std::string> shard_group::topics() const {
  std::lock_guard lock(topics_mu_);
  return topics_;
}

millis shard_group::next_deadline() const {
  return grace_.tick_at(replica_.next_deadline());
}

bool shard_group::leads() const {
  raft_node* n = node();
  return n != nullptr && n->leads(group_);
}

storage::store_health shard_group::log_health() const {
  raft_node* n = node();
  if (n == nullptr) return {};
  auto s = n->status(group_);
  if (!s.ok() || s->failure.empty()) return {};
  return {false, "replication stopped on this node: " + s->failure};
}

bool shard_group::holds() const {
  raft_node* n = node_.load(std::memory_order_acquire);
  return n == nullptr || n->opened(group_);
}

}  // namespace onceq::cluster
