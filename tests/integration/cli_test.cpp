// The `onceq` CLI binary against a real onceqd: output, side effects seen
// through the HTTP API, and exit codes by error class.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "test_support.hpp"

extern char** environ;

namespace onceq::itest {
namespace {

struct cli_run {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string line;
  while (std::getline(s, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

class cli_test : public onceq_test {
 protected:
  void SetUp() override {
    onceq_test::SetUp();
    char dir[] = "/tmp/onceq-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    for (const char* f : {"/in", "/out", "/err"}) std::remove((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }

  // Runs onceq with args, stdin from `input`, ONCEQ_URL pointing at the
  // test's server unless url_override is given; waits for it to exit.
  cli_run run(const std::vector<std::string>& args, const std::string& input = "",
              std::optional<std::string> url_override = std::nullopt) {
    const std::string in = dir_ + "/in", out = dir_ + "/out", err = dir_ + "/err";
    std::ofstream(in) << input;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);

    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view v(*e);
      if (v.starts_with("ONCEQ_URL=") || v.starts_with("ONCEQ_TOKEN=")) continue;
      env.emplace_back(v);
    }
    env.push_back("ONCEQ_URL=" + url_override.value_or(url()));
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    std::vector<std::string> argv_s = {ONCEQ_CLI_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);

    pid_t pid = -1;
    int rc = posix_spawn(&pid, ONCEQ_CLI_PATH, &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    cli_run r;
    if (rc != 0) {
      ADD_FAILURE() << "posix_spawn: " << rc;
      return r;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // Runs and expects exit 0.
  cli_run ok(const std::vector<std::string>& args, const std::string& input = "") {
    auto r = run(args, input);
    EXPECT_EQ(r.exit_code, 0) << "stdout: " << r.out << "\nstderr: " << r.err;
    return r;
  }

  std::string dir_;
};

std::string describe(const cli_run& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

TEST_F(cli_test, TopicsCreateListShowDelete) {
  auto r = ok({"topics", "create", "orders", "--partitions", "3", "--max-attempts", "5",
               "--lease-ms", "1500"});
  EXPECT_EQ(r.out, "created topic orders (3 partitions)\n");
  ok({"topics", "create", "audit"});

  EXPECT_EQ(ok({"topics", "list"}).out, "audit\norders\n");

  auto show = json::parse(ok({"topics", "show", "orders"}).out);
  EXPECT_EQ(show["partitions"], 3);
  EXPECT_EQ(show["settings"]["max_attempts"], 5);
  EXPECT_EQ(show["settings"]["lease_ms"], 1500);

  EXPECT_EQ(ok({"topics", "delete", "audit"}).out, "deleted topic audit\n");
  EXPECT_EQ(ok({"topics", "list"}).out, "orders\n");
  EXPECT_EQ(client().get("/v1/topics/audit").status, 404u);
}

TEST_F(cli_test, ProduceArgumentsPrintPositions) {
  create_topic("t");
  auto r = ok({"produce", "t", "a", "b", "--key", "k1"});
  EXPECT_EQ(r.out, "partition=0 offset=0\npartition=0 offset=1\n");
  auto msgs = drain("t", "g", "me");
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0]["value"], "a");
  EXPECT_EQ(msgs[0]["key"], "k1");
  EXPECT_EQ(msgs[1]["value"], "b");
}

TEST_F(cli_test, ProduceEnvelopeAndMsgIdDedup) {
  create_topic("t");
  ok({"produce", "t", "x", "--msg-id", "m-1", "--idempotency-key", "work-1", "--envelope",
      R"({"tenant_id":"acme","headers":{"h":"v"}})"});
  auto again = ok({"produce", "t", "x", "--msg-id", "m-1"});
  EXPECT_EQ(again.out, "partition=0 offset=0 (duplicate)\n");
  auto msgs = drain("t", "g", "me");
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0]["envelope"]["tenant_id"], "acme");
  EXPECT_EQ(msgs[0]["envelope"]["headers"]["h"], "v");
  EXPECT_EQ(msgs[0]["envelope"]["idempotency_key"], "work-1");
  EXPECT_EQ(msgs[0]["envelope"]["msg_id"], "m-1");
}

TEST_F(cli_test, ProduceStdinLinesSingleAndBatched) {
  create_topic("t", 2);
  auto r = ok({"produce", "t"}, "one\ntwo\n\nthree\r\n");
  EXPECT_EQ(r.out, "produced 3 messages to t\n");

  std::string input;
  for (int i = 0; i < 25; ++i) input += numbered("line-", i) + "\n";
  r = ok({"produce", "t", "--batch", "10", "--msg-id", "run-1"}, input);
  EXPECT_EQ(r.out, "produced 25 messages to t\n");
  // The same input again: every line is a produce-dedup duplicate.
  r = ok({"produce", "t", "--batch", "10", "--msg-id", "run-1"}, input);
  EXPECT_EQ(r.out, "produced 25 messages to t (25 duplicates)\n");

  auto msgs = drain("t", "g", "me");
  ASSERT_EQ(msgs.size(), 28u);
  std::set<std::string> values;
  for (const auto& m : msgs) values.insert(m["value"].get<std::string>());
  EXPECT_TRUE(values.contains("three"));  // \r stripped
  EXPECT_TRUE(values.contains("line-24"));
  EXPECT_EQ(values.size(), 28u);
}

TEST_F(cli_test, ConsumePrintsNdjsonAndAcks) {
  create_topic("t");
  for (int i = 0; i < 5; ++i) produce("t", numbered("v", i));

  auto r = ok({"consume", "t", "--group", "g", "--owner", "w1", "--max", "3", "--ack"});
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out;
  for (int i = 0; i < 3; ++i) {
    auto m = json::parse(out[i]);
    EXPECT_EQ(m["value"], numbered("v", i));
    EXPECT_EQ(m["attempts"], 1);
  }
  auto g = topic_info("t")["groups"]["g"];
  EXPECT_EQ(g["acked"], 3);
  EXPECT_EQ(g["inflight"], 0);
  EXPECT_EQ(g["backlog"], 2);

  // Without --max: everything available, then stops at the empty batch;
  // without --ack the messages stay in flight.
  r = ok({"consume", "t", "-g", "g", "-o", "w1"});
  EXPECT_EQ(lines(r.out).size(), 2u);
  EXPECT_EQ(topic_info("t")["groups"]["g"]["inflight"], 2);
  // Nothing left: no output, exit 0.
  EXPECT_EQ(ok({"consume", "t", "-g", "g", "-o", "w1"}).out, "");
}

TEST_F(cli_test, ConsumeFollowWaitsForNewMessages) {
  create_topic("t");
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    http_client c(port());
    produce(c, "t", "late");
  });
  auto r = ok({"consume", "t", "-g", "g", "-o", "w", "--follow", "--max", "1", "--wait-ms", "200"});
  later.join();
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 1u) << r.out;
  EXPECT_EQ(json::parse(out[0])["value"], "late");
}

TEST_F(cli_test, AckNackExtendAndKeysGet) {
  create_topic("t");
  produce("t", "job", std::nullopt, json{{"idempotency_key", "charge-7"}});
  auto m = consume("t", "g", "w1", 1, 60'000).at(0);
  const std::string p = std::to_string(m["partition"].get<int>());
  const std::string o = std::to_string(m["offset"].get<int>());

  auto key = json::parse(ok({"keys", "get", "t", "charge-7", "--group", "g"}).out);
  EXPECT_EQ(key["state"], "leased");

  auto ext = ok({"extend", "t", "-g", "g", "-o", "w1", "--partition", p, "--offset", o,
                 "--lease-ms", "90000"});
  ASSERT_EQ(ext.out.rfind("lease_expires_at_ms=", 0), 0u) << ext.out;
  const auto expires = std::stoll(ext.out.substr(20));
  EXPECT_GT(expires, now_ms() + 80'000);

  // Another owner is fenced: 409 -> exit 4, nothing changes.
  auto fenced = run({"ack", "t", "-g", "g", "-o", "w2", "--partition", p, "--offset", o});
  EXPECT_EQ(fenced.exit_code, 4) << describe(fenced);
  EXPECT_NE(fenced.err.find("onceq: FAILED_PRECONDITION: "), std::string::npos) << fenced.err;

  auto acked = ok({"ack", "t", "-g", "g", "-o", "w1", "--partition", p, "--offset", o, "--attempts",
                   "1", "--result", R"({"charge_id":"ch_1"})"});
  EXPECT_EQ(acked.out, "acked partition=" + p + " offset=" + o + "\n");

  key = json::parse(ok({"keys", "get", "t", "charge-7", "-g", "g", "--wait-ms", "10"}).out);
  EXPECT_EQ(key["state"], "committed");
  EXPECT_EQ(key["result"]["charge_id"], "ch_1");
  EXPECT_EQ(json::parse(ok({"keys", "get", "t", "nope", "-g", "g"}).out)["state"], "none");

  // nack: redelivered with the reason as last_error.
  produce("t", "second");
  auto m2 = consume("t", "g", "w1", 1, 60'000).at(0);
  auto nacked = ok({"nack", "t", "-g", "g", "-o", "w1", "--partition",
                    std::to_string(m2["partition"].get<int>()), "--offset",
                    std::to_string(m2["offset"].get<int>()), "--reason", "gateway down"});
  EXPECT_EQ(nacked.out.rfind("nacked ", 0), 0u);
  auto again = consume("t", "g", "w1", 1, 60'000);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]["attempts"], 2);
  EXPECT_EQ(again[0]["last_error"], "gateway down");
}

TEST_F(cli_test, DlqRedriveAndStats) {
  create_topic("t", 1, json{{"max_attempts", 1}});
  produce("t", "poison");
  auto m = consume("t", "g", "w", 1, 60'000).at(0);
  ok({"nack", "t", "-g", "g", "-o", "w", "--partition", "0", "--offset",
      std::to_string(m["offset"].get<int>())});

  auto stats = ok({"stats", "t"});
  auto rows = lines(stats.out);
  ASSERT_EQ(rows.size(), 2u) << stats.out;
  EXPECT_EQ(rows[0].rfind("TOPIC", 0), 0u);
  EXPECT_NE(rows[0].find("DLQ"), std::string::npos);
  // t  g  backlog 0  inflight 0  acked 0  auto_acked 0  redelivered 0  dlq 1
  std::stringstream cells(rows[1]);
  std::vector<std::string> c;
  for (std::string x; cells >> x;) c.push_back(x);
  ASSERT_EQ(c.size(), 8u) << rows[1];
  EXPECT_EQ(c[0], "t");
  EXPECT_EQ(c[1], "g");
  EXPECT_EQ(c[7], "1");

  // All topics: t and dlq.t (no groups yet: dashes).
  auto all = lines(ok({"stats"}).out);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].rfind("dlq.t", 0), 0u);

  EXPECT_EQ(ok({"dlq", "redrive", "t", "--max", "10"}).out, "moved 1\n");
  auto back = consume("t", "g", "w", 1, 60'000);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0]["value"], "poison");
}

TEST_F(cli_test, ReplayPrintsTheDiffAndAppliesOnlyWithApply) {
  create_topic("t", 1, json{{"replay_window_ms", 3'600'000}});
  produce("t", "done", std::nullopt, json{{"idempotency_key", "k1"}});
  produce("t", "no-key");
  auto got = consume("t", "g", "w", 2, 60'000);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(ack("t", "g", "w", got[0], json{{"n", 1}}).status, 204u);
  ASSERT_EQ(ack("t", "g", "w", got[1]).status, 204u);

  auto dry =
      ok({"replay", "t", "-g", "g", "--from", "0", "--to", "2100-01-01T00:00:00Z", "--page", "1"});
  auto rows = lines(dry.out);
  ASSERT_EQ(rows.size(), 5u) << dry.out;
  EXPECT_EQ(rows[0].rfind("PARTITION", 0), 0u);
  EXPECT_NE(rows[1].find("already_committed"), std::string::npos) << rows[1];
  EXPECT_NE(rows[1].find(R"({"n":1})"), std::string::npos) << rows[1];
  EXPECT_NE(rows[2].find("would_deliver"), std::string::npos) << rows[2];
  EXPECT_EQ(rows[3].rfind("already_committed 1  would_deliver 1  in_flight 0", 0), 0u) << rows[3];
  EXPECT_EQ(rows[4], "dry run: nothing changed (--apply to replay)");
  EXPECT_TRUE(consume("t", "g", "w", 10).empty());

  auto applied = ok(
      {"replay", "t", "-g", "g", "-p", "0", "--from-offset", "0", "--to-offset", "2", "--apply"});
  EXPECT_EQ(lines(applied.out).back(), "replayed 1");
  auto back = consume("t", "g", "w", 10, 60'000);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0]["value"], "no-key");

  auto missing = run({"replay", "t", "-g", "nope", "--from", "0", "--to", "1"});
  EXPECT_EQ(missing.exit_code, 3) << describe(missing);
  auto bad = run({"replay", "t", "-g", "g", "--from", "5", "--to", "1"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  auto bad_time = run({"replay", "t", "-g", "g", "--from", "yesterday", "--to", "1"});
  EXPECT_EQ(bad_time.exit_code, 2) << describe(bad_time);
}

TEST_F(cli_test, ExitCodesFollowTheErrorClass) {
  create_topic("t", 2);

  auto missing = run({"topics", "show", "nope"});
  EXPECT_EQ(missing.exit_code, 3) << describe(missing);
  EXPECT_EQ(missing.err, "onceq: NOT_FOUND: topic 'nope' not found\n");

  auto conflict = run({"topics", "create", "t", "--partitions", "5"});
  EXPECT_EQ(conflict.exit_code, 4) << describe(conflict);
  EXPECT_EQ(conflict.err.rfind("onceq: ALREADY_EXISTS: ", 0), 0u) << conflict.err;

  // 400 from the server (unknown topic on produce) and bad flags: usage, 2.
  auto bad = run({"produce", "nope", "x"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_EQ(bad.err.rfind("onceq: INVALID_ARGUMENT: ", 0), 0u) << bad.err;
  auto usage = run({"consume", "t", "--owner", "w"});  // no --group
  EXPECT_EQ(usage.exit_code, 2) << describe(usage);
  auto bad_json = run(
      {"ack", "t", "-g", "g", "-o", "w", "--partition", "0", "--offset", "0", "--result", "{nope"});
  EXPECT_EQ(bad_json.exit_code, 2) << describe(bad_json);
  EXPECT_EQ(run({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(run({"--help"}).exit_code, 0);

  // Unreachable server: 5. A port that was just free on 127.0.0.1.
  auto dead_port = port();
  server_->kill9();
  auto down = run({"topics", "list"}, "", "http://127.0.0.1:" + std::to_string(dead_port));
  EXPECT_EQ(down.exit_code, 5) << describe(down);
  EXPECT_EQ(down.err.rfind("onceq: cannot connect to http://127.0.0.1:", 0), 0u) << down.err;
}

TEST_F(cli_test, UrlFlagOverridesEnvironment) {
  auto r = run({"--url", url(), "topics", "list"}, "", "http://127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  auto bad = run({"topics", "list", "--url", "https://x"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
}

}  // namespace
}  // namespace onceq::itest
