// onceqd's raft check (cluster/raft_check.hpp) against the raft onceq links
// (scripts/raft-release.sh's): it passes, by stamp and by probe. The same
// check against Debian's library is raft_check_unpatched_test.cpp.
#include "cluster/raft_check.hpp"

#include <gtest/gtest.h>

namespace onceq::cluster {
namespace {

TEST(raft_check, the_linked_raft_carries_the_commit_rule_stamp) {
  EXPECT_NE(raft_commit_rule_stamp().find("onceq-raft-commit-rule"), std::string_view::npos)
      << "stamp: '" << raft_commit_rule_stamp() << "'";
}

TEST(raft_check, the_probe_sees_an_earlier_terms_entry_left_uncommitted) {
  auto probed = probe_commit_rule();
  ASSERT_TRUE(probed.ok()) << probed.err().message;
  EXPECT_EQ(*probed, commit_rule_probe::current_term_only);
}

TEST(raft_check, passes_and_names_the_stamp) {
  auto checked = check_raft();
  ASSERT_TRUE(checked.ok()) << checked.err().message;
  EXPECT_EQ(*checked, raft_commit_rule_stamp());
}

}  // namespace
}  // namespace onceq::cluster
