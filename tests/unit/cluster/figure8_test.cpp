// Raft's "Figure 8" (Raft paper §5.4.2, dissertation §3.6.2) on raft's own
// deterministic in-memory fixture (raft/fixture.h): simulated time, network
// and disks, no threads, no sockets, no sleeps.
//
// raft 0.15 as Debian ships it commits an entry of an earlier term as soon
// as a majority stores it (canonical/raft#220); an entry committed that way
// can be overwritten by a later leader while a replica has already applied
// it. The library onceq links (third_party/raft/, scripts/raft-release.sh)
// applies the rule of upstream's fix (canonical/raft#336): a leader counts
// replicas only for entries of its own term. Against Debian's library this
// test fails: see third_party/raft/README.md.
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include <gtest/gtest.h>

// raft 0.15's headers declare C functions without extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/fixture.h>
}

namespace {

// struct raft_apply and the function raft_apply() share a name.
using apply_request = struct raft_apply;

constexpr unsigned n_servers = 5;
// Servers are S1..S5 in the paper, fixture indexes 0..4 here.
constexpr unsigned s1 = 0, s2 = 1, s3 = 2, s4 = 3, s5 = 4;

// What one server's state machine applied: index -> payload. raft 0.15's
// apply gets no index; it is raft_last_applied + 1 (raft advances it after
// each entry, commands or not).
struct replica {
  struct raft* r = nullptr;
  std::map<raft_index, std::uint64_t> applied;
};

int fsm_apply(raft_fsm* fsm, const raft_buffer* buf, void** result) {
  auto* rep = static_cast<replica*>(fsm->data);
  std::uint64_t v = 0;
  if (buf->len == sizeof v) std::memcpy(&v, buf->base, sizeof v);
  rep->applied[raft_last_applied(rep->r) + 1] = v;
  *result = nullptr;
  return 0;
}

int fsm_snapshot(raft_fsm*, raft_buffer* bufs[], unsigned* n_bufs) {
  // Not reached (far below the snapshot threshold); valid all the same.
  *bufs = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
  if (*bufs == nullptr) return RAFT_NOMEM;
  (*bufs)[0].base = raft_malloc(8);
  (*bufs)[0].len = 8;
  *n_bufs = 1;
  return 0;
}

int fsm_restore(raft_fsm*, raft_buffer* buf) {
  raft_free(buf->base);
  return 0;
}

// Raft's fixture with N voters, each with a recording state machine,
// bootstrapped and started.
template <unsigned N>
class raft_group_fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(raft_fixture_initialize(&f_), 0);
    for (unsigned i = 0; i < N; i++) {
      fsms_[i] = raft_fsm{};
      fsms_[i].version = 1;
      fsms_[i].data = &replicas_[i];
      fsms_[i].apply = fsm_apply;
      fsms_[i].snapshot = fsm_snapshot;
      fsms_[i].restore = fsm_restore;
      ASSERT_EQ(raft_fixture_grow(&f_, &fsms_[i]), 0);
      replicas_[i].r = raft_fixture_get(&f_, i);
    }
    raft_configuration conf;
    ASSERT_EQ(raft_fixture_configuration(&f_, N, &conf), 0);
    ASSERT_EQ(raft_fixture_bootstrap(&f_, &conf), 0);
    raft_configuration_close(&conf);
    ASSERT_EQ(raft_fixture_start(&f_), 0);
    initialized_ = true;
  }

  void TearDown() override {
    if (initialized_) raft_fixture_close(&f_);
  }

  raft_fixture f_{};
  raft_fsm fsms_[N]{};
  replica replicas_[N];
  bool initialized_ = false;
};

class figure8 : public raft_group_fixture<n_servers> {
 protected:
  struct raft* r(unsigned i) {
    return raft_fixture_get(&f_, i);
  }

  // Steps the fixture until pred() holds, at most max_ms of simulated time.
  bool step_until(std::function<bool()> pred, unsigned max_ms = 5000) {
    return raft_fixture_step_until(
        &f_, [](raft_fixture*, void* arg) { return (*static_cast<std::function<bool()>*>(arg))(); },
        &pred, max_ms);
  }

  // The next election is won by `winner`, deterministically. raft 0.15
  // draws a follower's election timeout when it becomes follower or
  // candidate, and a follower that knows a leader refuses to vote. So every
  // live follower's timer expires at the next tick (nobody wins that term:
  // each candidate votes for itself), and the winner draws the shortest
  // timeout for the term after.
  void favour(unsigned winner) {
    for (unsigned i = 0; i < n_servers; i++) {
      raft_fixture_set_randomized_election_timeout(&f_, i, i == winner ? 1000 : 3000);
      if (raft_fixture_alive(&f_, i) && r(i)->state == RAFT_FOLLOWER) {
        r(i)->follower_state.randomized_election_timeout = 1;
      }
    }
  }

  // Makes `winner` the leader of a term above `term`.
  ::testing::AssertionResult elect(unsigned winner, raft_term term) {
    favour(winner);
    if (!step_until(
            [&] { return r(winner)->state == RAFT_LEADER && r(winner)->current_term > term; })) {
      return ::testing::AssertionFailure()
             << "S" << winner + 1 << " did not win a term above " << term;
    }
    return ::testing::AssertionSuccess();
  }

  // A killed leader that is revived still believes it leads, until a reply
  // with a higher term makes it a follower.
  ::testing::AssertionResult revive(unsigned i) {
    raft_fixture_revive(&f_, i);
    if (!step_until([&] { return r(i)->state == RAFT_FOLLOWER; })) {
      return ::testing::AssertionFailure() << "S" << i + 1 << " did not step down";
    }
    return ::testing::AssertionSuccess();
  }

  // Cuts (or restores) every link from server i: its messages are dropped.
  void isolate_sender(unsigned i, bool on) {
    for (unsigned j = 0; j < n_servers; j++) {
      if (j == i) continue;
      if (on) {
        raft_fixture_saturate(&f_, i, j);
      } else {
        raft_fixture_desaturate(&f_, i, j);
      }
    }
  }

  // raft_apply of one 8-byte command on server i (its leader).
  void propose(unsigned i, std::uint64_t v) {
    raft_buffer buf;
    buf.len = sizeof v;
    buf.base = raft_malloc(buf.len);
    ASSERT_NE(buf.base, nullptr);
    std::memcpy(buf.base, &v, sizeof v);
    auto* req = new apply_request{};
    ASSERT_EQ(raft_apply(r(i), req, &buf, 1, [](apply_request* q, int, void*) { delete q; }), 0);
  }
};

// The paper's terms 2, 3, 4 and 5 are a < b < c < d here (elections may
// take more than one term each).
constexpr std::uint64_t x_a = 0xa;  // S1's entry of term a at index 2
constexpr std::uint64_t y_b = 0xb;  // S5's entry of term b at index 2
constexpr std::uint64_t z_d = 0xd;  // S5's entry of term d at index 3

TEST_F(figure8, an_entry_of_an_earlier_term_is_not_committed_by_counting_replicas) {
  // (a) S1 leads term 2 and appends X at index 2; only S2 stores it.
  raft_fixture_elect(&f_, s1);
  ASSERT_EQ(r(s1)->state, RAFT_LEADER);
  const raft_term term_a = r(s1)->current_term;
  for (unsigned j : {s3, s4, s5}) raft_fixture_saturate(&f_, s1, j);
  propose(s1, x_a);
  ASSERT_TRUE(step_until([&] { return r(s2)->last_stored == 2; }, 500));
  // S1 crashes.
  raft_fixture_kill(&f_, s1);
  isolate_sender(s1, false);

  // (b) S5 wins a later term b with the votes of S3, S4 and its own (S2's
  // log is more up to date than S5's), appends Y at index 2 and stores it
  // alone. S5 crashes.
  ASSERT_TRUE(elect(s5, term_a));
  const raft_term term_b = r(s5)->current_term;
  isolate_sender(s5, true);
  propose(s5, y_b);
  ASSERT_TRUE(step_until([&] { return r(s5)->last_stored == 2; }, 500));
  raft_fixture_kill(&f_, s5);
  isolate_sender(s5, false);
  ASSERT_EQ(raft_last_index(r(s3)), 1u);
  ASSERT_EQ(raft_last_index(r(s4)), 1u);

  // (c) S1 restarts and wins term c > b (S2, S3, S4 vote for it: its last
  // entry, X of term a, is as recent as theirs), then copies X to S3 and S4.
  // A majority (S1, S2, S3, S4) stores X, and no entry of term c exists.
  ASSERT_TRUE(revive(s1));
  ASSERT_TRUE(elect(s1, term_b));
  const raft_term term_c = r(s1)->current_term;
  ASSERT_TRUE(step_until([&] { return r(s3)->last_stored == 2 && r(s4)->last_stored == 2; }));
  ASSERT_TRUE(raft_fixture_step_until_delivered(&f_, s3, s1, 500));
  ASSERT_TRUE(raft_fixture_step_until_delivered(&f_, s4, s1, 500));
  ASSERT_EQ(raft_last_index(r(s1)), 2u);
  // Raft's rule: an entry of an earlier term is never committed by counting
  // replicas. Debian's raft 0.15 commits X here, and S1 applies it.
  EXPECT_LT(r(s1)->commit_index, 2u)
      << "S1, leader of term " << term_c << ", committed index 2 (X, of term " << term_a
      << ") by counting replicas";
  const bool s1_applied_x = replicas_[s1].applied.count(2) != 0;
  EXPECT_FALSE(s1_applied_x) << "S1 applied X at index 2";

  // (d) S1 crashes before any entry of term c reaches a majority. S5
  // restarts and wins term d > c (its last entry, Y of term b, is more
  // recent than X of term a), overwrites index 2 with Y on S2, S3 and S4,
  // and commits it with Z, an entry of its own term, at index 3.
  raft_fixture_kill(&f_, s1);
  ASSERT_TRUE(revive(s5));
  ASSERT_TRUE(elect(s5, term_c));
  propose(s5, z_d);
  ASSERT_TRUE(step_until([&] {
    for (unsigned i : {s2, s3, s4, s5}) {
      if (raft_last_applied(r(i)) < 3) return false;
    }
    return true;
  }));

  // No two replicas applied different entries at the same index.
  for (unsigned i = 0; i < n_servers; i++) {
    for (const auto& [index, v] : replicas_[i].applied) {
      for (unsigned j = i + 1; j < n_servers; j++) {
        auto it = replicas_[j].applied.find(index);
        if (it == replicas_[j].applied.end()) continue;
        EXPECT_EQ(v, it->second) << "S" << i + 1 << " and S" << j + 1
                                 << " applied different entries at index " << index;
      }
    }
  }
  for (unsigned i : {s2, s3, s4, s5}) {
    EXPECT_EQ(replicas_[i].applied[2], y_b) << "S" << i + 1;
    EXPECT_EQ(replicas_[i].applied[3], z_d) << "S" << i + 1;
  }

  // S1 restarts and converges: X was never applied, so raft may replace it.
  // (Skipped when S1 applied X: raft would then have to overwrite an
  // applied entry, the failure this test exists to rule out.)
  if (!s1_applied_x) {
    raft_fixture_revive(&f_, s1);
    ASSERT_TRUE(step_until([&] { return raft_last_applied(r(s1)) >= 3; }));
    EXPECT_EQ(replicas_[s1].applied[2], y_b);
    EXPECT_EQ(replicas_[s1].applied[3], z_d);
  }
}

// The rule counts replicas only for entries of the leader's term: a lone
// voter's own entries are of its term, so it still commits them at once.
using single_voter = raft_group_fixture<1>;

TEST_F(single_voter, commits_its_own_entries) {
  struct raft* r = raft_fixture_get(&f_, 0);
  ASSERT_TRUE(raft_fixture_step_until_state_is(&f_, 0, RAFT_LEADER, 5000));
  for (std::uint64_t v = 1; v <= 3; v++) {
    raft_buffer buf;
    buf.len = sizeof v;
    buf.base = raft_malloc(buf.len);
    ASSERT_NE(buf.base, nullptr);
    std::memcpy(buf.base, &v, sizeof v);
    auto* req = new apply_request{};
    ASSERT_EQ(raft_apply(r, req, &buf, 1, [](apply_request* q, int, void*) { delete q; }), 0);
  }
  const raft_index last = raft_last_index(r);
  ASSERT_TRUE(raft_fixture_step_until_applied(&f_, 0, last, 5000));
  EXPECT_EQ(r->commit_index, last);
  ASSERT_EQ(replicas_[0].applied.size(), 3u);
  EXPECT_EQ(replicas_[0].applied.rbegin()->second, 3u);
}

}  // namespace
