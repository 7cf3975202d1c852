// docs/openapi.yaml against the router: every route is described, every
// described path and method is routed (but the planned ones below), every
// $ref resolves, and the committed docs/openapi.json is the yaml's copy.

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "router_test_support.hpp"

namespace onceq::http::test {
namespace {

// Described but not routed yet ("GET /v1/..."). Remove an entry when its
// route lands.
const std::set<std::string> k_planned = {};

// Routes that may be called without a token when auth is on (the outbox
// hand-over instead takes only a cluster member's requests).
const std::set<std::string> k_public = {"GET /v1/healthz",
                                        "GET /v1/version",
                                        "GET /v1/openapi.json",
                                        "GET /ui",
                                        "POST /v1/internal/outbox_append",
                                        "POST /v1/internal/meta"};

// Protected routes that never queue behind a shard, so never answer 429.
const std::set<std::string> k_unthrottled = {
    "GET /metrics", "GET /v1/cluster", "POST /v1/cluster/nodes/{id}/drain",
    "POST /v1/cluster/rebalance", "POST /v1/cluster/shards/{shard}/move"};

json load(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

json committed_spec() {
  return load(ONCEQ_SOURCE_DIR "/docs/openapi.json");
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// "GET /v1/healthz", ... for every operation of the spec.
std::set<std::string> described(const json& spec) {
  static const std::set<std::string> methods = {"get",   "put",  "post",    "delete",
                                                "patch", "head", "options", "trace"};
  std::set<std::string> out;
  for (const auto& [path, item] : spec.at("paths").items()) {
    for (const auto& [method, op] : item.items()) {
      if (methods.contains(method)) out.insert(upper(method) + " " + path);
    }
  }
  return out;
}

// Collects every "$ref" value in j.
void refs(const json& j, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "$ref" && v.is_string()) {
        out.push_back(v.get<std::string>());
      } else {
        refs(v, out);
      }
    }
  } else if (j.is_array()) {
    for (const auto& v : j) refs(v, out);
  }
}

TEST(OpenApiTest, EveryRouteIsDescribed) {
  router_harness h;
  const auto spec = described(committed_spec());
  for (const auto& route : h.routes().describe_routes()) {
    EXPECT_TRUE(spec.contains(route)) << route << " is routed but not in docs/openapi.yaml";
  }
}

TEST(OpenApiTest, EveryDescribedOperationIsRoutedOrPlanned) {
  router_harness h;
  const auto routes = h.routes().describe_routes();
  const std::set<std::string> routed(routes.begin(), routes.end());
  for (const auto& op : described(committed_spec())) {
    if (k_planned.contains(op)) {
      EXPECT_FALSE(routed.contains(op)) << op << " is routed now: drop it from k_planned";
      continue;
    }
    EXPECT_TRUE(routed.contains(op)) << op << " is in docs/openapi.yaml but not routed";
  }
}

TEST(OpenApiTest, EveryRefResolves) {
  const auto spec = committed_spec();
  std::vector<std::string> all;
  refs(spec, all);
  ASSERT_FALSE(all.empty());
  for (const auto& r : all) {
    ASSERT_EQ(r.rfind("#/", 0), 0u) << r;
    EXPECT_TRUE(spec.contains(json::json_pointer(r.substr(1)))) << "dangling $ref " << r;
  }
}

// docs/API.md, the users' reference, says the same per endpoint: every
// operation of the spec has its "### METHOD /path" section there, a public
// one says it needs no token, and every other one lists 401 and 403 and,
// but for /metrics, 429.
TEST(OpenApiTest, ApiMdListsAuthAndBackpressureErrorsOnEveryEndpoint) {
  std::ifstream in(ONCEQ_SOURCE_DIR "/docs/API.md");
  ASSERT_TRUE(in.good());
  std::vector<std::pair<std::string, std::string>> sections;  // heading, text
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### ", 0) == 0) {
      sections.emplace_back(line, "");
    } else if (line.rfind("## ", 0) == 0) {
      sections.emplace_back("", "");
    } else if (!sections.empty()) {
      sections.back().second += line + "\n";
    }
  }
  for (const auto& name : described(committed_spec())) {
    const auto space = name.find(' ');
    const std::string method = name.substr(0, space);
    const std::string path = name.substr(space + 1);
    const auto* found = static_cast<const std::pair<std::string, std::string>*>(nullptr);
    for (const auto& sec : sections) {
      const std::string& h = sec.first;
      const auto at = h.find(" " + path);
      const bool whole = at != std::string::npos &&
                         (at + 1 + path.size() == h.size() || h[at + 1 + path.size()] == ' ');
      if (whole && h.find(method) != std::string::npos) found = &sec;
    }
    ASSERT_NE(found, nullptr) << name << " has no section in docs/API.md";
    const std::string& text = found->second;
    if (k_public.contains(name)) {
      EXPECT_NE(text.find("Open (no token)"), std::string::npos) << name;
      continue;
    }
    EXPECT_NE(text.find("401"), std::string::npos) << name;
    EXPECT_NE(text.find("403"), std::string::npos) << name;
    if (k_unthrottled.contains(name)) {
      EXPECT_NE(text.find("never 429"), std::string::npos) << name;
    } else {
      EXPECT_NE(text.find("429"), std::string::npos) << name;
    }
  }
}

// Auth errors and backpressure are part of every protected operation's
// contract, so a client generated from the spec handles them.
TEST(OpenApiTest, ProtectedOperationsListAuthAndBackpressureErrors) {
  const auto spec = committed_spec();
  for (const auto& [path, item] : spec.at("paths").items()) {
    for (const auto& [method, op] : item.items()) {
      if (!op.is_object() || !op.contains("responses")) continue;
      const std::string name = upper(method) + " " + path;
      const auto& res = op.at("responses");
      if (k_public.contains(name)) {
        EXPECT_EQ(op.value("security", json::array({json::object()})), json::array()) << name;
        continue;
      }
      EXPECT_TRUE(res.contains("401")) << name;
      EXPECT_TRUE(res.contains("403")) << name;
      if (!k_unthrottled.contains(name)) {
        EXPECT_TRUE(res.contains("429")) << name;
        EXPECT_TRUE(res.contains("503")) << name;
      }
    }
  }
}

// A YAML flow mapping with a comma in an unquoted value ({description: a, b})
// silently turns into an extra key with a null value; nothing in OpenAPI is
// null.
void nulls(const json& j, const std::string& where, std::vector<std::string>& out) {
  if (j.is_null()) out.push_back(where);
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) nulls(v, where + "/" + k, out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) nulls(j[i], where + "/" + std::to_string(i), out);
  }
}

TEST(OpenApiTest, NoNullValues) {
  std::vector<std::string> found;
  nulls(committed_spec(), "", found);
  EXPECT_TRUE(found.empty()) << "null at " << found.front() << " (quote that YAML value)";
}

// GET /v1/openapi.json serves the committed document, compiled in.
TEST(OpenApiTest, ServedDocumentIsTheCommittedOne) {
  router_harness h;
  auto res = h.get("/v1/openapi.json");
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(res[bhttp::field::content_type], "application/json");
  EXPECT_TRUE(json::parse(res.body()) == committed_spec()) << "rebuild: the embedded copy is stale";
}

TEST(OpenApiTest, CommittedJsonMatchesYaml) {
#ifdef ONCEQ_OPENAPI_FROM_YAML
  // EXPECT_TRUE, not EXPECT_EQ: the diff of two specs is unreadable.
  EXPECT_TRUE(load(ONCEQ_OPENAPI_FROM_YAML) == committed_spec())
      << "docs/openapi.json is stale: regenerate it (command at the top of docs/openapi.yaml)";
#else
  GTEST_SKIP() << "python3 with PyYAML not found at configure time";
#endif
}

}  // namespace
}  // namespace onceq::http::test
