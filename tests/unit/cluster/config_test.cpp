// The cluster file: a good file maps node ids to raft ids and back; every
// bad file is errc::invalid_argument with a message naming the file, the
// node and what is wrong.
#include "cluster/config.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace onceq::cluster {
namespace {

constexpr std::string_view k_three = R"(
[[node]]
id = "n1"
http = "127.0.0.1:8081"
raft = "127.0.0.1:7081"

[[node]]
id = "n2"
http = "127.0.0.1:8082"
raft = "127.0.0.1:7091"

[[node]]
id = "node_3.b-x"
http = "[::1]:8083"
raft = "db3.example:7081"
)";

result<cluster_config> parse(std::string_view text, std::string_view self = "n1") {
  return cluster_config::parse(text, "cluster.toml", self);
}

// The error message of a file that must be refused.
std::string refused(std::string_view text, std::string_view self = "n1") {
  auto c = parse(text, self);
  if (c.ok()) return "<accepted>";
  EXPECT_EQ(c.code(), errc::invalid_argument);
  return c.err().message;
}

std::string one_node(std::string_view id, std::string_view http, std::string_view raft) {
  return "[[node]]\nid = \"" + std::string(id) + "\"\nhttp = \"" + std::string(http) +
         "\"\nraft = \"" + std::string(raft) + "\"\n";
}

TEST(cluster_config_test, good_file_maps_ids_by_position) {
  auto c = parse(k_three, "n2");
  ASSERT_TRUE(c.ok()) << c.err().message;
  ASSERT_EQ(c->nodes().size(), 3u);
  EXPECT_EQ(c->self().id, "n2");
  EXPECT_EQ(c->self_raft_id(), 2u);
  EXPECT_EQ(c->raft_id_of("n1"), 1u);
  EXPECT_EQ(c->raft_id_of("node_3.b-x"), 3u);
  EXPECT_EQ(c->raft_id_of("n4"), std::nullopt);
  ASSERT_NE(c->node_of(3), nullptr);
  EXPECT_EQ(c->node_of(3)->id, "node_3.b-x");
  EXPECT_EQ(c->node_of(0), nullptr);
  EXPECT_EQ(c->node_of(4), nullptr);

  const node_config& n3 = c->nodes()[2];
  EXPECT_EQ(n3.http, "[::1]:8083");
  EXPECT_EQ(n3.http_host, "::1");
  EXPECT_EQ(n3.http_port, 8083);
  EXPECT_EQ(n3.raft_host, "db3.example");
  EXPECT_EQ(n3.raft_port, 7081);
  // Group g of a node listens on its raft port + g.
  EXPECT_EQ(c->raft_address(c->nodes()[0], 0), "127.0.0.1:7081");
  EXPECT_EQ(c->raft_address(c->nodes()[0], 5), "127.0.0.1:7086");
  // Groups take turns for their preferred leader.
  EXPECT_EQ(c->preferred_leader(0), 1u);
  EXPECT_EQ(c->preferred_leader(1), 2u);
  EXPECT_EQ(c->preferred_leader(2), 3u);
  EXPECT_EQ(c->preferred_leader(3), 1u);
}

TEST(cluster_config_test, one_node_is_a_cluster) {
  auto c = parse(one_node("solo", "127.0.0.1:8080", "127.0.0.1:7080"), "solo");
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->self_raft_id(), 1u);
}

TEST(cluster_config_test, load_reads_a_file_and_names_it) {
  const auto path =
      std::filesystem::temp_directory_path() / ("onceq-cluster-" + std::to_string(::getpid()));
  { std::ofstream(path) << k_three; }
  auto c = cluster_config::load(path.string(), "n1");
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->nodes().size(), 3u);
  { std::ofstream(path) << "[[node]\n"; }
  c = cluster_config::load(path.string(), "n1");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.err().message.rfind(path.string() + ":1:", 0), 0u) << c.err().message;
  std::filesystem::remove(path);
  c = cluster_config::load(path.string(), "n1");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.err().message, path.string() + ": cannot read the file");
}

TEST(cluster_config_test, refuses_syntax_errors_with_line_and_column) {
  EXPECT_EQ(refused("[[node]]\nid = \"n1\nhttp = 1\n").rfind("cluster.toml:2:", 0), 0u);
}

TEST(cluster_config_test, refuses_a_file_without_nodes_or_with_too_many) {
  EXPECT_EQ(refused(""), "cluster.toml: needs at least one [[node]]");
  std::string seventeen;
  for (int i = 1; i <= 17; ++i) {
    seventeen += one_node("n" + std::to_string(i), "127.0.0.1:" + std::to_string(8080 + i),
                          "127.0.0.1:" + std::to_string(7000 + 100 * i));
  }
  EXPECT_EQ(refused(seventeen), "cluster.toml: 17 nodes; at most 16");
  EXPECT_EQ(refused("node = 3\n"), "cluster.toml: node: expected [[node]] tables");
}

TEST(cluster_config_test, refuses_unknown_keys) {
  EXPECT_EQ(refused("nodes = []\n" + one_node("n1", "h:1", "h:2")),
            "cluster.toml: nodes: unknown key (a cluster file holds replicas, dead_after_ms and "
            "[[node]] tables)");
  EXPECT_EQ(refused(one_node("n1", "h:1", "h:2") + "weight = 2\n"),
            "cluster.toml: node 1: weight: unknown key (expected id, http, raft)");
}

TEST(cluster_config_test, reads_replicas_and_dead_after_ms) {
  auto c = cluster_config::parse(one_node("n1", "h:1", "h:2") + one_node("n2", "h:3", "h:4"),
                                 "cluster.toml", "n1");
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->replicas(), k_default_replicas);
  EXPECT_EQ(c->replicas_of(), 2u);  // capped at the nodes
  EXPECT_TRUE(c->full_replication());
  EXPECT_EQ(c->dead_after_ms(), k_default_dead_after_ms);
  c = cluster_config::parse("replicas = 1\ndead_after_ms = 0\n" + one_node("n1", "h:1", "h:2") +
                                one_node("n2", "h:3", "h:4"),
                            "cluster.toml", "n1");
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_EQ(c->replicas_of(), 1u);
  EXPECT_FALSE(c->full_replication());
  EXPECT_EQ(c->dead_after_ms(), 0u);
  EXPECT_EQ(refused("replicas = 0\n" + one_node("n1", "h:1", "h:2")),
            "cluster.toml: replicas: expected an integer from 1 to 7");
  EXPECT_EQ(refused("replicas = \"3\"\n" + one_node("n1", "h:1", "h:2")),
            "cluster.toml: replicas: expected an integer from 1 to 7");
  EXPECT_EQ(refused("dead_after_ms = -1\n" + one_node("n1", "h:1", "h:2")),
            "cluster.toml: dead_after_ms: expected an integer >= 0 (0: never)");
}

TEST(cluster_config_test, refuses_missing_and_mistyped_fields) {
  EXPECT_EQ(refused("[[node]]\nhttp = \"h:1\"\nraft = \"h:2\"\n"),
            "cluster.toml: node 1: needs id");
  EXPECT_EQ(refused("[[node]]\nid = 1\nhttp = \"h:1\"\nraft = \"h:2\"\n"),
            "cluster.toml: node 1: id: expected a string");
  EXPECT_EQ(refused("[[node]]\nid = \"n1\"\nraft = \"h:2\"\n"),
            "cluster.toml: node n1: needs http");
  EXPECT_EQ(refused("[[node]]\nid = \"n1\"\nhttp = \"h:1\"\nraft = 7081\n"),
            "cluster.toml: node n1: raft: expected a string");
}

TEST(cluster_config_test, refuses_bad_ids) {
  for (std::string_view id : {"", "a b", "n/1", "é", "n:1"}) {
    EXPECT_NE(
        refused(one_node(id, "h:1", "h:2"), id)
            .find("id \"" + std::string(id) + "\": expected 1..64 characters of A-Z a-z 0-9 _ . -"),
        std::string::npos)
        << id;
  }
  EXPECT_NE(refused(one_node(std::string(65, 'a'), "h:1", "h:2")).find("expected 1..64"),
            std::string::npos);
  EXPECT_EQ(refused(one_node("n1", "h:1", "h:2") + one_node("n1", "h:3", "h:4")),
            "cluster.toml: node id \"n1\" appears twice");
}

TEST(cluster_config_test, refuses_bad_addresses) {
  struct bad_case {
    std::string_view http, raft, message;
  };
  const bad_case cases[] = {
      {"localhost", "h:2", "cluster.toml: node n1: http \"localhost\": expected HOST:PORT"},
      {"h:0", "h:2", "cluster.toml: node n1: http \"h:0\": expected HOST:PORT with PORT 1..65535"},
      {"h:65536", "h:2",
       "cluster.toml: node n1: http \"h:65536\": expected HOST:PORT with PORT 1..65535"},
      {"h:+80", "h:2",
       "cluster.toml: node n1: http \"h:+80\": expected HOST:PORT with PORT 1..65535"},
      {":80", "h:2", "cluster.toml: node n1: http \":80\": expected HOST:PORT with PORT 1..65535"},
      {"[::1:80", "h:2",
       "cluster.toml: node n1: http \"[::1:80\": expected HOST:PORT or [IPv6]:PORT"},
      {"h:1", "h:x", "cluster.toml: node n1: raft \"h:x\": expected HOST:PORT with PORT 1..65535"},
      {"h:1", "[::1]:7081",
       "cluster.toml: node n1: raft \"[::1]:7081\": expected HOST:PORT with an IPv4 address or a "
       "name (raft's TCP transport has no IPv6)"},
      {"h:1", "::1:7081",
       "cluster.toml: node n1: raft \"::1:7081\": expected HOST:PORT with an IPv4 address or a "
       "name (raft's TCP transport has no IPv6)"},
      {"h 2:1", "h:2",
       "cluster.toml: node n1: http \"h 2:1\": the host may not hold spaces or '/'"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(refused(one_node("n1", c.http, c.raft)), c.message) << c.http << " " << c.raft;
  }
}

TEST(cluster_config_test, refuses_shared_addresses) {
  EXPECT_EQ(refused(one_node("n1", "h:1", "h:2") + one_node("n2", "h:3", "h:2")),
            "cluster.toml: node n1 raft and node n2 raft share the address h:2");
  EXPECT_EQ(refused(one_node("n1", "h:1", "h:2") + one_node("n2", "h:1", "h:4")),
            "cluster.toml: node n1 http and node n2 http share the address h:1");
  EXPECT_EQ(refused(one_node("n1", "h:1", "h:1")),
            "cluster.toml: node n1 http and node n1 raft share the address h:1");
  // The same port on another host is another address.
  auto c = parse(one_node("n1", "a:1", "a:2") + one_node("n2", "b:1", "b:2"));
  EXPECT_TRUE(c.ok()) << c.err().message;
}

TEST(cluster_config_test, refuses_a_node_id_not_in_the_file) {
  EXPECT_EQ(refused(k_three, "n9"),
            "cluster.toml: this node's id \"n9\" (--node-id) is not in the file");
}

TEST(cluster_config_test, check_ports_sees_group_ranges_overlap) {
  auto c = parse(one_node("n1", "h:8081", "h:7000") + one_node("n2", "h:8082", "h:7004"));
  ASSERT_TRUE(c.ok()) << c.err().message;
  EXPECT_TRUE(c->check_ports(4).ok());
  auto r = c->check_ports(5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_EQ(
      r.err().message,
      "nodes n1 and n2: raft ports 7000..7004 and 7004..7008 on h overlap (5 groups, one port "
      "each)");
  EXPECT_FALSE(c->check_ports(0).ok());

  auto http = parse(one_node("n1", "h:7002", "h:7000"));
  ASSERT_TRUE(http.ok()) << http.err().message;
  EXPECT_TRUE(http->check_ports(2).ok());
  r = http->check_ports(3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message,
            "node n1: raft ports 7000..7002 (3 groups) take node n1's http port 7002");

  auto high = parse(one_node("n1", "h:1", "h:65535"));
  ASSERT_TRUE(high.ok()) << high.err().message;
  EXPECT_TRUE(high->check_ports(1).ok());
  r = high->check_ports(2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "node n1: raft port 65535 + 2 groups passes 65535");
}

}  // namespace
}  // namespace onceq::cluster
