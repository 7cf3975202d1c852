// onceq-json-compare: the request path's JSON reading, measured on four
// parsers with the same steps (codec_speed_test's workload: a 100-message
// produce with 256-byte values and envelopes, a 100-item batch ack).
//
// For each body every variant does what http/codec/ does with it:
// parse, walk every member of every message (the unknown-field check),
// read key / value / idempotency_key / msg_id, probe the eleven optional
// envelope fields, copy the envelope as compact JSON, and write the reply
// with the one writer path (http/json_write.hpp's append_*). Only the
// reading differs:
//   codec         the server's real read_params + parse_* + reply (since
//                 issue 13: simdjson on-demand, http/params.hpp; before,
//                 the hand-written jdoc DOM)
//   simdjson-od   simdjson 3.0.1 on-demand, raw_json() for the envelope
//   simdjson-dom  simdjson 3.0.1 DOM parser (fully validating)
//   boost-json    Boost.JSON 1.81, parse into a value over a monotonic
//                 resource
//   nlohmann      nlohmann::json, for reference (what answers are built with)
// Prints ns per message, best of ROUNDS rounds, for each.
//
//   onceq-json-compare [ROUNDS]

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>
#include <boost/json.hpp>
#include <nlohmann/json.hpp>

#include "bench/json_samples.hpp"
#include "http/codec.hpp"
#include "http/json_write.hpp"
#include "http/params.hpp"

namespace {

using onceq::http::append_json_int;
using onceq::http::append_json_string;

constexpr int k_messages = onceq::bench::k_sample_messages;
constexpr std::array<std::string_view, 11> k_optional = {
    "tenant_id",  "run_id",   "step_id",  "parent_step_id", "target_topic", "partition_override",
    "key_ttl_ms", "delay_ms", "deadline", "retry_policy",   "headers"};

// What every variant extracts from one produced message.
struct msg_fields {
  std::string key, value, idem, msg_id, envelope;
};

// The reply every variant writes, with the one writer path.
std::size_t produce_reply(std::size_t n) {
  std::string out = R"({"status":"produced","topic":"bench","results":[)";
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    out += R"({"partition":)";
    append_json_int(out, i % 4);
    out += R"(,"offset":)";
    append_json_int(out, 1'000'000 + i);
    out += R"(,"duplicate":false})";
  }
  out += "]}";
  return out.size();
}

std::size_t ack_reply(const std::vector<std::pair<std::int64_t, std::int64_t>>& acks) {
  std::string out = R"({"results":[)";
  bool first = true;
  for (auto [p, o] : acks) {
    if (!first) out += ',';
    first = false;
    out += R"({"partition":)";
    append_json_int(out, p);
    out += R"(,"offset":)";
    append_json_int(out, o);
    out += R"(,"status":"acked"})";
  }
  out += "]}";
  return out.size();
}

std::size_t sum(const std::vector<msg_fields>& ms) {
  std::size_t s = 0;
  for (const auto& m : ms)
    s += m.key.size() + m.value.size() + m.idem.size() + m.msg_id.size() + m.envelope.size();
  return s;
}

// ---- the server's codec ----------------------------------------------------

std::size_t codec_produce(const std::string& body) {
  auto p = onceq::http::read_params(body, "", body.capacity());
  auto pr = onceq::http::parse_produce(*p, "");
  onceq::produce_reply reply;
  for (std::size_t i = 0; i < pr->cmd.messages.size(); ++i) {
    reply.results.push_back(
        onceq::produced{static_cast<std::uint32_t>(i % 4), 1'000'000 + i, false});
  }
  return pr->cmd.messages.size() +
         onceq::http::produce_reply_json(reply, pr->cmd.topic, true).size();
}

std::size_t codec_ack(const std::string& body) {
  auto p = onceq::http::read_params(body, "", body.capacity());
  auto a = onceq::http::parse_ack(*p);
  const auto& b = std::get<onceq::ack_batch_cmd>(*a);
  std::vector<onceq::ack_outcome> outcomes;
  for (const auto& item : b.acks)
    outcomes.push_back({item.partition, item.offset, onceq::errc::ok, ""});
  return b.acks.size() + onceq::http::ack_outcomes_json(outcomes).size();
}

// ---- simdjson on-demand ------------------------------------------------------

simdjson::ondemand::parser& od_parser() {
  thread_local simdjson::ondemand::parser p;
  return p;
}

std::size_t od_produce(const simdjson::padded_string& body) {
  auto doc = od_parser().iterate(body);
  std::vector<msg_fields> out;
  std::size_t sink = 0;
  auto top = doc.get_object();
  for (auto field : top) {
    std::string_view k = field.unescaped_key().value();
    if (k == "messages") {
      auto messages = field.value().get_array();
      for (auto mv : messages) {
        msg_fields f;
        auto mo = mv.get_object();
        for (auto mf : mo) {
          std::string_view mk = mf.unescaped_key().value();
          sink += mk.size();
          if (mk == "key") {
            f.key = std::string_view(mf.value().get_string().value());
          } else if (mk == "value") {
            f.value = std::string_view(mf.value().get_string().value());
          } else if (mk == "envelope") {
            auto env = mf.value().get_object().value();
            std::string_view raw = env.raw_json().value();  // consumes nothing
            env.reset();
            for (auto ef : env) {
              std::string_view ek = ef.unescaped_key().value();
              sink += ek.size();
              if (ek == "idempotency_key") {
                f.idem = std::string_view(ef.value().get_string().value());
              } else if (ek == "msg_id") {
                f.msg_id = std::string_view(ef.value().get_string().value());
              } else {
                for (auto o : k_optional) sink += (o == ek);
              }
            }
            f.envelope.resize(raw.size());
            std::size_t n = 0;
            if (simdjson::minify(raw.data(), raw.size(), f.envelope.data(), n) != simdjson::SUCCESS)
              std::abort();
            f.envelope.resize(n);
          }
        }
        out.push_back(std::move(f));
      }
    }
  }
  return sink + sum(out) + produce_reply(out.size());
}

std::size_t od_ack(const simdjson::padded_string& body) {
  auto doc = od_parser().iterate(body);
  std::vector<std::pair<std::int64_t, std::int64_t>> acks;
  std::size_t sink = 0;
  auto top = doc.get_object();
  for (auto field : top) {
    std::string_view k = field.unescaped_key().value();
    if (k == "acks") {
      auto ack_items = field.value().get_array();
      for (auto av : ack_items) {
        std::int64_t p = 0, o = 0, at = 0;
        auto ao = av.get_object();
        for (auto af : ao) {
          std::string_view ak = af.unescaped_key().value();
          sink += ak.size();
          if (ak == "partition")
            p = af.value().get_int64().value();
          else if (ak == "offset")
            o = af.value().get_int64().value();
          else if (ak == "attempts")
            at = af.value().get_int64().value();
          else if (ak == "result")
            sink += 1;
        }
        sink += static_cast<std::size_t>(at);
        acks.emplace_back(p, o);
      }
    } else {
      std::string_view v = field.value().get_string().value();
      if (k == "topic") sink += v.size();
    }
  }
  return sink + ack_reply(acks);
}

// ---- simdjson DOM --------------------------------------------------------------

simdjson::dom::parser& dom_parser() {
  thread_local simdjson::dom::parser p;
  return p;
}

std::size_t dom_produce(const simdjson::padded_string& body) {
  simdjson::dom::element root = dom_parser().parse(body).value();
  std::vector<msg_fields> out;
  std::size_t sink = 0;
  simdjson::dom::array messages = root["messages"].get_array().value();
  for (simdjson::dom::object m : messages) {
    msg_fields f;
    for (auto mem : m) sink += mem.key.size();
    f.key = std::string_view(m["key"].get_string().value());
    f.value = std::string_view(m["value"].get_string().value());
    simdjson::dom::object env = m["envelope"].get_object().value();
    for (auto mem : env) sink += mem.key.size();
    f.idem = std::string_view(env["idempotency_key"].get_string().value());
    f.msg_id = std::string_view(env["msg_id"].get_string().value());
    for (auto k : k_optional) sink += env[k].error() == simdjson::SUCCESS;
    f.envelope = simdjson::minify(env);
    out.push_back(std::move(f));
  }
  return sink + sum(out) + produce_reply(out.size());
}

std::size_t dom_ack(const simdjson::padded_string& body) {
  simdjson::dom::element root = dom_parser().parse(body).value();
  std::vector<std::pair<std::int64_t, std::int64_t>> acks;
  std::size_t sink = std::string_view(root["topic"].get_string().value()).size();
  simdjson::dom::array ack_items = root["acks"].get_array().value();
  for (simdjson::dom::object a : ack_items) {
    for (auto mem : a) sink += mem.key.size();
    std::int64_t p = a["partition"].get_int64().value();
    std::int64_t o = a["offset"].get_int64().value();
    std::int64_t at = a["attempts"].get_int64().value();
    sink += a["result"].error() == simdjson::SUCCESS;
    sink += static_cast<std::size_t>(at);
    acks.emplace_back(p, o);
  }
  return sink + ack_reply(acks);
}

// ---- Boost.JSON ----------------------------------------------------------------

std::size_t boost_produce(const std::string& body) {
  unsigned char buf[4096];
  boost::json::monotonic_resource mr(buf);
  boost::json::value root = boost::json::parse(body, &mr);
  std::vector<msg_fields> out;
  std::size_t sink = 0;
  for (const auto& mv : root.at("messages").as_array()) {
    const auto& m = mv.as_object();
    msg_fields f;
    for (const auto& mem : m) sink += mem.key().size();
    f.key = std::string_view(m.at("key").as_string());
    f.value = std::string_view(m.at("value").as_string());
    const auto& env = m.at("envelope").as_object();
    for (const auto& mem : env) sink += mem.key().size();
    f.idem = std::string_view(env.at("idempotency_key").as_string());
    f.msg_id = std::string_view(env.at("msg_id").as_string());
    for (auto k : k_optional) sink += env.contains(k);
    f.envelope = boost::json::serialize(env);
    out.push_back(std::move(f));
  }
  return sink + sum(out) + produce_reply(out.size());
}

std::size_t boost_ack(const std::string& body) {
  unsigned char buf[4096];
  boost::json::monotonic_resource mr(buf);
  boost::json::value root = boost::json::parse(body, &mr);
  std::vector<std::pair<std::int64_t, std::int64_t>> acks;
  std::size_t sink = root.at("topic").as_string().size();
  for (const auto& av : root.at("acks").as_array()) {
    const auto& a = av.as_object();
    for (const auto& mem : a) sink += mem.key().size();
    std::int64_t p = a.at("partition").as_int64();
    std::int64_t o = a.at("offset").as_int64();
    std::int64_t at = a.at("attempts").as_int64();
    sink += a.contains("result");
    sink += static_cast<std::size_t>(at);
    acks.emplace_back(p, o);
  }
  return sink + ack_reply(acks);
}

// ---- nlohmann --------------------------------------------------------------------

std::size_t nl_produce(const std::string& body) {
  auto root = nlohmann::json::parse(body);
  std::vector<msg_fields> out;
  std::size_t sink = 0;
  for (const auto& m : root.at("messages")) {
    msg_fields f;
    for (auto it = m.begin(); it != m.end(); ++it) sink += it.key().size();
    f.key = m.at("key").get<std::string>();
    f.value = m.at("value").get<std::string>();
    const auto& env = m.at("envelope");
    for (auto it = env.begin(); it != env.end(); ++it) sink += it.key().size();
    f.idem = env.at("idempotency_key").get<std::string>();
    f.msg_id = env.at("msg_id").get<std::string>();
    for (auto k : k_optional) sink += env.contains(k);
    f.envelope = env.dump();
    out.push_back(std::move(f));
  }
  return sink + sum(out) + produce_reply(out.size());
}

std::size_t nl_ack(const std::string& body) {
  auto root = nlohmann::json::parse(body);
  std::vector<std::pair<std::int64_t, std::int64_t>> acks;
  std::size_t sink = root.at("topic").get<std::string>().size();
  for (const auto& a : root.at("acks")) {
    for (auto it = a.begin(); it != a.end(); ++it) sink += it.key().size();
    auto p = a.at("partition").get<std::int64_t>();
    auto o = a.at("offset").get<std::int64_t>();
    auto at = a.at("attempts").get<std::int64_t>();
    sink += a.contains("result");
    sink += static_cast<std::size_t>(at);
    acks.emplace_back(p, o);
  }
  return sink + ack_reply(acks);
}

// Nanoseconds per message of fn(), best of `rounds`.
template <class Fn>
double ns_per_message(int rounds, Fn fn) {
  constexpr int k_iterations = 400;
  double best = 1e300;
  std::size_t sink = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < k_iterations; ++i) sink += fn();
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / (k_iterations * k_messages));
  }
  if (sink == 0) std::abort();
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  // The server's bodies have simdjson's padding past their end (as
  // http/session.cpp reads them): the codec parses them in place.
  std::string produce = onceq::bench::sample_produce_body();
  std::string ack = onceq::bench::sample_ack_body();
  produce.reserve(produce.size() + onceq::http::k_json_padding);
  ack.reserve(ack.size() + onceq::http::k_json_padding);
  const simdjson::padded_string produce_p(produce);
  const simdjson::padded_string ack_p(ack);

  // Every variant reads the same thing from the same body.
  const std::size_t want_p = od_produce(produce_p), want_a = od_ack(ack_p);
  if (dom_produce(produce_p) != want_p || boost_produce(produce) != want_p ||
      nl_produce(produce) != want_p || dom_ack(ack_p) != want_a || boost_ack(ack) != want_a ||
      nl_ack(ack) != want_a) {
    std::fprintf(stderr, "variants disagree\n");
    return 1;
  }

  struct row {
    const char* name;
    double produce, ack;
  };
  std::vector<row> rows = {
      {"codec (server path)", ns_per_message(rounds, [&] { return codec_produce(produce); }),
       ns_per_message(rounds, [&] { return codec_ack(ack); })},
      {"simdjson-od", ns_per_message(rounds, [&] { return od_produce(produce_p); }),
       ns_per_message(rounds, [&] { return od_ack(ack_p); })},
      {"simdjson-dom", ns_per_message(rounds, [&] { return dom_produce(produce_p); }),
       ns_per_message(rounds, [&] { return dom_ack(ack_p); })},
      {"boost-json", ns_per_message(rounds, [&] { return boost_produce(produce); }),
       ns_per_message(rounds, [&] { return boost_ack(ack); })},
      {"nlohmann", ns_per_message(rounds, [&] { return nl_produce(produce); }),
       ns_per_message(rounds, [&] { return nl_ack(ack); })},
  };
  std::printf("bodies: produce %zu bytes / %d messages, ack %zu bytes / %d acks; best of %d\n",
              produce.size(), k_messages, ack.size(), k_messages, rounds);
  std::printf("%-22s %14s %14s %10s %10s\n", "parser", "produce ns/msg", "ack ns/msg", "vs codec P",
              "vs codec A");
  for (const auto& r : rows) {
    std::printf("%-22s %14.0f %14.0f %9.2fx %9.2fx\n", r.name, r.produce, r.ack,
                rows[0].produce / r.produce, rows[0].ack / r.ack);
  }
  return 0;
}
