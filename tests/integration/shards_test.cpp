// Shards seen from outside: topics spread over the shards and stay where
// they were created across restarts with more shards; fewer shards than
// hold topics refuses to start; a DLQ lives with its topic; a kept-alive
// connection follows its topic's shard, pipelined bytes included, unless
// --no-migrate-connections keeps it where it was accepted.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>

#include "raw_socket.hpp"
#include "test_support.hpp"

namespace onceq::itest {
namespace {

server_process::options with_shards(int n, std::string data_dir = {}) {
  server_process::options o;
  o.extra_args = {"--shards", std::to_string(n)};
  o.data_dir = std::move(data_dir);
  return o;
}

class shards : public onceq_test {
 protected:
  void SetUp() override { start_server(with_shards(2)); }
  double topics_on(int shard) {
    return metric(client(), "onceq_shard_topics{shard=\"" + std::to_string(shard) + "\"}");
  }
};

TEST_F(shards, topics_spread_and_stay_where_they_were_created) {
  create_topic("a");
  create_topic("b");
  create_topic("c");
  EXPECT_EQ(topics_on(0), 2);
  EXPECT_EQ(topics_on(1), 1);
  for (const char* t : {"a", "b", "c"}) produce(t, std::string("v-") + t);
  auto listed = client().get("/v1/topics").json().at("topics");
  EXPECT_EQ(listed, json::array({"a", "b", "c"}));

  // Three shards now: every topic is found where it was, with its message;
  // the next topic goes to the new, empty shard.
  const std::string dir = server_->data_dir();
  client_.reset();
  ASSERT_EQ(server_->terminate(), 0);
  start_server(with_shards(3, dir));
  for (const char* t : {"a", "b", "c"}) {
    auto got = consume(t, "g", "o", 10);
    ASSERT_EQ(got.size(), 1u) << t;
    EXPECT_EQ(got[0].at("value"), std::string("v-") + t);
  }
  create_topic("d");
  EXPECT_EQ(topics_on(2), 1);
  EXPECT_EQ(topics_on(0), 2);
  EXPECT_EQ(topics_on(1), 1);
}

TEST_F(shards, fewer_shards_than_hold_topics_refuse_to_start) {
  create_topic("a");
  create_topic("b");  // on shard 1
  const std::string dir = server_->data_dir();
  client_.reset();
  ASSERT_EQ(server_->terminate(), 0);

  const std::string log = dir + "/../refused.log";
  const std::string cmd = std::string(ONCEQD_PATH) +
                          " --listen 127.0.0.1:0 --shards 1 --data-dir " + dir + " > " + log +
                          " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("--shards 2 or more"), std::string::npos) << text;

  // With enough shards it starts, and nothing was lost.
  start_server(with_shards(2, dir));
  EXPECT_EQ(client().get("/v1/topics").json().at("topics"), json::array({"a", "b"}));
}

TEST_F(shards, a_dead_letter_lands_beside_its_topic) {
  create_topic("first");
  create_topic("second", 1, {{"max_attempts", 1}});  // on shard 1
  produce("second", "poison");
  auto got = consume("second", "g", "o", 1);
  ASSERT_EQ(got.size(), 1u);
  auto nacked =
      client().post("/v1/nack", delivery_body("second", "g", "o", got[0], {{"reason", "bad"}}));
  ASSERT_EQ(nacked.status, 204u) << nacked.body;
  auto dead = consume("dlq.second", "ops", "o", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].at("value"), "poison");
  EXPECT_EQ(topics_on(1), 2);  // second and its DLQ
}

// One request as bytes on a kept-alive connection.
std::string produce_request(const std::string& topic, const std::string& value) {
  const std::string body = json({{"topic", topic}, {"value", value}}).dump();
  return "POST /v1/produce HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Reads until n answers (by their status lines) have arrived.
std::string read_answers(raw_socket& s, int n) {
  std::string all;
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < end) {
    std::string chunk;
    if (s.read_some(chunk, 1s) == raw_socket::got::closed) break;
    all += chunk;
    int seen = 0;
    for (auto at = all.find("HTTP/1.1 "); at != std::string::npos;
         at = all.find("HTTP/1.1 ", at + 1)) {
      ++seen;
    }
    if (seen >= n && all.rfind("}") == all.size() - 1) break;
  }
  return all;
}

TEST_F(shards, a_connection_follows_its_topics_shard_with_pipelined_bytes) {
  create_topic("on0");
  create_topic("on1");
  // Whatever loop a connection starts on, going from one topic to the other
  // moves it at least once. The last requests go out in one send, so the
  // bytes read ahead move with the connection.
  for (int conn = 0; conn < 2; ++conn) {
    raw_socket s(port());
    for (const char* topic : {"on0", "on1"}) {
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(s.send(produce_request(topic, topic + std::to_string(i))));
        auto answer = read_answers(s, 1);
        ASSERT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
      }
    }
    std::string pipelined;
    for (int i = 3; i < 6; ++i) pipelined += produce_request("on0", "on0" + std::to_string(i));
    ASSERT_TRUE(s.send(pipelined));
    auto answers = read_answers(s, 3);
    std::regex ok("HTTP/1.1 200");
    EXPECT_EQ(std::distance(std::sregex_iterator(answers.begin(), answers.end(), ok),
                            std::sregex_iterator()),
              3)
        << answers;
  }
  EXPECT_GE(metric(client(), "onceq_connections_migrated_total"), 2);
  // Every message is there once, in order.
  auto got0 = consume("on0", "g", "o", 100);
  auto got1 = consume("on1", "g", "o", 100);
  ASSERT_EQ(got0.size(), 12u);
  ASSERT_EQ(got1.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(got0[i].at("value"), "on0" + std::to_string(i));
}

TEST_F(shards, without_migration_a_connection_stays_and_every_request_crosses) {
  auto opts = with_shards(2);
  opts.extra_args.push_back("--no-migrate-connections");
  start_server(std::move(opts));
  create_topic("on0");
  create_topic("on1");
  raw_socket s(port());
  for (int i = 0; i < 6; ++i) {
    const std::string topic = i % 2 == 0 ? "on0" : "on1";
    for (int j = 0; j < 3; ++j) {
      ASSERT_TRUE(s.send(produce_request(topic, topic + std::to_string(i * 3 + j))));
      auto answer = read_answers(s, 1);
      ASSERT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
    }
  }
  EXPECT_EQ(metric(client(), "onceq_connections_migrated_total"), 0);
  EXPECT_EQ(consume("on0", "g", "o", 100).size(), 9u);
  EXPECT_EQ(consume("on1", "g", "o", 100).size(), 9u);
}

}  // namespace
}  // namespace onceq::itest
