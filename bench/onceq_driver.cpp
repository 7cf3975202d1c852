#include "bench/onceq_driver.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <thread>

#include "bench/http_client.hpp"

namespace onceq::bench {
namespace {

using boost::beast::http::verb;
using namespace std::chrono_literals;

constexpr auto k_request_timeout = 30s;
constexpr int k_max_backpressure_retries = 1000;

[[noreturn]] void fail(std::string_view what, const http_response& r) {
  throw std::runtime_error(
      fmt::format("onceq {}: HTTP {} {}", what, r.status, r.body.substr(0, 300)));
}

void append_message(std::string& out, const bench_message& m) {
  out += R"({"key":")";
  out += m.key;
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

// Backpressure (429) is answered by waiting as the server asks; a retried
// produce is safe because every message carries a msg_id (dedup).
http_response& post_with_backpressure(http_client& c, std::string_view target,
                                      const std::string& body) {
  for (int attempt = 0;; ++attempt) {
    auto& r = c.request(verb::post, target, body, k_request_timeout);
    if (r.status != 429 || attempt >= k_max_backpressure_retries) return r;
    long wait_ms = 10;
    try {
      wait_ms = nlohmann::json::parse(r.body).value("retry_after_ms", 10L);
    } catch (const nlohmann::json::exception&) {
      // Swallowed on purpose: a 429 without a parsable hint waits 10 ms.
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp(wait_ms, 1L, 1000L)));
  }
}

// Topic t of a run: the run's topic, then "<topic>-1", "<topic>-2", ...
std::string topic_name(const run_setup& s, int t) {
  return t == 0 ? s.topic : fmt::format("{}-{}", s.topic, t);
}

class onceq_producer final : public producer {
 public:
  onceq_producer(int port, const run_setup& s, int index)
      : client_("127.0.0.1", port), topic_(topic_name(s, index % s.topics)) {}

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
    auto& r = post_with_backpressure(client_, "/v1/produce", body_);
    if (r.status != 200) fail("produce", r);
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

 private:
  http_client client_;
  std::string topic_;
  std::string body_;
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
  onceq_consumer(int port, const run_setup& s, int index)
      : client_("127.0.0.1", port), setup_(s), owner_(fmt::format("c{}", index)) {
    if (s.mode == consume_mode::stream) {
      stream_ = std::make_unique<http_line_stream>(
          "127.0.0.1", port,
          fmt::format("/v1/consume?topic={}&group={}&owner={}&lease_ms={}", s.topic, s.group,
                      owner_, s.lease_ms));
    }
  }

  const std::vector<std::string_view>& fetch(std::size_t max,
                                             std::chrono::milliseconds wait) override {
    payloads_.clear();
    ids_.clear();
    if (stream_) {
      stream_->read_lines(max, wait, lines_);
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
    auto& r = client_.request(verb::post, "/v1/consume", std::move(req), k_request_timeout + wait);
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
    auto& r = client_.request(verb::post, "/v1/ack", std::move(req), k_request_timeout);
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

  void flush() override {
    if (held_.empty()) return;
    std::string req = fmt::format(R"({{"topic":"{}","group":"{}","owner":"{}","acks":[)",
                                  setup_.topic, setup_.group, owner_);
    append_acks(req, held_);
    req += "]}";
    const std::size_t n = held_.size();
    held_.clear();
    auto& r = client_.request(verb::post, "/v1/ack", std::move(req), k_request_timeout);
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
  std::unique_ptr<http_line_stream> stream_;
  std::vector<std::string> lines_;
  std::vector<std::string_view> payloads_;
  std::vector<delivery_id> ids_;
  std::vector<delivery_id> held_;  // piggyback: acked with the next fetch
};

class onceq_driver final : public system_driver {
 public:
  explicit onceq_driver(const bench_options& o) : o_(o) {}

  std::string_view name() const override { return "onceq"; }

  std::string setting(durability d) const override {
    return fmt::format("--fsync {}{}{}", policy(d), o_.onceqd_args.empty() ? "" : " ",
                       fmt::join(o_.onceqd_args, " "));
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
    port_ = std::stoi(line->substr(line->rfind(':') + 1));
    http_client c("127.0.0.1", port_);
    for (int i = 0; i < 200; ++i) {
      if (c.request(verb::get, "/v1/healthz", "", 5s).status == 200) break;
      std::this_thread::sleep_for(25ms);
    }
    if (version_.empty()) {
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
  }

  void prepare(const run_setup& s) override {
    http_client c("127.0.0.1", port_);
    for (int t = 0; t < s.topics; ++t) {
      const std::string body = fmt::format(R"({{"name":"{}","partitions":{},"lease_ms":{}}})",
                                           topic_name(s, t), s.partitions, s.lease_ms);
      auto& r = c.request(verb::post, "/v1/topics", body, k_request_timeout);
      if (r.status != 201 && r.status != 200) fail("create topic", r);
    }
  }

  std::unique_ptr<producer> make_producer(const run_setup& s, int index) override {
    return std::make_unique<onceq_producer>(port_, s, index);
  }
  std::unique_ptr<consumer> make_consumer(const run_setup& s, int index) override {
    return std::make_unique<onceq_consumer>(port_, s, index);
  }

  key_check check_keys(const run_setup& s, std::span<const std::uint64_t> seqs) override {
    key_check out;
    http_client c("127.0.0.1", port_);
    for (const auto seq : seqs) {
      const auto target =
          fmt::format("/v1/keys?topic={}&group={}&key={}", s.topic, s.group, key_of(seq));
      auto& r = c.request(verb::get, target, "", k_request_timeout);
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

  server_process& process() override { return proc_; }
  std::string stop() override { return proc_.stop(); }

 private:
  std::string policy(durability d) const {
    return d == durability::synced ? "always" : o_.onceq_default_fsync;
  }

  bench_options o_;
  server_process proc_;
  int port_ = 0;
  std::string version_;
};

}  // namespace

std::unique_ptr<system_driver> make_onceq_driver(const bench_options& o) {
  return std::make_unique<onceq_driver>(o);
}

}  // namespace onceq::bench
