// Lease runs: a consume stores its first leases as one record per
// partition (storage::lease_run_record), and a member's own delivery record
// says more than its run, before and after a restart.

#include <gtest/gtest.h>

#include "broker_test_support.hpp"
#include "storage/schema.hpp"

namespace onceq::testing {
namespace {

namespace st = storage;

class LeaseRunsTest : public BrokerTest {
 protected:
  // The lease runs and the records of a delivery's own in the store.
  std::size_t runs() {
    std::size_t n = 0;
    auto r = store_.scan(st::column::deliveries, "", std::string(32, '\xff'),
                         [&](std::string_view k, std::string_view) {
                           n += st::keys::is_lease_run(k) ? 1 : 0;
                           return true;
                         });
    EXPECT_TRUE(r.ok());
    return n;
  }
  std::size_t own_records() { return store_.count(st::column::deliveries) - runs(); }

  // Acks every one of ds in one batch; the outcomes' codes.
  std::vector<errc> ack_all(const std::vector<delivery>& ds, const std::string& owner) {
    ack_batch_cmd cmd{"t", "g", owner, {}};
    for (const auto& d : ds)
      cmd.acks.push_back(ack_item{d.partition, d.offset, d.attempts, {}, d.fencing_token, {}});
    auto r = b().ack_batch(cmd);
    EXPECT_TRUE(r.ok());
    std::vector<errc> codes;
    if (r.ok())
      for (const auto& o : *r) codes.push_back(o.code);
    return codes;
  }

  result<void> ack_fenced(const delivery& d, const std::string& owner) {
    auto r = b().ack(ack_cmd{
        delivery_ref{d.topic, "g", owner, d.partition, d.offset, d.attempts, d.fencing_token},
        {},
        {}});
    if (!r.ok()) return std::move(r).err();
    return {};
  }
};

TEST_F(LeaseRunsTest, a_consume_stores_its_first_leases_as_one_run_per_partition) {
  create("t", 2);
  for (int i = 0; i < 8; ++i) {
    auto m = msg("v" + std::to_string(i));
    m.partition_override = i % 2;
    produce("t", std::move(m));
  }
  auto got = consume("t", "g", "a", 8, 1000);
  ASSERT_EQ(got.size(), 8u);
  EXPECT_EQ(runs(), 2u);
  EXPECT_EQ(own_records(), 0u);

  // Expiry writes each member a record of its own; their redeliveries are
  // no first leases, so they are stored one by one too.
  advance(1001);
  EXPECT_EQ(own_records(), 8u);
  auto again = consume("t", "g", "b", 8, 1000);
  ASSERT_EQ(again.size(), 8u);
  for (const auto& d : again) EXPECT_EQ(d.attempts, 2);
  EXPECT_EQ(runs(), 2u);
  EXPECT_EQ(own_records(), 8u);
  for (const auto& d : again) ASSERT_TRUE(ack_fenced(d, "b").ok());
  EXPECT_EQ(stats("t", "g").acked, 8u);
}

TEST_F(LeaseRunsTest, a_restart_reads_the_runs_leases_unless_a_member_has_its_own_record) {
  create("t");
  for (int i = 0; i < 6; ++i) produce("t", "v" + std::to_string(i));
  auto got = consume("t", "g", "a", 6, 30'000);
  ASSERT_EQ(got.size(), 6u);
  ASSERT_TRUE(ack_fenced(got[0], "a").ok());  // the run's first member
  ASSERT_TRUE(nack(got[2], "g", "a", 0).ok());
  ASSERT_TRUE(b().extend(extend_cmd{ref(got[4], "g", "a"), 60'000}).ok());
  EXPECT_EQ(runs(), 1u);
  EXPECT_EQ(own_records(), 3u);

  restart();
  // 1, 3 and 5 from the run, 4 from its own record: leased to a.
  EXPECT_EQ(stats("t", "g").inflight, 4u);
  auto other = consume("t", "g", "b", 6, 30'000);
  ASSERT_EQ(other.size(), 1u);  // the nacked one only
  EXPECT_EQ(other[0].offset, 2u);
  EXPECT_EQ(other[0].attempts, 2);
  // The owner's acks hold across the restart, with the same fencing tokens.
  EXPECT_TRUE(ack_fenced(got[0], "a").ok());  // a repeat: no-op
  EXPECT_TRUE(ack_fenced(got[1], "a").ok());
  EXPECT_EQ(ack_fenced(got[3], "b").code(), errc::failed_precondition);

  // The run's deadline for 3 and 5; the extended one for 4.
  advance(30'001);
  auto late = consume("t", "g", "c", 6, 30'000);
  ASSERT_EQ(late.size(), 3u);  // 2 (b's lapsed), 3, 5
  EXPECT_EQ(late[0].offset, 2u);
  EXPECT_EQ(late[1].offset, 3u);
  EXPECT_EQ(late[2].offset, 5u);
  EXPECT_EQ(late[1].attempts, 2);
  EXPECT_GT(late[1].fencing_token, got[5].fencing_token);
  EXPECT_EQ(ack_fenced(got[3], "a").code(), errc::failed_precondition);
  EXPECT_TRUE(ack_fenced(got[4], "a").ok());
}

TEST_F(LeaseRunsTest, a_superseded_redelivery_of_a_run_member_stays_ended_after_a_restart) {
  topic_settings s;
  s.key_conflict = topic_settings::conflict::supersede;
  create("t", 1, s);
  produce("t", "old", "k");
  auto got = consume("t", "g", "a", 1, 1000);
  ASSERT_EQ(got.size(), 1u);
  advance(1001);  // pending again, with a record of its own
  produce("t", "new", "k");
  auto next = consume("t", "g", "b", 10, 1000);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].offset, 1u);
  EXPECT_EQ(stats("t", "g").superseded, 1u);

  // Deleting the old one's record would leave its run's lease to be read
  // back: a restart would find it leased to a, and a's ack would commit k.
  // Its ownerless record reads like none to replay: superseded, not acked.
  replay_cmd dry{"t", "g", {}, {}, 0, 1, 0, true, 1000, {}};
  auto r = b().replay(dry);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0].outcome, replay_outcome::superseded);

  restart();
  EXPECT_EQ(stats("t", "g").inflight, 1u);  // b's
  EXPECT_EQ(ack_fenced(got[0], "a").code(), errc::failed_precondition);
  EXPECT_TRUE(ack_fenced(next[0], "b").ok());
  EXPECT_EQ(key("t", "g", "k").offset, 1u);
}

TEST_F(LeaseRunsTest, retention_through_a_run_keeps_its_later_members_leases) {
  topic_settings s;
  s.retention_ms = 1500;
  create("t", 1, s);
  for (int i = 0; i < 3; ++i) produce("t", "early" + std::to_string(i));
  advance(1000);
  for (int i = 0; i < 3; ++i) produce("t", "late" + std::to_string(i));
  auto got = consume("t", "g", "a", 6, 60'000);
  ASSERT_EQ(got.size(), 6u);
  ASSERT_EQ(runs(), 1u);

  // 0..2 age out (the next retention run is at 2000 ms): the range deleted
  // takes the run's key, at offset 0.
  advance(1000);
  ASSERT_EQ(store_.count(st::column::messages), 3u);
  EXPECT_EQ(runs(), 0u);
  EXPECT_EQ(stats("t", "g").inflight, 3u);

  restart();
  EXPECT_EQ(stats("t", "g").inflight, 3u);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(ack_fenced(got[i], "a").ok()) << i;
  EXPECT_EQ(stats("t", "g").inflight, 0u);
}

// A batch that acks every member its run still speaks for, each with a key,
// leaves their key records and deletes the run: the key record names the
// owner, attempts and token that a repeated ack is checked against.
TEST_F(LeaseRunsTest, acking_the_rest_of_a_keyed_run_deletes_it_and_keeps_acks_repeatable) {
  create("t");
  for (int i = 0; i < 4; ++i) produce("t", "v" + std::to_string(i), "k" + std::to_string(i));
  auto got = consume("t", "g", "a", 4, 30'000);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(ack_all(got, "a"), std::vector<errc>(4, errc::ok));
  EXPECT_EQ(runs(), 0u);
  EXPECT_EQ(own_records(), 0u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(key("t", "g", "k" + std::to_string(i)).st, key_info::state::committed);
  auto repeat = [&] {
    EXPECT_EQ(ack_all(got, "a"), std::vector<errc>(4, errc::ok));  // a repeat: no-op
    EXPECT_EQ(ack_fenced(got[1], "b").code(), errc::failed_precondition);
    auto wrong = got[2];
    wrong.fencing_token += 100;
    EXPECT_EQ(ack_fenced(wrong, "a").code(), errc::failed_precondition);
  };
  repeat();
  EXPECT_EQ(stats("t", "g").acked, 4u);
  restart();
  EXPECT_EQ(stats("t", "g").inflight, 0u);
  EXPECT_TRUE(consume("t", "g", "b", 4, 30'000).empty());
  repeat();
}

TEST_F(LeaseRunsTest, acking_part_of_a_run_or_unkeyed_members_keeps_their_records) {
  create("t");
  for (int i = 0; i < 4; ++i) produce("t", "v" + std::to_string(i), "k" + std::to_string(i));
  produce("t", "no key");
  auto got = consume("t", "g", "a", 5, 30'000);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(ack_all({got[0], got[1]}, "a"), std::vector<errc>(2, errc::ok));
  EXPECT_EQ(own_records(), 2u);  // the run still speaks for 2, 3 and 4
  // The rest, with the unkeyed one: its record is needed, so all are kept.
  EXPECT_EQ(ack_all({got[2], got[3], got[4]}, "a"), std::vector<errc>(3, errc::ok));
  EXPECT_EQ(own_records(), 5u);
  EXPECT_EQ(runs(), 1u);
  restart();
  EXPECT_EQ(stats("t", "g").inflight, 0u);
  EXPECT_EQ(ack_all(got, "a"), std::vector<errc>(5, errc::ok));
}

TEST_F(LeaseRunsTest, under_a_replay_window_acked_records_are_kept_for_retention) {
  topic_settings s;
  s.replay_window_ms = 60'000;
  create("t", 1, s);
  for (int i = 0; i < 3; ++i) produce("t", "v" + std::to_string(i), "k" + std::to_string(i));
  auto got = consume("t", "g", "a", 3, 30'000);
  EXPECT_EQ(ack_all(got, "a"), std::vector<errc>(3, errc::ok));
  EXPECT_EQ(own_records(), 3u);  // their ends, which retention keeps the messages by
  advance(2'000);
  EXPECT_EQ(store_.count(st::column::messages), 3u);
}

// A data dir written before lease runs holds a leased record per first
// lease: the same state, read the way every redelivery's always was.
TEST_F(LeaseRunsTest, a_data_dir_from_before_lease_runs_is_read_unchanged) {
  create("t");
  for (int i = 0; i < 3; ++i) produce("t", "v" + std::to_string(i), "k" + std::to_string(i));
  auto got = consume("t", "g", "a", 3, 30'000);
  ASSERT_EQ(got.size(), 3u);
  // Rewrite the run as an earlier build stored it: one record each.
  st::batch legacy;
  std::string run_key;
  ASSERT_TRUE(store_
                  .scan(st::column::deliveries, "", std::string(32, '\xff'),
                        [&](std::string_view k, std::string_view) {
                          if (st::keys::is_lease_run(k)) run_key = std::string(k);
                          return true;
                        })
                  .ok());
  ASSERT_FALSE(run_key.empty());
  const auto gk = st::keys::parse_lease_run(run_key);
  ASSERT_TRUE(gk.ok());
  legacy.del(st::column::deliveries, run_key);
  for (const auto& d : got) {
    st::delivery_record r{
        st::delivery_state::leased, "a", 1, d.lease_expires_at_ms, 0, "", d.fencing_token};
    legacy.put(st::column::deliveries, st::keys::delivery(gk->topic, gk->group, 0, d.offset),
               st::encode(r));
  }
  ASSERT_TRUE(store_.write(legacy).ok());
  EXPECT_EQ(runs(), 0u);

  restart();
  EXPECT_EQ(stats("t", "g").inflight, 3u);
  EXPECT_EQ(b().describe_state().find("runs="), std::string::npos);
  EXPECT_EQ(ack_fenced(got[0], "b").code(), errc::failed_precondition);
  EXPECT_EQ(ack_all(got, "a"), std::vector<errc>(3, errc::ok));
  EXPECT_EQ(own_records(), 3u);  // acked records: no run to delete
  restart();
  EXPECT_EQ(stats("t", "g").inflight, 0u);
  EXPECT_EQ(ack_all(got, "a"), std::vector<errc>(3, errc::ok));  // repeats
}

// The broker remembers a run only while one of its members is open: a
// message left unacked (a poison message retried for days) keeps its own
// run, not every run after it.
TEST_F(LeaseRunsTest, a_run_is_forgotten_once_its_members_close) {
  create("t");
  for (int i = 0; i < 6; ++i) produce("t", "v" + std::to_string(i));
  std::vector<delivery> got;
  for (int c = 0; c < 3; ++c)
    for (auto& d : consume("t", "g", "a", 2, 30'000)) got.push_back(std::move(d));
  ASSERT_EQ(got.size(), 6u);
  EXPECT_NE(b().describe_state().find("runs=[0-1/2,2-3/2,4-5/2]"), std::string::npos)
      << b().describe_state();
  for (std::size_t i = 1; i < got.size(); ++i) ASSERT_TRUE(ack_fenced(got[i], "a").ok());
  EXPECT_NE(b().describe_state().find("runs=[0-1/1]"), std::string::npos) << b().describe_state();
  restart();  // read back the same from the store
  EXPECT_NE(b().describe_state().find("runs=[0-1/1]"), std::string::npos) << b().describe_state();
  // Open still, but with a record of its own: the run no longer speaks for it.
  ASSERT_TRUE(nack(got[0], "g", "a", 0).ok());
  EXPECT_EQ(b().describe_state().find("runs="), std::string::npos) << b().describe_state();
  restart();
  EXPECT_EQ(b().describe_state().find("runs="), std::string::npos) << b().describe_state();
  auto again = consume("t", "g", "b", 1, 30'000);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].offset, 0u);
  EXPECT_TRUE(ack_fenced(again[0], "b").ok());
}

TEST_F(LeaseRunsTest, runs_of_many_consumes_and_groups_are_read_back_in_their_places) {
  create("t", 3);
  for (int i = 0; i < 60; ++i) produce("t", "v" + std::to_string(i));
  std::vector<delivery> held;
  for (const char* g : {"g", "h"}) {
    for (int c = 0; c < 4; ++c) {
      auto r = b().consume(consume_cmd{"t", g, "a", 30'000, 7, {}});
      ASSERT_TRUE(r.ok());
      for (auto& d : *r) {
        // Every other one ends: acked in g, nacked (a record of its own) in h.
        if (d.offset % 2 == 0) {
          auto ended = std::string(g) == "g" ? b().ack(ack_cmd{ref(d, g, "a"), {}, {}}).ok()
                                             : nack(d, g, "a", 600'000).ok();
          ASSERT_TRUE(ended);
        } else if (std::string(g) == "g") {
          held.push_back(d);
        }
      }
    }
  }
  const auto g_before = stats("t", "g");
  const auto h_before = stats("t", "h");
  restart();
  const auto g_after = stats("t", "g");
  const auto h_after = stats("t", "h");
  EXPECT_EQ(g_after.inflight, g_before.inflight);
  EXPECT_EQ(h_after.inflight, h_before.inflight);
  EXPECT_EQ(g_after.backlog, g_before.backlog);
  EXPECT_EQ(h_after.backlog, h_before.backlog);
  for (const auto& d : held) EXPECT_TRUE(ack_fenced(d, "a").ok()) << d.partition << "/" << d.offset;
  EXPECT_EQ(stats("t", "g").inflight, 0u);
}

}  // namespace
}  // namespace onceq::testing
