#include "cluster_api.hpp"

#include <thread>

#include "request_bodies.hpp"

namespace onceq::itest {

using json = nlohmann::json;

cluster_api::cluster_api(const std::vector<cluster_member>& members,
                         std::chrono::milliseconds timeout, std::uint64_t seed)
    : rng_(seed) {
  for (const auto& m : members) {
    clients_.push_back(std::make_unique<host_client>(m.host, m.http_port, timeout));
  }
}

std::vector<int> cluster_api::all() const {
  std::vector<int> out;
  for (int i = 0; i < size(); ++i) out.push_back(i);
  return out;
}

std::vector<int> cluster_api::all_but(int node) const {
  std::vector<int> out;
  for (int i = 0; i < size(); ++i) {
    if (i != node) out.push_back(i);
  }
  return out;
}

std::optional<http_response> cluster_api::send(int i, std::string_view method,
                                               std::string_view target, const json& body,
                                               const header_list& headers) {
  last_node_ = i;
  auto& c = *clients_.at(static_cast<std::size_t>(i));
  try {
    return c.request(method, target, body.is_null() ? std::string() : body.dump(), headers);
  } catch (const std::exception&) {
    c.close();
    return std::nullopt;
  }
}

std::optional<http_response> cluster_api::send_retry(const std::vector<int>& nodes,
                                                     std::string_view method,
                                                     std::string_view target, const json& body,
                                                     const header_list& headers,
                                                     std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int avoid = -1;
  for (;;) {
    std::vector<int> choice;
    for (int n : nodes) {
      if (n != avoid) choice.push_back(n);
    }
    if (choice.empty()) choice = nodes;
    const int i = choice[rng_() % choice.size()];
    auto r = send(i, method, target, body, headers);
    if (r && r->status != 503 && r->status != 429) return r;
    if (std::chrono::steady_clock::now() > deadline) return r;
    avoid = i;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::map<std::string, int> cluster_api::drain(const std::vector<int>& nodes, std::string_view topic,
                                              std::string_view group,
                                              std::chrono::milliseconds limit,
                                              std::vector<std::string>& errors) {
  std::map<std::string, int> delivered;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const std::string owner = "drainer";
  int quiet = 0;
  drained_ = false;
  while (std::chrono::steady_clock::now() < deadline && quiet < 3) {
    auto r = send_retry(nodes, "POST", "/v1/consume",
                        {{"topic", topic},
                         {"group", group},
                         {"owner", owner},
                         {"max_messages", 50},
                         {"wait_ms", 200},
                         {"lease_ms", 10000}},
                        {}, std::chrono::seconds(5));
    if (!r) continue;
    if (r->status != 200) {
      errors.push_back("consume: " + std::to_string(r->status) + " " + r->body);
      continue;
    }
    const auto msgs = r->ndjson();
    for (const auto& m : msgs) {
      ++delivered[m.at("value").get<std::string>()];
      auto a = send_retry(nodes, "POST", "/v1/ack", ack_body(topic, group, owner, m, nullptr), {},
                          std::chrono::seconds(10));
      if (!a || a->status != 204) {
        errors.push_back("ack " + m.dump() + ": " +
                         (a ? std::to_string(a->status) + " " + a->body : "no answer"));
      }
    }
    bool empty = false;
    auto t = send_retry(nodes, "GET", "/v1/topics/" + std::string(topic), nullptr, {},
                        std::chrono::seconds(5));
    if (t && t->status == 200) {
      const auto j = t->json();
      if (j.at("groups").contains(group)) {
        const auto& g = j.at("groups").at(std::string(group));
        empty = g.at("backlog") == 0 && g.at("inflight") == 0;
      }
    }
    quiet = empty && msgs.empty() ? quiet + 1 : 0;
  }
  drained_ = quiet >= 3;
  return delivered;
}

json cluster_api::produce_body(std::string_view topic, const std::string& id,
                               const std::string& key) {
  return {{"topic", topic}, {"key", id}, {"value", id}, {"envelope", {{"idempotency_key", key}}}};
}

json cluster_api::ack_body(std::string_view topic, std::string_view group, std::string_view owner,
                           const json& message, const json& result) {
  json body = delivery_body(topic, group, owner, message, {{"attempts", message.at("attempts")}});
  if (!result.is_null()) body["result"] = result;
  return body;
}

::testing::AssertionResult cluster_api::create_topic(std::string_view topic, std::string_view group,
                                                     const nlohmann::json& settings) {
  nlohmann::json body = {{"name", topic}, {"partitions", 2}, {"lease_ms", 10000}};
  body.update(settings);
  auto created = send_retry(all(), "POST", "/v1/topics", body, {}, std::chrono::seconds(30));
  if (!created || (created->status != 201 && created->status != 200)) {
    return ::testing::AssertionFailure()
           << "create " << topic << ": " << (created ? created->body : "no answer");
  }
  if (group.empty()) return ::testing::AssertionSuccess();
  auto consumed = send_retry(all(), "POST", "/v1/consume",
                             consume_body(topic, group, "init", 1, {{"wait_ms", 0}}));
  if (!consumed || consumed->status != 200) {
    return ::testing::AssertionFailure()
           << "first consume of " << topic << ": " << (consumed ? consumed->body : "no answer");
  }
  return ::testing::AssertionSuccess();
}

}  // namespace onceq::itest
