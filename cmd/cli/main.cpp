// onceq: the command-line client of onceqd. Flags -> the option structs of
// commands.hpp; exit codes in exit_code.hpp; docs/CLI.md is the manual.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cmd/cli/api_client.hpp"
#include "cmd/cli/commands.hpp"
#include "cmd/cli/exit_code.hpp"
#include "cmd/cli/interrupt.hpp"

namespace {

using namespace onceq::cli;

// The value of an optional flag, or nullopt when it was not given.
template <class T>
std::optional<T> given(const CLI::Option* opt, const T& value) {
  return opt->count() > 0 ? std::optional<T>(value) : std::nullopt;
}

std::uint64_t stdin_file_size() {
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode)) {
    return static_cast<std::uint64_t>(st.st_size);
  }
  return 0;
}

// Flags of a topic's settings: --lease-ms -> "lease_ms".
constexpr const char* k_topic_settings[] = {
    "lease_ms",          "max_attempts",    "backoff_ms",      "max_backoff_ms",
    "key_ttl_ms",        "dedup_window_ms", "retention_ms",    "max_backlog_messages",
    "max_backlog_bytes", "max_inflight",    "replay_window_ms"};

std::string flag_of(std::string field) {
  for (auto& ch : field) {
    if (ch == '_') ch = '-';
  }
  return "--" + field;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"onceq: command-line client for the onceq broker (see docs/CLI.md)", "onceq"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the verb

  api_client::options conn;
  std::int64_t timeout_ms = 30'000;
  app.add_option("--url", conn.url, "server URL")->envname("ONCEQ_URL")->capture_default_str();
  app.add_option("--token", conn.token, "bearer token (Authorization: Bearer)")
      ->envname("ONCEQ_TOKEN");
  app.add_option("--timeout-ms", timeout_ms, "per-request timeout, on top of any wait")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--retries", conn.retries, "retries on 429/503")->capture_default_str();

  terminal term{isatty(STDOUT_FILENO) == 1, isatty(STDERR_FILENO) == 1};
  // The verb to run once parsing succeeded.
  std::function<void(api_client&)> run;

  // topics
  auto* topics = app.add_subcommand("topics", "create, list, show, delete topics");
  topics->require_subcommand(1);
  topic_create_options create;
  std::int64_t partitions = 1;
  std::int64_t setting_values[std::size(k_topic_settings)] = {};
  auto* t_create = topics->add_subcommand("create", "create a topic (201 again if identical)");
  t_create->add_option("name", create.name, "topic name")->required();
  auto* partitions_opt = t_create->add_option("--partitions,-p", partitions, "partitions");
  CLI::Option* setting_opts[std::size(k_topic_settings)] = {};
  for (std::size_t i = 0; i < std::size(k_topic_settings); ++i) {
    setting_opts[i] = t_create->add_option(flag_of(k_topic_settings[i]), setting_values[i],
                                           std::string("topic setting ") + k_topic_settings[i]);
  }
  t_create->callback([&] {
    create.partitions = given(partitions_opt, partitions);
    for (std::size_t i = 0; i < std::size(k_topic_settings); ++i) {
      if (setting_opts[i]->count() > 0) {
        create.settings.emplace_back(k_topic_settings[i], setting_values[i]);
      }
    }
    run = [&](api_client& c) { topics_create(c, create, std::cout); };
  });
  auto* t_list = topics->add_subcommand("list", "list topic names");
  t_list->callback([&] { run = [&](api_client& c) { topics_list(c, std::cout); }; });
  std::string topic_name;
  auto* t_show = topics->add_subcommand("show", "a topic's settings and group counters (JSON)");
  t_show->add_option("name", topic_name, "topic name")->required();
  t_show->callback(
      [&] { run = [&](api_client& c) { topics_show(c, topic_name, term, std::cout); }; });
  auto* t_delete = topics->add_subcommand("delete", "delete a topic and all its data");
  t_delete->add_option("name", topic_name, "topic name")->required();
  t_delete->callback(
      [&] { run = [&](api_client& c) { topics_delete(c, topic_name, std::cout); }; });

  // produce
  produce_options prod;
  std::string key, idem, msg_id, envelope;
  auto* produce_cmd = app.add_subcommand(
      "produce", "produce one message per VALUE, or per stdin line when no VALUE is given");
  produce_cmd->add_option("topic", prod.topic, "topic")->required();
  produce_cmd->add_option("value", prod.values, "message values");
  auto* key_opt = produce_cmd->add_option("--key,-k", key, "message key (picks the partition)");
  auto* idem_opt = produce_cmd->add_option("--idempotency-key", idem, "envelope.idempotency_key");
  auto* msg_id_opt = produce_cmd->add_option(
      "--msg-id", msg_id, "envelope.msg_id (produce dedup); message i of several gets ID#i");
  auto* env_opt = produce_cmd->add_option("--envelope", envelope, "envelope, a JSON object");
  produce_cmd->add_option("--batch", prod.batch, "stdin lines per request (1..1000)")
      ->capture_default_str();
  produce_cmd->callback([&] {
    prod.key = given(key_opt, key);
    prod.idempotency_key = given(idem_opt, idem);
    prod.msg_id = given(msg_id_opt, msg_id);
    prod.envelope = given(env_opt, envelope);
    run = [&](api_client& c) { produce(c, prod, std::cin, stdin_file_size(), term, std::cout); };
  });

  // consume
  consume_options cons;
  std::int64_t wait_ms = 0, lease_ms = 0;
  auto* consume_cmd = app.add_subcommand(
      "consume", "lease messages: NDJSON when stdout is not a terminal, a table when it is");
  consume_cmd->add_option("topic", cons.topic, "topic")->required();
  consume_cmd->add_option("--group,-g", cons.group, "consumer group")->required();
  consume_cmd->add_option("--owner,-o", cons.owner, "consumer name")->required();
  consume_cmd->add_option("--max,-n", cons.max, "stop after N messages (0 = no limit)")
      ->capture_default_str();
  auto* c_wait = consume_cmd->add_option(
      "--wait-ms", wait_ms, "long-poll wait per request (default 0, 5000 with --follow)");
  auto* c_lease = consume_cmd->add_option("--lease-ms", lease_ms, "lease (default: the topic's)");
  consume_cmd->add_flag("--follow,-f", cons.follow, "keep polling until Ctrl-C or --max");
  consume_cmd->add_flag("--ack", cons.ack, "ack each message after printing it");
  consume_cmd->callback([&] {
    cons.wait_ms = given(c_wait, wait_ms);
    cons.lease_ms = given(c_lease, lease_ms);
    run = [&](api_client& c) { consume(c, cons, term, std::cout); };
  });

  // ack / nack / extend
  delivery_options del;
  std::int64_t attempts = 0, delay_ms = 0;
  std::string result, reason;
  auto add_delivery = [&](const char* name, const char* what) {
    auto* sub = app.add_subcommand(name, what);
    sub->add_option("topic", del.topic, "topic")->required();
    sub->add_option("--group,-g", del.group, "consumer group")->required();
    sub->add_option("--owner,-o", del.owner, "consumer name")->required();
    sub->add_option("--partition", del.partition, "partition")->required();
    sub->add_option("--offset", del.offset, "offset")->required();
    return sub;
  };
  auto* ack_cmd = add_delivery("ack", "ack a delivery (commits its idempotency key)");
  auto* a_attempts = ack_cmd->add_option("--attempts", attempts, "fence on this attempt");
  auto* a_result = ack_cmd->add_option("--result", result, "JSON stored with the committed key");
  ack_cmd->callback([&] {
    del.attempts = given(a_attempts, attempts);
    del.result = given(a_result, result);
    run = [&](api_client& c) { ack(c, del, std::cout); };
  });
  auto* nack_cmd = add_delivery("nack", "give a delivery back for a retry");
  auto* n_attempts = nack_cmd->add_option("--attempts", attempts, "fence on this attempt");
  auto* n_reason = nack_cmd->add_option("--reason", reason, "stored as last_error");
  auto* n_delay = nack_cmd->add_option("--delay-ms", delay_ms, "redeliver not before this");
  nack_cmd->callback([&] {
    del.attempts = given(n_attempts, attempts);
    del.reason = given(n_reason, reason);
    del.delay_ms = given(n_delay, delay_ms);
    run = [&](api_client& c) { nack(c, del, std::cout); };
  });
  auto* extend_cmd = add_delivery("extend", "extend the lease of a delivery you hold");
  auto* e_attempts = extend_cmd->add_option("--attempts", attempts, "fence on this attempt");
  extend_cmd->add_option("--lease-ms", lease_ms, "new lease, from now")->required();
  extend_cmd->callback([&] {
    del.attempts = given(e_attempts, attempts);
    del.lease_ms = lease_ms;
    run = [&](api_client& c) { extend(c, del, std::cout); };
  });

  // keys get
  key_options keyo;
  std::string tenant;
  std::int64_t key_wait = 0;
  auto* keys_cmd = app.add_subcommand("keys", "idempotency keys");
  keys_cmd->require_subcommand(1);
  auto* k_get = keys_cmd->add_subcommand("get", "the state of an idempotency key (JSON)");
  k_get->add_option("topic", keyo.topic, "topic")->required();
  k_get->add_option("key", keyo.key, "idempotency key")->required();
  k_get->add_option("--group,-g", keyo.group, "consumer group")->required();
  auto* k_tenant = k_get->add_option("--tenant-id", tenant, "envelope.tenant_id of the messages");
  auto* k_wait = k_get->add_option("--wait-ms", key_wait, "wait up to this for a commit");
  k_get->callback([&] {
    keyo.tenant_id = given(k_tenant, tenant);
    keyo.wait_ms = given(k_wait, key_wait);
    run = [&](api_client& c) { keys_get(c, keyo, term, std::cout); };
  });

  // dlq redrive
  std::string dlq_topic;
  std::int64_t dlq_max = 0;
  auto* dlq_cmd = app.add_subcommand("dlq", "dead-letter queue");
  dlq_cmd->require_subcommand(1);
  auto* redrive = dlq_cmd->add_subcommand("redrive", "move dlq.TOPIC's messages back to TOPIC");
  redrive->add_option("topic", dlq_topic, "the original topic (not dlq.*)")->required();
  auto* r_max = redrive->add_option("--max,-n", dlq_max, "at most N messages (default: all)");
  redrive->callback([&] {
    run = [&](api_client& c) { dlq_redrive(c, dlq_topic, given(r_max, dlq_max), std::cout); };
  });

  // replay
  replay_options rep;
  std::string rep_from, rep_to;
  std::int64_t rep_partition = 0, rep_from_offset = 0, rep_to_offset = 0, rep_page = 0;
  auto* replay_cmd = app.add_subcommand(
      "replay",
      "a range as one group sees it (dry run), or --apply: re-deliver what did not commit");
  replay_cmd->add_option("topic", rep.topic, "topic")->required();
  replay_cmd->add_option("--group,-g", rep.group, "consumer group")->required();
  auto* rp_from = replay_cmd->add_option("--from", rep_from,
                                         "produce time from (epoch ms or RFC 3339, included)");
  auto* rp_to =
      replay_cmd->add_option("--to", rep_to, "produce time to (epoch ms or RFC 3339, excluded)");
  auto* rp_part = replay_cmd->add_option("--partition,-p", rep_partition, "one partition");
  auto* rp_from_off =
      replay_cmd->add_option("--from-offset", rep_from_offset, "offset from (included)");
  auto* rp_to_off = replay_cmd->add_option("--to-offset", rep_to_offset, "offset to (excluded)");
  auto* rp_page = replay_cmd->add_option("--page", rep_page, "messages per request (1..1000)");
  replay_cmd->add_flag("--apply", rep.apply, "replay (default: a dry run that changes nothing)");
  replay_cmd->callback([&] {
    rep.from = given(rp_from, rep_from);
    rep.to = given(rp_to, rep_to);
    rep.partition = given(rp_part, rep_partition);
    rep.from_offset = given(rp_from_off, rep_from_offset);
    rep.to_offset = given(rp_to_off, rep_to_offset);
    rep.page = given(rp_page, rep_page);
    run = [&](api_client& c) { replay(c, rep, std::cout); };
  });

  // cluster
  auto* cluster_cmd = app.add_subcommand("cluster", "a cluster's nodes and shards");
  cluster_cmd->require_subcommand(1);
  auto* c_status = cluster_cmd->add_subcommand(
      "status",
      "the nodes and, per shard, its leader, term and indexes, then the placement (tables)");
  c_status->callback([&] { run = [&](api_client& c) { cluster_status(c, std::cout); }; });
  std::string drain_node;
  auto* c_drain = cluster_cmd->add_subcommand(
      "drain", "move every replica and leadership off NODE, which then gets none");
  c_drain->add_option("node", drain_node, "node id, as in the cluster file")->required();
  c_drain->callback([&] { run = [&](api_client& c) { cluster_drain(c, drain_node, std::cout); }; });
  auto* c_rebalance = cluster_cmd->add_subcommand(
      "rebalance", "move replicas until the active nodes hold as many each, give or take one");
  c_rebalance->callback([&] { run = [&](api_client& c) { cluster_rebalance(c, std::cout); }; });

  // stats
  std::string stats_topic;
  auto* stats_cmd = app.add_subcommand("stats", "per-group counters of one topic or all, a table");
  stats_cmd->add_option("topic", stats_topic, "topic (default: all)");
  stats_cmd->callback([&] { run = [&](api_client& c) { stats(c, stats_topic, std::cout); }; });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a success; every other parse error is a usage error (2).
    const int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(exit_code::usage);
  }

  install_interrupt_handler();
  try {
    conn.timeout = std::chrono::milliseconds(timeout_ms);
    api_client client(conn);
    run(client);
    std::cout.flush();
    return 0;
  } catch (const cli_error& e) {
    std::cout.flush();
    std::cerr << "onceq: " << e.what() << '\n';
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "onceq: " << e.what() << '\n';
    return static_cast<int>(exit_code::failure);
  }
}
