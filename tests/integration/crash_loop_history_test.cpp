// The crash-loop checker must catch each kind of broken promise, and must
// not cry wolf on the histories a correct broker produces (retried acks,
// nacks, lapsed leases).

#include "crash_loop_history.hpp"

#include <gtest/gtest.h>

namespace onceq::itest::crash_loop {
namespace {

using o = settle_record::outcome;
using k = settle_record::kind;

class checker : public ::testing::Test {
 protected:
  void produce(const std::string& key, const std::string& id, position pos) {
    h_.produces.push_back({id, key, pos, false, 1000});
  }
  // A delivery of key's message at pos to owner, granted by a consume sent
  // at `sent` and answered 5 ms later, leased for 300 ms.
  void deliver(const std::string& key, const std::string& owner, position pos,
               std::int64_t attempts, millis sent, const std::string& id = "") {
    h_.deliveries.push_back({owner, key, id.empty() ? key + ".a" : id, pos, attempts, sent + 300,
                             sent, sent + 5, "n1"});
  }
  void settle(k what, o result, const std::string& key, const std::string& owner, position pos,
              std::int64_t attempts, millis sent) {
    h_.settles.push_back(
        {what, result, owner, key, pos, attempts, sent, result == o::unknown ? 0 : sent + 3, "n1"});
  }
  std::vector<std::string> rules() const {
    std::vector<std::string> out;
    for (const auto& v : check(h_, keys_)) out.push_back(v.rule);
    return out;
  }

  history h_;
  final_key_states keys_;
};

using rules_t = std::vector<std::string>;

TEST_F(checker, a_correct_history_passes) {
  produce("K", "K.a", {0, 1});
  produce("K", "K.b", {2, 7});
  deliver("K", "c0.0", {0, 1}, 1, 2000);
  settle(k::nack, o::ok, "K", "c0.0", {0, 1}, 1, 2010);
  deliver("K", "c1.0", {2, 7}, 1, 2020, "K.b");  // after the nack released the key
  // Crashed: never settled; the next delivery comes after the lease ran out.
  deliver("K", "c2.0", {0, 1}, 2, 2330);
  settle(k::ack, o::unknown, "K", "c2.0", {0, 1}, 2, 2340);   // answer lost...
  settle(k::ack, o::ok, "K", "c2.0", {0, 1}, 2, 2400);        // ...retried: same delivery
  settle(k::ack, o::rejected, "K", "c1.0", {2, 7}, 1, 2500);  // fenced late ack
  keys_["K"] = "committed";
  EXPECT_EQ(rules(), rules_t{});
  auto f = count(h_, keys_);
  EXPECT_EQ(f.acks_ok, 1u);
  EXPECT_EQ(f.acks_rejected, 1u);
  EXPECT_EQ(f.key_duplicates_suppressed, 1u);
}

TEST_F(checker, answered_produce_whose_key_never_commits) {
  produce("K", "K.a", {0, 1});
  keys_["K"] = "failed";
  EXPECT_EQ(rules(), rules_t{"lost_key"});
  keys_.clear();
  EXPECT_EQ(rules(), rules_t{"lost_key"});
}

TEST_F(checker, two_successful_acks_of_one_key) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);         // lease ran out at 2300
  deliver("K", "c1.0", {2, 7}, 1, 2340, "K.b");  // the key went to c1
  settle(k::ack, o::ok, "K", "c1.0", {2, 7}, 1, 2360);
  settle(k::ack, o::ok, "K", "c0.0", {0, 1}, 1, 2400);  // late ack accepted anyway
  EXPECT_EQ(rules(), rules_t{"double_ack"});
}

TEST_F(checker, delivery_requested_after_the_ack_was_answered) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);
  settle(k::ack, o::ok, "K", "c0.0", {0, 1}, 1, 2010);  // answered at 2013
  deliver("K", "c1.0", {2, 7}, 1, 2014, "K.b");
  EXPECT_EQ(rules(), rules_t{"after_ack"});
}

TEST_F(checker, delivery_requested_before_the_ack_answer_is_not_a_violation) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);
  settle(k::ack, o::ok, "K", "c0.0", {0, 1}, 1, 2010);  // answered at 2013
  deliver("K", "c1.0", {2, 7}, 1, 2012, "K.b");         // raced the ack: overlap rule's business
  EXPECT_EQ(rules(), rules_t{});
}

TEST_F(checker, second_owner_while_the_first_lease_is_live) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);         // live until 2300
  deliver("K", "c1.0", {2, 7}, 1, 2100, "K.b");  // answered 2105
  EXPECT_EQ(rules(), rules_t{"lease_overlap"});
}

TEST_F(checker, redelivery_of_the_same_message_before_its_lease_ends) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);
  deliver("K", "c1.0", {0, 1}, 2, 2290);  // answered 2295 < 2300
  EXPECT_EQ(rules(), rules_t{"lease_overlap"});
}

TEST_F(checker, late_ack_commits_a_key_another_delivery_holds) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);                // lease ran out at 2300
  deliver("K", "c1.0", {2, 7}, 1, 2340, "K.b");         // c1 holds the key until 2645
  settle(k::ack, o::ok, "K", "c0.0", {0, 1}, 1, 2400);  // must have been 409
  EXPECT_EQ(rules(), rules_t{"ack_stole_key"});
  h_.settles.back().result = o::rejected;
  EXPECT_EQ(rules(), rules_t{});
}

TEST_F(checker, a_nack_without_answer_may_have_released_the_lease) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);
  settle(k::nack, o::unknown, "K", "c0.0", {0, 1}, 1, 2050);
  deliver("K", "c1.0", {0, 1}, 2, 2100);
  EXPECT_EQ(rules(), rules_t{});
}

TEST_F(checker, a_fenced_nack_did_not_release_the_lease) {
  deliver("K", "c0.0", {0, 1}, 1, 2000);
  settle(k::nack, o::rejected, "K", "c0.0", {0, 1}, 1, 2050);
  deliver("K", "c1.0", {0, 1}, 2, 2100);
  EXPECT_EQ(rules(), rules_t{"lease_overlap"});
}

TEST_F(checker, one_dedup_id_at_two_positions) {
  produce("K", "K.a", {0, 1});
  produce("K", "K.a", {0, 9});
  keys_["K"] = "committed";
  EXPECT_EQ(rules(), rules_t{"id_moved"});
  h_.produces.pop_back();
  deliver("K", "c0.0", {3, 1}, 1, 2000);  // the value names K.a, stored elsewhere
  EXPECT_EQ(rules(), rules_t{"id_moved"});
}

// ---- apply traces (onceqd --apply-trace) ----

std::vector<std::string> rules_of(const std::vector<violation>& vs) {
  std::vector<std::string> out;
  for (const auto& v : vs) out.push_back(v.rule);
  return out;
}

TEST(apply_traces, replicas_that_wrote_alike_agree) {
  // n2 was down for 3..4 and replayed 2 after its restart; n3 is behind.
  const std::vector<apply_trace> t = {
      {"n1",
       "1 3 00000000000000aa\n2 5 00000000000000bb\n3 5 0000000000000000\n"
       "4 1 00000000000000cc\n"},
      {"n2",
       "1 3 00000000000000aa\n2 5 00000000000000bb\n2 5 00000000000000bb\n"
       "4 1 00000000000000cc\n5 1 00000000000000dd\n"},
      {"n3", "1 3 00000000000000aa\n2 5 00000000000000bb\n3 5 0000000000000000\n4 1 "},
  };
  EXPECT_TRUE(compare_apply_traces(t).empty());
}

TEST(apply_traces, a_digest_that_differs_is_where_the_replicas_parted) {
  const std::vector<apply_trace> t = {
      {"n1", "1 3 00000000000000aa\n2 5 00000000000000bb\n3 1 00000000000000cc\n"},
      {"n2", "1 3 00000000000000aa\n2 5 00000000000000be\n3 1 00000000000000cd\n"},
  };
  const auto v = compare_apply_traces(t, 1);
  ASSERT_EQ(rules_of(v), std::vector<std::string>{"replicas_parted"});
  EXPECT_NE(v[0].detail.find("index 2 (tag 5): n1 wrote 00000000000000bb n2 wrote "
                             "00000000000000be"),
            std::string::npos)
      << v[0].detail;
  EXPECT_NE(v[0].detail.find("2 indexes differ in all"), std::string::npos) << v[0].detail;
}

TEST(apply_traces, a_replay_that_wrote_something_else) {
  const std::vector<apply_trace> t = {
      {"n1", "7 5 00000000000000aa\n8 5 00000000000000bb\n7 5 00000000000000ab\n"},
  };
  const auto v = compare_apply_traces(t);
  ASSERT_EQ(rules_of(v), std::vector<std::string>{"replay_differs"});
  EXPECT_NE(v[0].detail.find("n1 applied index 7 (tag 5) twice"), std::string::npos) << v[0].detail;
}

}  // namespace
}  // namespace onceq::itest::crash_loop
