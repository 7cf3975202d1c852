// onceqd's raft check (cluster/raft_check.cpp, compiled into this test)
// linked with Debian's own libraft.a, raft 0.15 without the commit rule
// (canonical/raft#220): the check refuses it, and each of its two proofs
// fails on its own. onceqd --cluster calls the same check_raft() and exits
// non-zero on its error (cmd/onceqd.cpp).
#include <string>

#include <gtest/gtest.h>

#include "cluster/raft_check.hpp"

namespace onceq::cluster {
namespace {

TEST(raft_check_unpatched, has_no_stamp) {
  EXPECT_EQ(raft_commit_rule_stamp(), "");
}

TEST(raft_check_unpatched, the_probe_catches_an_earlier_terms_entry_committed_by_counting) {
  auto probed = probe_commit_rule();
  ASSERT_TRUE(probed.ok()) << probed.err().message;
  EXPECT_EQ(*probed, commit_rule_probe::counts_earlier_terms);
}

TEST(raft_check_unpatched, refuses_and_says_how_to_fix_it) {
  auto checked = check_raft();
  ASSERT_FALSE(checked.ok()) << "accepted: " << *checked;
  EXPECT_EQ(checked.code(), errc::failed_precondition);
  const std::string& why = checked.err().message;
  EXPECT_NE(why.find("canonical/raft#220"), std::string::npos) << why;
  EXPECT_NE(why.find("scripts/raft-release.sh"), std::string::npos) << why;
}

}  // namespace
}  // namespace onceq::cluster
