// The HTTP edge of a cluster, promised in docs/API.md ("Clusters") and
// docs/REPLICATION.md, against one real 3-node cluster on 127.0.0.1 shared
// by the tests of this file:
// - a forwarded request that reaches a node which does not lead its shard
//   (leadership moved while it was on its way) answers 503 there and is not
//   forwarded a second time;
// - a streaming consume sent to a follower answers 503 with X-Onceq-Leader;
// - `onceq cluster status` prints the nodes and each shard's leader;
// - the web console's cluster card shows them, and its placement part the
//   nodes' states and replicas, in headless Chromium (skipped, saying why,
//   where Chromium cannot run).

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_support.hpp"
#include "headless_browser.hpp"

namespace onceq::itest {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr std::string_view k_topic = "edge";

class cluster_edge : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::signal(SIGPIPE, SIG_IGN);
    local_cluster::options o;
    o.members = free_loopback_members(3, 2911);
    cluster_ = new local_cluster(std::move(o));
    // The placement hands each shard to its preferred leader once after
    // start-up; a test that reads the roles before that sees them move
    // under it (best effort: with_roles still retries an election).
    if (!cluster_->wait_settled(30s)) {
      std::cerr << "cluster_edge: the placement did not settle in 30 s; going on\n";
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_FALSE(cluster_->wait_for_leader("", 30s).empty()) << cluster_->log_tails();
    create_topic_once();
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << cluster_->log_tails() << "\n";
      cluster_->keep_root();
    }
  }

  // Creates k_topic through any node, retrying through an election.
  static void create_topic_once() {
    static bool created = false;
    if (created) return;
    const json body = {{"name", k_topic}, {"partitions", 1}};
    for (int attempt = 0; attempt < 100 && !created; ++attempt) {
      auto r = cluster_->request(attempt % 3, "POST", "/v1/topics", body.dump());
      created = r && (r->status == 201 || r->status == 200 || r->status == 409);
      if (!created) std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(created) << "could not create topic " << k_topic;
  }

  // The leader of k_topic's shard and a follower of it.
  struct roles {
    int leader = -1;  // member index
    int follower = -1;
    std::string leader_id, follower_id;
  };
  static roles find_roles() {
    roles r;
    r.leader = cluster_->index_of(cluster_->wait_for_leader(k_topic, 20s));
    if (r.leader < 0) return r;
    r.follower = (r.leader + 1) % 3;
    r.leader_id = cluster_->member(r.leader).id;
    r.follower_id = cluster_->member(r.follower).id;
    return r;
  }

  // Runs check(roles, attempt, again) with the shard's current roles until
  // it leaves `again` false; it sets it when leadership moved during the
  // check, which then proves nothing. At most 5 attempts.
  template <class Check>
  static void with_roles(Check check) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      const roles r = find_roles();
      ASSERT_GE(r.leader, 0) << "no leader";
      bool again = false;
      check(r, attempt, again);
      if (!again || ::testing::Test::HasFatalFailure()) return;
    }
    FAIL() << "leadership kept moving under the test";
  }

  static inline local_cluster* cluster_ = nullptr;
};

// A request another node forwarded (X-Onceq-Forwarded) that reaches a node
// which does not lead the shard, which is what a node that has just lost
// leadership sees: 503 with Retry-After and the leader's id, answered by
// that node itself, and the request applied nowhere (a second hop would
// have stored it on the leader). The same request without the header is
// forwarded once and applied by the leader.
TEST_F(cluster_edge, a_forwarded_request_to_a_node_that_does_not_lead_answers_503_once) {
  with_roles([](const roles& r, int attempt, bool& again) {
    const std::string other = cluster_->member((r.leader + 2) % 3).id;
    const std::string id = "fwd-" + std::to_string(attempt);
    const json body = {{"topic", k_topic}, {"value", id}, {"envelope", {{"msg_id", id}}}};

    auto moved = cluster_->request(r.follower, "POST", "/v1/produce", body.dump(),
                                   {{"X-Onceq-Forwarded", other}});
    ASSERT_TRUE(moved.has_value()) << "no answer from " << r.follower_id;
    if (moved->status == 200) {
      ASSERT_EQ(moved->header("X-Onceq-Node"), r.follower_id)
          << "the forwarded request was forwarded again, to the leader: " << moved->body;
      again = true;  // the follower became the leader meanwhile
      return;
    }
    EXPECT_EQ(moved->status, 503u) << moved->body;
    EXPECT_EQ(moved->header("X-Onceq-Node"), r.follower_id)
        << "answered by the node asked, not relayed";
    EXPECT_EQ(moved->header("X-Onceq-Leader"), r.leader_id);
    EXPECT_FALSE(moved->header("Retry-After").empty());
    EXPECT_EQ(json::parse(moved->body).value("error", ""), "UNAVAILABLE") << moved->body;
    EXPECT_NE(moved->body.find("forwarded the request here"), std::string::npos) << moved->body;

    // Nothing was stored: the first real produce of that msg_id is not a
    // duplicate. It goes through the follower, forwarded once, and comes
    // back with the leader's X-Onceq-Node.
    auto fresh = cluster_->request(r.follower, "POST", "/v1/produce", body.dump());
    ASSERT_TRUE(fresh.has_value());
    if (fresh->status == 503 || fresh->header("X-Onceq-Node") != r.leader_id) {
      again = true;  // an election meanwhile
      return;
    }
    ASSERT_EQ(fresh->status, 200u) << fresh->body;
    EXPECT_FALSE(json::parse(fresh->body).at("duplicate").get<bool>())
        << "the request answered 503 was applied by a second hop: " << fresh->body;
  });
}

// A streaming consume (no max_messages) is never forwarded: a follower
// answers 503 with X-Onceq-Leader naming the node to connect to. The same
// consume as a long-poll batch is forwarded and answered.
TEST_F(cluster_edge, a_streaming_consume_to_a_follower_answers_503_with_the_leader) {
  with_roles([](const roles& r, int, bool& again) {
    const std::string target =
        "/v1/consume?topic=" + std::string(k_topic) + "&group=streamers&owner=s1";
    auto stream = cluster_->request(r.follower, "GET", target, {}, {}, 3s);
    ASSERT_TRUE(stream.has_value())
        << "no answer from " << r.follower_id << ": a stream was opened (or forwarded) there";
    EXPECT_EQ(stream->status, 503u) << stream->body;
    EXPECT_EQ(stream->header("X-Onceq-Leader"), r.leader_id) << stream->body;
    EXPECT_EQ(stream->header("X-Onceq-Node"), r.follower_id);
    EXPECT_FALSE(stream->header("Retry-After").empty());
    EXPECT_NE(stream->body.find("connect to " + r.leader_id), std::string::npos) << stream->body;

    auto batch =
        cluster_->request(r.follower, "GET", target + "&max_messages=1&wait_ms=0", {}, {}, 3s);
    ASSERT_TRUE(batch.has_value());
    if (batch->status == 503) {
      again = true;  // an election meanwhile
      return;
    }
    EXPECT_EQ(batch->status, 200u) << batch->body;
    EXPECT_EQ(batch->header("X-Onceq-Node"), r.leader_id) << "a long-poll batch is forwarded";
  });
}

// ---- onceq cluster status ----------------------------------------------------

// `onceq --url <node> args...`, stderr into the output.
cli_run run_cli(std::uint16_t port, const std::string& args) {
  return itest::run_cli(ONCEQ_CLI_PATH, port, args);
}

// The rows of the text table whose header line starts with `first_column`:
// each row split on spaces.
std::vector<std::vector<std::string>> table_rows(const std::string& out,
                                                 std::string_view first_column) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind(first_column, 0) == 0) {
      inside = true;
      continue;
    }
    if (!inside) continue;
    if (line.empty()) break;
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    rows.push_back(std::move(row));
  }
  return rows;
}

TEST_F(cluster_edge, cli_cluster_status_prints_the_nodes_and_each_shards_leader) {
  const roles r = find_roles();
  ASSERT_GE(r.leader, 0) << "no leader";
  for (int i : {r.leader, r.follower}) {
    const auto before = cluster_->status(static_cast<std::size_t>(i));
    ASSERT_TRUE(before.has_value());
    const cli_run cli = run_cli(cluster_->member(i).http_port, "cluster status");
    const auto after = cluster_->status(static_cast<std::size_t>(i));
    ASSERT_TRUE(after.has_value());
    ASSERT_EQ(cli.exit_code, 0) << cli.out;
    EXPECT_EQ(cli.out.rfind("node " + cluster_->member(i).id + "\n", 0), 0u) << cli.out;

    const auto nodes = table_rows(cli.out, "NODE");
    ASSERT_EQ(nodes.size(), 3u) << cli.out;
    for (std::size_t m = 0; m < 3; ++m) {
      const cluster_member& want = cluster_->member(m);
      ASSERT_EQ(nodes[m].size(), 4u) << cli.out;
      EXPECT_EQ(nodes[m][0], want.id);
      EXPECT_EQ(nodes[m][1], want.host + ":" + std::to_string(want.http_port));
      EXPECT_EQ(nodes[m][2], want.host + ":" + std::to_string(want.raft_port));
      // A node always reaches itself, and a follower its leader.
      if (static_cast<int>(m) == i || static_cast<int>(m) == r.leader) {
        EXPECT_EQ(nodes[m][3], "yes") << cli.out;
      }
    }

    const auto shards = table_rows(cli.out, "SHARD");
    ASSERT_EQ(shards.size(), after->shards.size()) << cli.out;
    const auto* sh = after->shard_of_topic(k_topic);
    ASSERT_NE(sh, nullptr);
    const auto& row = shards.at(sh->shard);
    // SHARD LEADER TERM COMMIT APPLIED TOPICS FAILURE
    ASSERT_EQ(row.size(), 7u) << cli.out;
    EXPECT_EQ(row[0], std::to_string(sh->shard));
    const auto* was = before->shard(sh->shard);
    ASSERT_NE(was, nullptr);
    EXPECT_TRUE(row[1] == was->leader || row[1] == sh->leader) << cli.out;
    EXPECT_FALSE(sh->leader.empty());
    const std::uint64_t term = std::stoull(row[2]);
    EXPECT_GE(term, was->term);
    EXPECT_LE(term, sh->term);
    const std::uint64_t commit = std::stoull(row[3]);
    EXPECT_GE(commit, was->commit_index);
    EXPECT_LE(commit, sh->commit_index);
    EXPECT_GE(std::stoull(row[4]), was->applied_index);
    EXPECT_NE(row[5].find(k_topic), std::string::npos) << cli.out;
    EXPECT_EQ(row[6], "-") << "no failure";
  }
}

// ---- the web console's cluster card ------------------------------------------

// The cells of every row of the <tbody id="id">, in order.
std::vector<std::vector<std::string>> tbody_rows(const std::string& dom, const std::string& id) {
  std::vector<std::vector<std::string>> rows;
  const auto at = dom.find("<tbody id=\"" + id + "\">");
  if (at == std::string::npos) return rows;
  const auto end = dom.find("</tbody>", at);
  const std::string body = dom.substr(at, end - at);
  static const std::regex tr("<tr[^>]*>(.*?)</tr>");
  static const std::regex td("<td[^>]*>([^<]*)</td>");
  for (std::sregex_iterator r(body.begin(), body.end(), tr), e; r != e; ++r) {
    const std::string cells = (*r)[1];
    std::vector<std::string> row;
    for (std::sregex_iterator c(cells.begin(), cells.end(), td); c != e; ++c)
      row.push_back((*c)[1]);
    rows.push_back(std::move(row));
  }
  return rows;
}

TEST_F(cluster_edge, the_consoles_cluster_card_shows_the_nodes_and_each_shards_leader) {
  static std::string why;
  static const std::optional<headless_browser> chrome = headless_browser::find(&why);
  if (!chrome) GTEST_SKIP() << "headless Chromium unavailable: " << why;
  // The page, with the roles read before and after it; again when the
  // shard's leadership moved while it loaded: a node that stopped leading
  // is no longer heard from by the follower the page asks, and the card
  // rightly shows it unreachable then.
  roles r;
  int asked = -1;
  std::optional<cluster_status> before, after;
  std::string dom;
  for (int attempt = 0; attempt < 5; ++attempt) {
    r = find_roles();
    ASSERT_GE(r.leader, 0) << "no leader";
    asked = r.follower;
    before = cluster_->status(static_cast<std::size_t>(asked));
    ASSERT_TRUE(before.has_value());
    const std::string url =
        "http://127.0.0.1:" + std::to_string(cluster_->member(asked).http_port) + "/ui";
    auto page = chrome->dump_dom(url, 3500ms);
    ASSERT_TRUE(page.ok) << page.errors;
    after = cluster_->status(static_cast<std::size_t>(asked));
    ASSERT_TRUE(after.has_value());
    dom = std::move(page.output);
    const auto* then = before->shard_of_topic(k_topic);
    const auto* now = after->shard_of_topic(k_topic);
    if (then && now && then->leader == r.leader_id && now->leader == r.leader_id) break;
    ASSERT_LT(attempt, 4) << "leadership kept moving under the test";
  }

  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m, std::regex("<section [^>]*id=\"cluster-card\"[^>]*>")))
      << dom;
  EXPECT_EQ(m.str().find("hidden"), std::string::npos) << "the card is hidden: " << m.str();
  EXPECT_NE(dom.find("answered by " + cluster_->member(asked).id), std::string::npos) << dom;

  const auto nodes = tbody_rows(dom, "cluster-nodes-body");
  ASSERT_EQ(nodes.size(), 3u) << dom;
  for (std::size_t i = 0; i < 3; ++i) {
    const cluster_member& want = cluster_->member(i);
    ASSERT_EQ(nodes[i].size(), 4u) << dom;
    EXPECT_EQ(nodes[i][0], want.id);
    EXPECT_EQ(nodes[i][1], want.host + ":" + std::to_string(want.http_port));
    EXPECT_EQ(nodes[i][2], want.host + ":" + std::to_string(want.raft_port));
    if (static_cast<int>(i) == asked || static_cast<int>(i) == r.leader) {
      EXPECT_EQ(nodes[i][3], "yes");
    }
  }

  const auto shards = tbody_rows(dom, "cluster-shards-body");
  ASSERT_EQ(shards.size(), after->shards.size()) << dom;
  const auto* sh = after->shard_of_topic(k_topic);
  ASSERT_NE(sh, nullptr);
  const auto& row = shards.at(sh->shard);
  // shard, leader, term, commit index, applied index, topics
  ASSERT_EQ(row.size(), 6u) << dom;
  EXPECT_EQ(row[0], std::to_string(sh->shard));
  const auto* was = before->shard(sh->shard);
  ASSERT_NE(was, nullptr);
  EXPECT_TRUE(row[1] == was->leader || row[1] == sh->leader) << row[1];
  EXPECT_NE(row[1], "(electing)");
  EXPECT_FALSE(row[2].empty());
  EXPECT_NE(row[5].find(k_topic), std::string::npos) << dom;

  // The placement part: shown (the cluster has a meta group), every node
  // active, every shard on the three nodes.
  ASSERT_TRUE(std::regex_search(dom, m, std::regex("<div [^>]*id=\"cluster-placement\"[^>]*>")))
      << dom;
  EXPECT_EQ(m.str().find("hidden"), std::string::npos) << "the placement is hidden: " << m.str();
  const auto pnodes = tbody_rows(dom, "cluster-placement-nodes-body");
  ASSERT_EQ(pnodes.size(), 3u) << dom;
  for (const auto& n : pnodes) {
    ASSERT_GE(n.size(), 3u) << dom;
    EXPECT_EQ(n[1], "active") << dom;
    EXPECT_EQ(n[2], std::to_string(after->shards.size())) << dom;
  }
  const auto pshards = tbody_rows(dom, "cluster-placement-shards-body");
  ASSERT_EQ(pshards.size(), after->shards.size()) << dom;
}

// The outbox hand-over between nodes (docs/API.md, "POST
// /v1/internal/outbox_append"): refused without a member's name; from a
// member on the cluster's own host, the shard's leader stores each entry
// once, and a resend (a relay that lost the answer) stores nothing.
TEST_F(cluster_edge, the_outbox_hand_over_takes_each_entry_once_and_only_from_a_member) {
  const std::string path = "/v1/internal/outbox_append";
  const json body = {{"source", 1},
                     {"entries", json::array({{{"seq", 1}, {"topic", k_topic}, {"value", "h1"}},
                                              {{"seq", 2}, {"topic", k_topic}, {"value", "h2"}}})}};
  auto anonymous = cluster_->request(0, "POST", path, body.dump());
  ASSERT_TRUE(anonymous.has_value());
  EXPECT_EQ(anonymous->status, 403u) << anonymous->body;
  auto stranger = cluster_->request(0, "POST", path, body.dump(), {{"X-Onceq-Forwarded", "nx"}});
  ASSERT_TRUE(stranger.has_value());
  EXPECT_EQ(stranger->status, 403u) << stranger->body;
  with_roles([&](const roles& r, int, bool& again) {
    const std::string from = cluster_->member(r.follower).id;
    auto first =
        cluster_->request(r.leader, "POST", path, body.dump(), {{"X-Onceq-Forwarded", from}});
    ASSERT_TRUE(first.has_value());
    if (first->status == 503) {
      again = true;
      return;
    }
    ASSERT_EQ(first->status, 200u) << first->body;
    auto results = json::parse(first->body)["results"];
    ASSERT_EQ(results.size(), 2u) << first->body;
    EXPECT_EQ(results[0]["code"], 0);
    EXPECT_TRUE(results[0]["stored"].get<bool>()) << first->body;
    auto again_res =
        cluster_->request(r.leader, "POST", path, body.dump(), {{"X-Onceq-Forwarded", from}});
    ASSERT_TRUE(again_res.has_value());
    if (again_res->status == 503) {
      again = true;
      return;
    }
    ASSERT_EQ(again_res->status, 200u) << again_res->body;
    const json repeat = json::parse(again_res->body);
    for (const auto& x : repeat["results"]) {
      EXPECT_EQ(x["code"], 0);
      EXPECT_FALSE(x["stored"].get<bool>()) << again_res->body;
    }
  });
}

}  // namespace
}  // namespace onceq::itest
