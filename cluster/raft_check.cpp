#include "cluster/raft_check.hpp"

#include <string>

#include <fmt/format.h>

// ONCEQ_CLUSTER_BUILT_IN (cluster/CMakeLists.txt): 1 in a build with
// clustering, which links raft; 0 with -DONCEQ_CLUSTER=OFF, which links none.
#if ONCEQ_CLUSTER_BUILT_IN

#include <cstring>

// raft 0.15's headers declare C functions without extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/fixture.h>

// third_party/raft/commit_rule.c. Weak: null when the raft linked into this
// binary has no such object.
extern const char onceq_raft_commit_rule_stamp[] __attribute__((weak));
}

namespace onceq::cluster {

namespace {

// struct raft_apply and the function raft_apply() share a name.
using apply_request = struct raft_apply;

int probe_apply(raft_fsm*, const raft_buffer*, void** result) {
  *result = nullptr;
  return 0;
}
int probe_snapshot(raft_fsm*, raft_buffer*[], unsigned*) {
  return RAFT_NOMEM;  // never reached: far below raft's snapshot threshold
}
int probe_restore(raft_fsm*, raft_buffer* buf) {
  raft_free(buf->base);
  return 0;
}

// Three voters on raft's fixture. Server 0 leads a term and appends X while
// the followers' answers are dropped: both store X, the leader never hears
// it. It steps down (no majority heard from), is elected again in a later
// term (its log is as recent as theirs), and hears both followers report X
// stored. Entries of its new term: none. Raft's rule leaves X uncommitted
// there; raft 0.15 as Debian ships it commits it.
class probe {
 public:
  static constexpr unsigned k_voters = 3;

  probe() = default;
  probe(const probe&) = delete;
  probe& operator=(const probe&) = delete;
  ~probe() {
    if (initialized_) raft_fixture_close(&f_);
  }

  result<commit_rule_probe> run() {
    if (int rv = raft_fixture_initialize(&f_); rv != 0)
      return failed("raft_fixture_initialize", rv);
    initialized_ = true;
    for (auto& fsm : fsms_) {
      fsm.version = 1;
      fsm.apply = probe_apply;
      fsm.snapshot = probe_snapshot;
      fsm.restore = probe_restore;
      if (int rv = raft_fixture_grow(&f_, &fsm); rv != 0) return failed("raft_fixture_grow", rv);
    }
    raft_configuration conf;
    if (int rv = raft_fixture_configuration(&f_, k_voters, &conf); rv != 0) {
      return failed("raft_fixture_configuration", rv);
    }
    const int bootstrapped = raft_fixture_bootstrap(&f_, &conf);
    raft_configuration_close(&conf);
    if (bootstrapped != 0) return failed("raft_fixture_bootstrap", bootstrapped);
    if (int rv = raft_fixture_start(&f_); rv != 0) return failed("raft_fixture_start", rv);

    // Term a: server 0 leads and appends X; the followers store it, their
    // answers are dropped.
    if (!elect(0)) return stuck("the first election");
    const raft_term term_a = r(0)->current_term;
    for (unsigned i = 1; i < k_voters; ++i) raft_fixture_saturate(&f_, i, 0);
    if (int rv = propose(0, x_req_); rv != 0) return failed("raft_apply", rv);
    const raft_index x = raft_last_index(r(0));
    if (!step_until([&] { return r(1)->last_stored >= x && r(2)->last_stored >= x; })) {
      return stuck("the followers storing X");
    }
    if (!step_until([&] { return r(0)->state != RAFT_LEADER; }, 10'000)) {
      return stuck("the leader of term a stepping down");
    }
    for (unsigned i = 1; i < k_voters; ++i) raft_fixture_desaturate(&f_, i, 0);

    // A later term: server 0 leads again and hears both followers' answers
    // to its first AppendEntries (both have X).
    if (!elect(0, term_a)) return stuck("the second election");
    const raft_term term_b = r(0)->current_term;
    const unsigned answers = raft_fixture_n_recv(&f_, 0, RAFT_IO_APPEND_ENTRIES_RESULT);
    if (!step_until([&] {
          return raft_fixture_n_recv(&f_, 0, RAFT_IO_APPEND_ENTRIES_RESULT) >=
                 answers + 2 * (k_voters - 1);
        })) {
      return stuck("the followers' answers in the later term");
    }
    if (r(0)->state != RAFT_LEADER || r(0)->current_term != term_b) {
      return stuck("server 0 keeping its leadership");
    }
    const auto verdict = r(0)->commit_index >= x ? commit_rule_probe::counts_earlier_terms
                                                 : commit_rule_probe::current_term_only;

    // The group works: an entry of the later term commits, and X with it.
    if (int rv = propose(0, y_req_); rv != 0) return failed("raft_apply", rv);
    const raft_index y = raft_last_index(r(0));
    if (!step_until([&] { return r(0)->commit_index >= y; })) return stuck("committing Y");
    return verdict;
  }

 private:
  struct raft* r(unsigned i) {
    return raft_fixture_get(&f_, i);
  }

  template <class Pred>
  bool step_until(Pred pred, unsigned max_ms = 5'000) {
    return raft_fixture_step_until(
        &f_, [](raft_fixture*, void* arg) { return (*static_cast<Pred*>(arg))(); }, &pred, max_ms);
  }

  // As tests/unit/cluster/figure8_test.cpp's elect: every follower's timer
  // expires at the next tick (nobody wins that term: each votes for
  // itself), and the winner draws the shortest timeout for the next.
  bool elect(unsigned winner, raft_term above = 0) {
    for (unsigned i = 0; i < k_voters; ++i) {
      raft_fixture_set_randomized_election_timeout(&f_, i, i == winner ? 1000 : 3000);
      if (r(i)->state == RAFT_FOLLOWER) r(i)->follower_state.randomized_election_timeout = 1;
    }
    return step_until(
        [&] { return r(winner)->state == RAFT_LEADER && r(winner)->current_term > above; });
  }

  int propose(unsigned i, apply_request& req) {
    raft_buffer buf;
    buf.len = 8;
    buf.base = raft_malloc(buf.len);
    if (buf.base == nullptr) return RAFT_NOMEM;
    std::memset(buf.base, 0, buf.len);
    return raft_apply(r(i), &req, &buf, 1, [](apply_request*, int, void*) {});
  }

  static error failed(std::string_view what, int rv) {
    return make_error(errc::internal,
                      fmt::format("raft commit-rule probe: {}: {}", what, raft_strerror(rv)));
  }
  static error stuck(std::string_view what) {
    return make_error(errc::internal,
                      fmt::format("raft commit-rule probe: {} did not happen", what));
  }

  raft_fixture f_{};
  raft_fsm fsms_[k_voters]{};
  // Requests outlive the fixture's close, which may still answer them.
  apply_request x_req_{}, y_req_{};
  bool initialized_ = false;
};

}  // namespace

std::string_view raft_commit_rule_stamp() noexcept {
  // Read through a volatile pointer: the compiler may not assume a weak
  // symbol's address is non-null, but some versions warn as if it could.
  const char* volatile stamp = onceq_raft_commit_rule_stamp;
  return stamp != nullptr ? std::string_view(stamp) : std::string_view();
}

result<commit_rule_probe> probe_commit_rule() {
  probe p;
  return p.run();
}

result<std::string_view> check_raft() {
  constexpr std::string_view fix =
      "Rebuild onceqd with scripts/raft-release.sh's raft (bash scripts/raft-release.sh, then "
      "scripts/build.sh; third_party/raft/README.md)";
  const std::string_view stamp = raft_commit_rule_stamp();
  if (stamp.empty()) {
    return make_error(errc::failed_precondition,
                      fmt::format("the raft linked into this onceqd lacks onceq's commit rule "
                                  "(no onceq_raft_commit_rule_stamp): it can commit an entry of "
                                  "an earlier term and lose it (canonical/raft#220). {}",
                                  fix));
  }
  auto probed = probe_commit_rule();
  if (!probed.ok()) return std::move(probed).err();
  if (*probed != commit_rule_probe::current_term_only) {
    return make_error(errc::failed_precondition,
                      fmt::format("the raft linked into this onceqd has the stamp but committed "
                                  "an entry of an earlier term by counting replicas "
                                  "(canonical/raft#220). {}",
                                  fix));
  }
  return stamp;
}

}  // namespace onceq::cluster

#else  // ONCEQ_CLUSTER_BUILT_IN

namespace onceq::cluster {

std::string_view raft_commit_rule_stamp() noexcept {
  return {};
}

result<commit_rule_probe> probe_commit_rule() {
  return commit_rule_probe::not_built_in;
}

result<std::string_view> check_raft() {
  return make_error(errc::failed_precondition,
                    "clustering is not built into this onceqd (configured with "
                    "-DONCEQ_CLUSTER=OFF): --cluster needs a build with it, which links "
                    "scripts/raft-release.sh's raft");
}

}  // namespace onceq::cluster

#endif  // ONCEQ_CLUSTER_BUILT_IN
