#include "bench/onceq_driver.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include "bench/cluster_nodes.hpp"
#include "bench/clustered_driver.hpp"
#include "bench/http_client.hpp"
#include "client/http_client.hpp"

namespace onceq::bench {
namespace {

using boost::beast::http::verb;
using namespace std::chrono_literals;

constexpr auto k_request_timeout = 30s;
constexpr int k_max_backpressure_retries = 1000;
// A failover producer gives up on a message after this long.
constexpr auto k_failover_deadline = 60s;

[[noreturn]] void fail(std::string_view what, const http_response& r) {
  throw std::runtime_error(
      fmt::format("onceq {}: HTTP {} {}", what, r.status, r.body.substr(0, 300)));
}

void append_message(std::string& out, const bench_message& m) {
  out += R"({"key":")";
  out += m.order_key.empty() ? m.key : m.order_key;
  out += R"(","value":")";
  out += m.payload;
  out += R"(","envelope":{"idempotency_key":")";
  out += m.key;
  out += R"(","msg_id":")";
  out += m.msg_id;
  out += R"("}})";
}

// Answers are read with simdjson's on-demand parser (as the server reads
// requests): no DOM, as a careful client would read them. Bodies get
// simdjson's padding as spare capacity and are parsed in place.
namespace od = simdjson::ondemand;

od::parser& answer_parser() {
  thread_local od::parser p;
  return p;
}

// Calls fn(key, value) for each member of the object v. False if v is not
// an object, or on malformed JSON.
template <class Fn>
bool each_member(od::value v, Fn&& fn) {
  od::object obj;
  if (v.get_object().get(obj) != simdjson::SUCCESS) return false;
  for (auto member : obj) {
    od::field f;
    std::string_view key;
    if (std::move(member).get(f) != simdjson::SUCCESS ||
        f.unescaped_key().get(key) != simdjson::SUCCESS || !fn(key, f.value())) {
      return false;
    }
  }
  return true;
}

// Starts reading text (a whole body, or a line of one) whose buffer has
// SIMDJSON_PADDING readable bytes past readable_end.
bool start(od::document& doc, std::string_view text, const char* readable_end) {
  const auto capacity = static_cast<std::size_t>(readable_end - text.data());
  return answer_parser().iterate(text.data(), text.size(), capacity).get(doc) == simdjson::SUCCESS;
}

// The body, padded in place.
std::string_view padded(std::string& body) {
  body.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  return body;
}

// Calls fn(index, key, value) for each member of each object in the
// array `array_key` of the object `text` (whose buffer is readable up to
// readable_end + SIMDJSON_PADDING); fn returns false on a value it cannot
// read. The number of items, or nullopt if the text or any item is
// malformed.
template <class Fn>
std::optional<std::size_t> scan_items(std::string_view text, const char* readable_end,
                                      std::string_view array_key, Fn&& fn) {
  od::document doc;
  if (!start(doc, text, readable_end)) return std::nullopt;
  od::value root;
  if (doc.get_value().get(root) != simdjson::SUCCESS) return std::nullopt;
  std::size_t n = 0;
  bool ok = each_member(root, [&](std::string_view key, od::value v) {
    if (key != array_key) return true;
    od::array items;
    if (v.get_array().get(items) != simdjson::SUCCESS) return false;
    for (auto item : items) {
      od::value iv;
      if (std::move(item).get(iv) != simdjson::SUCCESS) return false;
      if (!each_member(iv, [&](std::string_view k, od::value x) { return fn(n, k, x); })) {
        return false;
      }
      ++n;
    }
    return true;
  });
  if (!ok) return std::nullopt;
  return n;
}

// scan_items over the "results" array of an answer (produce and ack
// batches), the body padded in place.
template <class Fn>
std::optional<std::size_t> scan_results(std::string& body, Fn&& fn) {
  const std::string_view text = padded(body);
  return scan_items(text, body.data() + body.capacity(), "results", std::forward<Fn>(fn));
}

// The wait a refusal asks for: retry_after_ms in the body (429 and 503
// carry it), else 10 ms; at most 1 s.
std::chrono::milliseconds retry_after(const http_response& r) {
  long wait_ms = 10;
  try {
    wait_ms = nlohmann::json::parse(r.body).value("retry_after_ms", 10L);
  } catch (const nlohmann::json::exception&) {
    // Swallowed on purpose: a refusal without a parsable hint waits 10 ms.
  }
  return std::chrono::milliseconds(std::clamp(wait_ms, 1L, 1000L));
}

bool refused_for_now(int status) {
  return status == 429 || status == 503;
}

// Backpressure (429) and a shard without a leader (503, a cluster) are
// answered by waiting as the server asks; a retried produce is safe because
// every message carries a msg_id (dedup), a retried ack because acks are
// idempotent for the same owner.
http_response& request_with_backpressure(
    http_client& c, verb method, std::string_view target, const std::string& body,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(k_request_timeout)) {
  for (int attempt = 0;; ++attempt) {
    auto& r = c.request(method, target, body, timeout);
    if (!refused_for_now(r.status) || attempt >= k_max_backpressure_retries) return r;
    std::this_thread::sleep_for(retry_after(r));
  }
}

http_response& post_with_backpressure(http_client& c, std::string_view target,
                                      const std::string& body) {
  return request_with_backpressure(c, verb::post, target, body);
}

// A node of the run: the single server, or one node of a cluster.
struct endpoint {
  std::string name;  // the cluster's node id; "" for a single server
  std::string host = "127.0.0.1";
  int port = 0;
};

// Topic t of a run: the run's topic, then "<topic>-1", "<topic>-2", ...
std::string topic_name(const run_setup& s, int t) {
  return t == 0 ? s.topic : fmt::format("{}-{}", s.topic, t);
}

// nodes[0] is the node this producer uses; the others are where a failover
// producer (run_setup::failover) goes when it cannot reach nodes[0].
class onceq_producer final : public producer {
 public:
  onceq_producer(std::vector<endpoint> nodes, const run_setup& s, int index)
      : nodes_(std::move(nodes)),
        topic_(topic_name(s, index % s.topics)),
        failover_(s.failover),
        attempt_timeout_(s.attempt_ms),
        retry_pause_(s.retry_ms) {
    if (!failover_) client_ = std::make_unique<http_client>(nodes_[0].host, nodes_[0].port);
  }

  std::size_t produce(std::span<const bench_message> batch) override {
    body_.clear();
    body_ += R"({"topic":")";
    body_ += topic_;
    if (batch.size() == 1) {
      body_ += R"(",)";
      const std::size_t at = body_.size();
      append_message(body_, batch[0]);
      body_.erase(at, 1);  // the message's fields join the request object
    } else {
      body_ += R"(","messages":[)";
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (i > 0) body_ += ',';
        append_message(body_, batch[i]);
      }
      body_ += "]}";
    }
    auto& r = failover_ ? send_until_acknowledged()
                        : post_with_backpressure(*client_, "/v1/produce", body_);
    if (r.status != 200) fail("produce", r);
    last_node_ = r.node.empty() ? nodes_[at_].name : r.node;
    // Scanned, not parsed into a DOM: the client's CPU shares the machine
    // with the server, as a hand-rolled reader in any real client would.
    std::size_t dups = 0;
    auto duplicate = [&](std::size_t, std::string_view key, od::value v) {
      if (key != "duplicate") return true;
      bool d = false;
      if (v.get_bool().get(d) != simdjson::SUCCESS) return false;
      dups += d ? 1 : 0;
      return true;
    };
    // One message is answered with its result object, a batch with "results".
    std::optional<std::size_t> results;
    if (batch.size() > 1) {
      results = scan_results(r.body, duplicate);
    } else {
      const std::string_view text = padded(r.body);
      od::document doc;
      od::value root;
      if (start(doc, text, r.body.data() + r.body.capacity()) &&
          doc.get_value().get(root) == simdjson::SUCCESS &&
          each_member(root,
                      [&](std::string_view key, od::value v) { return duplicate(0, key, v); })) {
        results = 1;
      }
    }
    if (results != batch.size()) fail("produce (results)", r);
    return dups;
  }

  std::uint64_t last_attempt_ns() const override { return attempt_ns_; }
  std::string last_node() const override { return last_node_; }

 private:
  // The failover probe's produce: every attempt has attempt_timeout_; a
  // refusal (503 without a leader, 429) is retried on the same node after
  // retry_pause_ (not the server's Retry-After: the probe measures the
  // cluster's recovery, not a client's back-off); a node that cannot be
  // reached or does not answer in time is left for the next one.
  http_response& send_until_acknowledged() {
    const auto deadline = std::chrono::steady_clock::now() + k_failover_deadline;
    for (;;) {
      attempt_ns_ = steady_now_ns();
      try {
        if (!client_) client_ = std::make_unique<http_client>(nodes_[at_].host, nodes_[at_].port);
        auto& r = client_->request(verb::post, "/v1/produce", body_, attempt_timeout_);
        if (!refused_for_now(r.status)) return r;
      } catch (const std::runtime_error&) {
        // Swallowed on purpose: the node is gone or silent; try the next.
        client_.reset();
        at_ = (at_ + 1) % nodes_.size();
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error(fmt::format("onceq produce: no node acknowledged it within {} s",
                                             k_failover_deadline.count()));
      }
      std::this_thread::sleep_for(retry_pause_);
    }
  }

  std::vector<endpoint> nodes_;
  std::size_t at_ = 0;  // the node in use
  std::unique_ptr<http_client> client_;
  std::string topic_;
  std::string body_;
  bool failover_;
  std::chrono::milliseconds attempt_timeout_;
  std::chrono::milliseconds retry_pause_;
  std::uint64_t attempt_ns_ = 0;
  std::string last_node_;
};

struct delivery_id {
  std::int64_t partition = 0;
  std::int64_t offset = 0;
  std::int64_t attempts = 0;
};

// One line of a consume answer (its buffer readable up to readable_end +
// SIMDJSON_PADDING): where the message is, and its value. The value is a
// view of the line: the bench's payloads need no escapes, and one that has
// them is an error.
void read_delivery(std::string_view line, const char* readable_end, delivery_id& id,
                   std::string_view& value) {
  bool have_value = false;
  od::document doc;
  od::value root;
  const bool ok = start(doc, line, readable_end) &&
                  doc.get_value().get(root) == simdjson::SUCCESS &&
                  each_member(root, [&](std::string_view key, od::value v) {
                    if (key == "partition")
                      return v.get_int64().get(id.partition) == simdjson::SUCCESS;
                    if (key == "offset") return v.get_int64().get(id.offset) == simdjson::SUCCESS;
                    if (key == "attempts")
                      return v.get_int64().get(id.attempts) == simdjson::SUCCESS;
                    if (key == "value") {
                      std::string_view token = v.raw_json_token();
                      while (!token.empty() && token.back() != '"') token.remove_suffix(1);
                      if (token.size() < 2 || token.find('\\') != std::string_view::npos)
                        return false;
                      value = token.substr(1, token.size() - 2);
                      have_value = true;
                    }
                    return true;
                  });
  if (!ok || !have_value) {
    throw std::runtime_error(
        fmt::format("onceq consume: cannot read line {}", line.substr(0, 200)));
  }
}

// The acks of `ids` as the items of an "acks" array.
void append_acks(std::string& out, std::span<const delivery_id> ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    fmt::format_to(std::back_inserter(out), R"({{"partition":{},"offset":{},"attempts":{}}})",
                   ids[i].partition, ids[i].offset, ids[i].attempts);
  }
}

// consume_mode::batch: POST /v1/consume (long-poll batch), then POST
// /v1/ack. piggyback: the acks ride on the next consume (`acks`), whose
// first answer line reports them. stream: GET /v1/consume without
// max_messages on its own connection; acks as in batch.
class onceq_consumer final : public consumer {
 public:
  onceq_consumer(const endpoint& node, const run_setup& s, int index)
      : client_(node.host, node.port), setup_(s), owner_(fmt::format("c{}", index)) {
    if (s.mode == consume_mode::stream) {
      client::options o;
      o.host = node.host;
      o.port = static_cast<std::uint16_t>(node.port);
      o.timeout = 10s;
      const auto target = fmt::format("/v1/consume?topic={}&group={}&owner={}&lease_ms={}", s.topic,
                                      s.group, owner_, s.lease_ms);
      stream_ = std::make_unique<client::line_stream>(std::move(o), "GET", target);
      if (stream_->status() != 200) {
        throw std::runtime_error(fmt::format("GET {}: status {}", target, stream_->status()));
      }
    }
  }

  const std::vector<std::string_view>& fetch(std::size_t max,
                                             std::chrono::milliseconds wait) override {
    payloads_.clear();
    ids_.clear();
    if (stream_) {
      if (stream_->read_lines(max, wait, lines_) == 0 && stream_->ended()) {
        throw std::runtime_error(
            fmt::format("the server ended the stream ({})", stream_->end_error().message()));
      }
      for (auto& line : lines_) {
        const std::string_view text = padded(line);
        add(text, line.data() + line.capacity());
      }
      return payloads_;
    }
    std::string req = fmt::format(
        R"({{"topic":"{}","group":"{}","owner":"{}","max_messages":{},"wait_ms":{},"lease_ms":{})",
        setup_.topic, setup_.group, owner_, max, wait.count(), setup_.lease_ms);
    const std::size_t acking = held_.size();
    if (acking > 0) {
      req += R"(,"acks":[)";
      append_acks(req, held_);
      req += ']';
      held_.clear();
    }
    req += '}';
    // A refused consume leased nothing and acked nothing: asked again.
    auto& r = request_with_backpressure(client_, verb::post, "/v1/consume", req,
                                        k_request_timeout + wait);
    if (r.status != 200) fail("consume", r);
    body_ = std::move(r.body);
    std::string_view rest = padded(body_);
    const char* const readable_end = body_.data() + body_.capacity();
    bool first = true;
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      const auto line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
      if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
      if (first && acking > 0) {
        check_acks(line, readable_end, acking);
      } else {
        add(line, readable_end);
      }
      first = false;
    }
    return payloads_;
  }

  std::vector<char> ack(std::span<const std::size_t> which) override {
    std::vector<char> accepted(which.size(), 0);
    if (which.empty()) return accepted;
    if (setup_.mode == consume_mode::piggyback) {
      for (const auto i : which) held_.push_back(ids_.at(i));
      return std::vector<char>(which.size(), 1);  // checked with the next fetch
    }
    std::vector<delivery_id> ids;
    for (const auto i : which) ids.push_back(ids_.at(i));
    std::string req = fmt::format(R"({{"topic":"{}","group":"{}","owner":"{}","acks":[)",
                                  setup_.topic, setup_.group, owner_);
    append_acks(req, ids);
    req += "]}";
    auto& r = request_with_backpressure(client_, verb::post, "/v1/ack", req);
    if (r.status != 200) fail("ack", r);
    const auto n = scan_results(r.body, [&](std::size_t i, std::string_view key, od::value v) {
      if (key != "status" || i >= accepted.size()) return true;
      std::string_view status;
      if (v.get_string().get(status) != simdjson::SUCCESS) return false;
      accepted[i] = status == "acked" ? 1 : 0;
      return true;
    });
    if (n != which.size()) fail("ack (results)", r);
    return accepted;
  }

  step_outcome step(std::size_t i) override {
    const delivery_id& id = ids_.at(i);
    const auto head = parse_payload(payloads_.at(i));
    if (!head) throw std::runtime_error("onceq step: unreadable payload");
    // The next message: the same payload and key, its own msg id.
    next_.clear();
    fmt::format_to(std::back_inserter(next_), R"({{"topic":"{}","key":"{}","value":"{}")",
                   setup_.next_topic, key_of(head->seq), payloads_[i]);
    fmt::format_to(std::back_inserter(next_),
                   R"(,"envelope":{{"idempotency_key":"{}","msg_id":"m{:010x}-next"}}}})",
                   key_of(head->seq), head->seq);
    std::string req =
        fmt::format(R"({{"topic":"{}","group":"{}","owner":"{}","partition":{},"offset":{},)"
                    R"("attempts":{})",
                    setup_.topic, setup_.group, owner_, id.partition, id.offset, id.attempts);
    if (setup_.mode == consume_mode::step_ack_produce) {
      // One command: the ack and the produce. 200 {"status":"acked",
      // "produced":[{...,"status":"stored"}]}; "pending" for a message to
      // another shard that its relay had not placed yet.
      req += R"(,"produce":[)";
      req += next_;
      req += "]}";
      auto& r = request_with_backpressure(client_, verb::post, "/v1/ack", req);
      if (r.status != 200) fail("ack with produce", r);
      step_outcome out;
      out.pending = r.body.find(R"("status":"pending")") != std::string::npos;
      if (!out.pending && r.body.find(R"("status":"stored")") == std::string::npos) {
        fail("ack with produce (produced)", r);
      }
      out.acked = r.body.find(R"("status":"acked")") != std::string::npos;
      return out;
    }
    // Two requests: the produce (200), then the ack (204).
    auto& pr = request_with_backpressure(client_, verb::post, "/v1/produce", next_);
    if (pr.status != 200) fail("step produce", pr);
    req += '}';
    auto& r = request_with_backpressure(client_, verb::post, "/v1/ack", req);
    if (r.status != 204 && r.status != 200) fail("step ack", r);
    return {.acked = true};
  }

  void flush() override {
    if (held_.empty()) return;
    std::string req = fmt::format(R"({{"topic":"{}","group":"{}","owner":"{}","acks":[)",
                                  setup_.topic, setup_.group, owner_);
    append_acks(req, held_);
    req += "]}";
    const std::size_t n = held_.size();
    held_.clear();
    auto& r = request_with_backpressure(client_, verb::post, "/v1/ack", req);
    if (r.status != 200) fail("ack", r);
    std::size_t acked = 0;
    const auto got = scan_results(r.body, [&](std::size_t, std::string_view key, od::value v) {
      if (key != "status") return true;
      std::string_view status;
      if (v.get_string().get(status) != simdjson::SUCCESS) return false;
      acked += status == "acked" ? 1 : 0;
      return true;
    });
    if (got != n || acked != n) fail("ack (held acks refused)", r);
  }

 private:
  void add(std::string_view line, const char* readable_end) {
    delivery_id id;
    std::string_view value;
    read_delivery(line, readable_end, id, value);
    ids_.push_back(id);
    payloads_.push_back(value);
  }

  // The first line of a consume that carried acks: {"acks":[...]}, every
  // one acked (a refusal would be a miscount in the run).
  static void check_acks(std::string_view line, const char* readable_end, std::size_t n) {
    std::size_t acked = 0;
    const auto items =
        scan_items(line, readable_end, "acks", [&](std::size_t, std::string_view k, od::value v) {
          if (k != "status") return true;
          std::string_view status;
          if (v.get_string().get(status) != simdjson::SUCCESS) return false;
          acked += status == "acked" ? 1 : 0;
          return true;
        });
    if (items != n || acked != n) {
      throw std::runtime_error(
          fmt::format("onceq consume: acks not all acked: {}", line.substr(0, 300)));
    }
  }

  http_client client_;
  run_setup setup_;
  std::string owner_;
  std::string body_;
  std::unique_ptr<client::line_stream> stream_;
  std::vector<std::string> lines_;
  std::vector<std::string_view> payloads_;
  std::vector<delivery_id> ids_;
  std::vector<delivery_id> held_;  // piggyback: acked with the next fetch
  std::string next_;               // a step's next message
};

// GET /v1/cluster of one node, parsed; throws on a failure or a refusal.
nlohmann::json cluster_view(const endpoint& node) {
  http_client c(node.host, node.port);
  auto& r = c.request(verb::get, "/v1/cluster", "", 5s);
  if (r.status != 200) fail("GET /v1/cluster", r);
  try {
    return nlohmann::json::parse(r.body);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("onceq GET /v1/cluster: {}", e.what()));
  }
}

// A shard's leader in a /v1/cluster answer ("" while it has none).
std::string leader_in(const nlohmann::json& shard) {
  const auto it = shard.find("leader");
  return it != shard.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

bool shard_has_topic(const nlohmann::json& shard, std::string_view topic) {
  const auto it = shard.find("topics");
  if (it == shard.end() || !it->is_array()) return false;
  for (const auto& t : *it) {
    if (t.is_string() && t.get<std::string>() == topic) return true;
    if (t.is_object() && t.value("name", "") == topic) return true;
  }
  return false;
}

// "--shards N" / "--shards=N" among the extra onceqd flags; 0 if absent.
unsigned shards_in(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (args[i] == "--shards" && i + 1 < args.size()) v = args[i + 1];
    if (args[i].rfind("--shards=", 0) == 0) v = args[i].substr(9);
    if (!v.empty()) return static_cast<unsigned>(std::max(0, std::atoi(v.c_str())));
  }
  return 0;
}

// onceqd alone (--listen 127.0.0.1:0), or --cluster N: N onceqd processes
// sharing one cluster file, each with its own data dir.
class onceq_driver final : public clustered_driver {
 public:
  explicit onceq_driver(const bench_options& o) : clustered_driver(o.cluster > 0), o_(o) {}

  std::string_view name() const override { return "onceq"; }

  std::string setting(durability d) const override {
    return fmt::format(
        "--fsync {}{}{}{}", policy(d), o_.onceqd_args.empty() ? "" : " ",
        fmt::join(o_.onceqd_args, " "),
        o_.cluster > 0 ? fmt::format(", {}-node cluster (--cluster)", o_.cluster) : std::string{});
  }

  bool supports(durability, std::string& why) override {
    if (access(o_.onceqd.c_str(), X_OK) != 0) {
      why = fmt::format("onceqd not found at {} (build it, or pass --onceqd)", o_.onceqd);
      return false;
    }
    return true;
  }

  bool supports(consume_mode, std::string&) override { return true; }

  std::string version() override { return version_.empty() ? "unknown" : version_; }

  void start(durability d, const std::filesystem::path& dir) override {
    if (o_.cluster > 0) return start_cluster(d, dir);
    std::filesystem::create_directories(dir / "data");
    std::vector<std::string> argv{
        o_.onceqd, "--listen", "127.0.0.1:0", "--data-dir", (dir / "data").string(),
        "--fsync", policy(d)};
    argv.insert(argv.end(), o_.onceqd_args.begin(), o_.onceqd_args.end());
    proc_.start(argv, dir / "onceqd.log");
    const auto line = proc_.wait_for_log("onceqd listening on", 60s);
    if (!line) {
      throw std::runtime_error(
          fmt::format("onceqd did not report listening; see {}", proc_.log_path().string()));
    }
    endpoints_ = {endpoint{"", "127.0.0.1", std::stoi(line->substr(line->rfind(':') + 1))}};
    http_client c("127.0.0.1", endpoints_[0].port);
    for (int i = 0; i < 200; ++i) {
      if (c.request(verb::get, "/v1/healthz", "", 5s).status == 200) break;
      std::this_thread::sleep_for(25ms);
    }
    read_version(endpoints_[0]);
  }

  void prepare(const run_setup& s) override {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    // The run's topics, then a workflow step's next topic (created after
    // them: on a single node with --shards 2 it lands on the other shard).
    std::vector<std::string> names;
    for (int t = 0; t < s.topics; ++t) names.push_back(topic_name(s, t));
    if (!s.next_topic.empty()) names.push_back(s.next_topic);
    for (const auto& name : names) {
      const std::string ordering =
          s.ordering.empty() ? std::string{} : fmt::format(R"(,"ordering":"{}")", s.ordering);
      const std::string body = fmt::format(R"({{"name":"{}","partitions":{},"lease_ms":{}{}}})",
                                           name, s.partitions, s.lease_ms, ordering);
      if (o_.cluster == 0) {
        http_client c("127.0.0.1", endpoints_[0].port);
        auto& r = c.request(verb::post, "/v1/topics", body, k_request_timeout);
        if (r.status != 201 && r.status != 200) fail("create topic", r);
        continue;
      }
      // Any node takes it (it forwards); a refusal while a shard elects is
      // asked again, and an answer lost to a timeout finds the topic there.
      for (std::size_t attempt = 0;; ++attempt) {
        const auto& node = endpoints_[attempt % endpoints_.size()];
        try {
          http_client c(node.host, node.port);
          auto& r = c.request(verb::post, "/v1/topics", body, k_request_timeout);
          if (r.status == 201 || r.status == 200 || (attempt > 0 && r.status == 409)) break;
          if (!refused_for_now(r.status) || std::chrono::steady_clock::now() > deadline) {
            fail("create topic", r);
          }
        } catch (const std::runtime_error&) {
          if (std::chrono::steady_clock::now() > deadline) throw;
        }
        std::this_thread::sleep_for(50ms);
      }
    }
    if (o_.cluster > 0) {
      for (const auto& name : names) locate(name, 60s);
    }
  }

  std::unique_ptr<producer> make_producer(const run_setup& s, int index) override {
    return std::make_unique<onceq_producer>(nodes_for(topic_name(s, index % s.topics), index), s,
                                            index);
  }
  std::unique_ptr<consumer> make_consumer(const run_setup& s, int index) override {
    // A node does not forward a streaming consume (it answers 503 naming the
    // leader): streams go to the topic's leader even with spread clients.
    const bool leader_only = s.mode == consume_mode::stream;
    return std::make_unique<onceq_consumer>(nodes_for(s.topic, index, leader_only).front(), s,
                                            index);
  }

  key_check check_keys(const run_setup& s, std::span<const std::uint64_t> seqs) override {
    key_check out;
    const endpoint node = nodes_for(s.topic, 0).front();
    http_client c(node.host, node.port);
    for (const auto seq : seqs) {
      const auto target =
          fmt::format("/v1/keys?topic={}&group={}&key={}", s.topic, s.group, key_of(seq));
      auto& r = request_with_backpressure(c, verb::get, target, "");
      ++out.sampled;
      std::string state;
      if (r.status == 200) {
        try {
          state = nlohmann::json::parse(r.body).value("state", "");
        } catch (const nlohmann::json::exception&) {
          state = "unparsable";  // swallowed: reported as the problem below
        }
      }
      if (state == "committed") {
        ++out.committed;
      } else if (out.first_problem.empty()) {
        out.first_problem =
            fmt::format("{}: HTTP {} {}", key_of(seq), r.status, r.body.substr(0, 200));
      }
    }
    return out;
  }

  // cluster_control
  std::size_t size() const override { return endpoints_.size(); }
  std::string node_name(std::size_t i) const override { return endpoints_.at(i).name; }

  std::size_t leader_of(const run_setup& s) override {
    for (int t = 0; t < s.topics; ++t) locate(topic_name(s, t), 60s);
    return leaders_.at(s.topic);
  }

  void restart(std::size_t i, const run_setup& s, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // What node i has to catch up with: the furthest commit index of each
    // shard among the nodes that stayed up.
    std::map<std::int64_t, std::int64_t> goal;
    for (std::size_t k = 0; k < endpoints_.size(); ++k) {
      if (k == i) continue;
      try {
        for (const auto& sh : cluster_view(endpoints_[k]).at("shards")) {
          auto& g = goal[sh.value("shard", std::int64_t{-1})];
          g = std::max(g, sh.value("commit_index", std::int64_t{0}));
        }
      } catch (const std::exception&) {
        // Swallowed on purpose: a node that cannot answer sets no goal.
      }
    }
    nodes_.start(i, "onceqd listening on", timeout);
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        const auto view = cluster_view(endpoints_[i]);
        bool caught_up = true;
        for (const auto& sh : view.at("shards")) {
          const auto id = sh.value("shard", std::int64_t{-1});
          const auto applied = sh.value("applied_index", std::int64_t{0});
          if (leader_in(sh).empty() || (goal.contains(id) && applied < goal[id])) {
            caught_up = false;
            last = sh.dump();
          }
        }
        if (caught_up && !view.at("shards").empty()) {
          locate(s.topic, timeout);
          return;
        }
      } catch (const std::exception& e) {
        last = e.what();
      }
      std::this_thread::sleep_for(50ms);
    }
    throw std::runtime_error(
        fmt::format("onceq node {} did not catch up in time; last: {}", endpoints_[i].name, last));
  }

  std::string client_placement(const run_setup& s) const override {
    if (o_.cluster_spread) {
      return fmt::format("client i to node i mod {} (spread); the topic's shard led by {}",
                         endpoints_.size(), endpoints_.at(leaders_.at(s.topic)).name);
    }
    const auto& e = endpoints_.at(leaders_.at(s.topic));
    return fmt::format("every client to {} ({}:{}), the leader of the topic's shard at the start",
                       e.name, e.host, e.port);
  }

 private:
  std::string policy(durability d) const {
    return d == durability::synced ? "always" : o_.onceq_default_fsync;
  }

  void read_version(const endpoint& node) {
    if (!version_.empty()) return;
    http_client c(node.host, node.port);
    auto& r = c.request(verb::get, "/v1/version", "", 5s);
    if (r.status == 200) {
      try {
        const auto v = nlohmann::json::parse(r.body);
        version_ = fmt::format("{} ({})", v.value("version", "?"), v.value("commit", "?"));
      } catch (const nlohmann::json::exception&) {
        version_ = "unparsable /v1/version";  // swallowed: only a label
      }
    }
  }

  // Writes the cluster file (node k: "n<k+1>", an HTTP port, a block of
  // Raft ports, one per group), starts every node and waits until each of
  // them serves and every shard has a leader.
  void start_cluster(durability d, const std::filesystem::path& dir) {
    const auto n = static_cast<std::size_t>(o_.cluster);
    unsigned groups = shards_in(o_.onceqd_args);
    if (groups == 0) groups = std::clamp(std::thread::hardware_concurrency(), 1u, 256u);
    // Room for the groups and a few more (a metadata group, say).
    const int span = static_cast<int>(groups) + 8;
    const int raft_base = pick_free_port_block(span * static_cast<int>(n));
    endpoints_.clear();
    leaders_.clear();
    std::string toml;
    for (std::size_t k = 0; k < n; ++k) {
      endpoints_.push_back(endpoint{fmt::format("n{}", k + 1), "127.0.0.1", pick_free_port()});
      fmt::format_to(std::back_inserter(toml),
                     "[[node]]\nid = \"{}\"\nhttp = \"127.0.0.1:{}\"\nraft = \"127.0.0.1:{}\"\n\n",
                     endpoints_[k].name, endpoints_[k].port,
                     raft_base + static_cast<int>(k) * span);
    }
    const auto file = dir / "cluster.toml";
    {
      std::ofstream out(file);
      out << toml;
      if (!out) throw std::runtime_error(fmt::format("cannot write {}", file.string()));
    }
    nodes_ = cluster_nodes{};
    for (const auto& e : endpoints_) {
      const auto data = dir / e.name;
      std::filesystem::create_directories(data);
      std::vector<std::string> argv{o_.onceqd,    "--cluster",   file.string(), "--node-id", e.name,
                                    "--data-dir", data.string(), "--fsync",     policy(d)};
      argv.insert(argv.end(), o_.onceqd_args.begin(), o_.onceqd_args.end());
      nodes_.add(e.name, std::move(argv), dir);
    }
    nodes_.start_all("onceqd listening on", 60s);
    wait_until_settled(60s);
    read_version(endpoints_[0]);
  }

  void wait_until_settled(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last;
    for (std::size_t attempt = 0; std::chrono::steady_clock::now() < deadline; ++attempt) {
      try {
        const auto view = cluster_view(endpoints_[attempt % endpoints_.size()]);
        const auto& shards = view.at("shards");
        // Settled: the first placement made and every shard led by its
        // preferred leader (the first of its replicas). Placement hands the
        // leadership over soon after the first election; a run that starts
        // before would lose the answers in flight at the hand-over and wait
        // out their leases (30 s) for the redeliveries.
        const auto meta = view.find("meta");
        const bool placed = meta == view.end() || meta->value("placed", true);
        const bool all =
            placed && !shards.empty() && std::all_of(shards.begin(), shards.end(), [](auto& sh) {
              const auto leader = leader_in(sh);
              const auto r = sh.find("replicas");
              const bool preferred = r == sh.end() || !r->is_array() || r->empty() ||
                                     r->front().template get<std::string>() == leader;
              return !leader.empty() && preferred;
            });
        if (all) return;
        last = view.dump();
      } catch (const std::exception& e) {
        last = e.what();
      }
      std::this_thread::sleep_for(50ms);
    }
    throw std::runtime_error(fmt::format(
        "onceq cluster: not settled in time (a leader on every shard, its preferred one, after "
        "the first placement); last: {}",
        last.substr(0, 300)));
  }

  // Finds the shard holding `topic` and its leader (retrying while it has
  // none) and records that leader as the topic's.
  void locate(const std::string& topic, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last;
    for (std::size_t attempt = 0; std::chrono::steady_clock::now() < deadline; ++attempt) {
      const auto& node = endpoints_[attempt % endpoints_.size()];
      try {
        const auto view = cluster_view(node);
        for (const auto& sh : view.at("shards")) {
          if (!shard_has_topic(sh, topic)) continue;
          const auto leader = leader_in(sh);
          for (std::size_t k = 0; k < endpoints_.size(); ++k) {
            if (endpoints_[k].name == leader) {
              leaders_[topic] = k;
              return;
            }
          }
        }
        last = view.dump();
      } catch (const std::exception& e) {
        last = e.what();  // that node may be the one down: ask the next
      }
      std::this_thread::sleep_for(50ms);
    }
    throw std::runtime_error(
        fmt::format("onceq cluster: no shard with a leader lists topic {}; last: {}", topic,
                    last.substr(0, 300)));
  }

  // The nodes a client of `topic` uses, the first one first: the single
  // server; in a cluster the topic's leader (or node index mod N with
  // --cluster-clients spread, unless leader_only), then the others in file
  // order from there.
  std::vector<endpoint> nodes_for(const std::string& topic, int index,
                                  bool leader_only = false) const {
    if (o_.cluster == 0) return endpoints_;
    const std::size_t n = endpoints_.size();
    const std::size_t first = o_.cluster_spread && !leader_only
                                  ? static_cast<std::size_t>(index) % n
                                  : leaders_.at(topic);
    std::vector<endpoint> out;
    for (std::size_t k = 0; k < n; ++k) out.push_back(endpoints_[(first + k) % n]);
    return out;
  }

  bench_options o_;
  std::vector<endpoint> endpoints_;
  std::map<std::string, std::size_t> leaders_;  // topic -> node leading its shard
  std::string version_;
};

}  // namespace

std::unique_ptr<system_driver> make_onceq_driver(const bench_options& o) {
  return std::make_unique<onceq_driver>(o);
}

}  // namespace onceq::bench
