#include "cluster/config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace onceq::cluster {

namespace {

error bad(std::string_view source, std::string_view why) {
  return make_error(errc::invalid_argument, fmt::format("{}: {}", source, why));
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > k_max_node_id) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

struct host_port {
  std::string host;
  std::uint16_t port = 0;
};

// "HOST:PORT", or "[IPv6]:PORT" when ipv6 is allowed; PORT 1..65535 (peers
// must be able to dial it, so 0 is refused). The reason when it is neither.
result<host_port> parse_address(std::string_view v, bool ipv6) {
  std::string_view host, port;
  if (!v.empty() && v.front() == '[') {
    if (!ipv6) {
      return make_error(errc::invalid_argument,
                        "expected HOST:PORT with an IPv4 address or a name (raft's TCP transport "
                        "has no IPv6)");
    }
    auto close = v.find(']');
    if (close == std::string_view::npos || close + 1 >= v.size() || v[close + 1] != ':') {
      return make_error(errc::invalid_argument, "expected HOST:PORT or [IPv6]:PORT");
    }
    host = v.substr(1, close - 1);
    port = v.substr(close + 2);
  } else {
    auto colon = v.rfind(':');
    if (colon == std::string_view::npos) {
      return make_error(errc::invalid_argument, "expected HOST:PORT");
    }
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return make_error(errc::invalid_argument,
                        ipv6 ? "expected HOST:PORT or [IPv6]:PORT"
                             : "expected HOST:PORT with an IPv4 address or a name (raft's TCP "
                               "transport has no IPv6)");
    }
  }
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (host.empty() || port.empty() || ec != std::errc{} || end != port.data() + port.size() ||
      p < 1 || p > 65535) {
    return make_error(errc::invalid_argument, "expected HOST:PORT with PORT 1..65535");
  }
  if (host.find_first_of(" \t/") != std::string_view::npos) {
    return make_error(errc::invalid_argument, "the host may not hold spaces or '/'");
  }
  return host_port{std::string(host), static_cast<std::uint16_t>(p)};
}

// The string value of key in t; an error naming where when it is missing or
// not a string.
result<std::string> string_field(const toml::table& t, std::string_view key,
                                 std::string_view where) {
  const toml::node* n = t.get(key);
  if (n == nullptr)
    return make_error(errc::invalid_argument, fmt::format("{}: needs {}", where, key));
  auto s = n->value_exact<std::string>();
  if (!s) {
    return make_error(errc::invalid_argument, fmt::format("{}: {}: expected a string", where, key));
  }
  return *s;
}

}  // namespace

result<cluster_config> cluster_config::parse(std::string_view toml_text, std::string_view source,
                                             std::string_view self_id) {
  toml::table tbl;
  try {
    tbl = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    return make_error(errc::invalid_argument,
                      fmt::format("{}:{}:{}: {}", source, at.line, at.column, e.description()));
  }
  std::size_t replicas = k_default_replicas;
  std::uint64_t dead_after_ms = k_default_dead_after_ms;
  for (const auto& [k, v] : tbl) {
    if (k.str() == "replicas") {
      const auto n = v.value<std::int64_t>();
      if (!v.is_integer() || !n || *n < 1 || *n > static_cast<std::int64_t>(k_max_replicas)) {
        return bad(source,
                   fmt::format("replicas: expected an integer from 1 to {}", k_max_replicas));
      }
      replicas = static_cast<std::size_t>(*n);
    } else if (k.str() == "dead_after_ms") {
      const auto n = v.value<std::int64_t>();
      if (!v.is_integer() || !n || *n < 0) {
        return bad(source, "dead_after_ms: expected an integer >= 0 (0: never)");
      }
      dead_after_ms = static_cast<std::uint64_t>(*n);
    } else if (k.str() != "node") {
      return bad(source, fmt::format("{}: unknown key (a cluster file holds replicas, "
                                     "dead_after_ms and [[node]] tables)",
                                     k.str()));
    }
  }
  const toml::array* arr = tbl["node"].as_array();
  if (tbl.contains("node") && (arr == nullptr || !arr->is_array_of_tables())) {
    return bad(source, "node: expected [[node]] tables");
  }
  if (arr == nullptr || arr->empty()) return bad(source, "needs at least one [[node]]");
  if (arr->size() > k_max_nodes) {
    return bad(source, fmt::format("{} nodes; at most {}", arr->size(), k_max_nodes));
  }

  cluster_config c;
  c.replicas_ = replicas;
  c.dead_after_ms_ = dead_after_ms;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const toml::table& t = *(*arr)[i].as_table();
    const std::string where = fmt::format("{}: node {}", source, i + 1);
    for (const auto& [k, v] : t) {
      if (k.str() != "id" && k.str() != "http" && k.str() != "raft") {
        return make_error(
            errc::invalid_argument,
            fmt::format("{}: {}: unknown key (expected id, http, raft)", where, k.str()));
      }
    }
    auto id = string_field(t, "id", where);
    if (!id.ok()) return std::move(id).err();
    if (!valid_id(*id)) {
      return make_error(errc::invalid_argument,
                        fmt::format("{}: id \"{}\": expected 1..{} characters of A-Z a-z 0-9 _ . -",
                                    where, *id, k_max_node_id));
    }
    const std::string named = fmt::format("{}: node {}", source, *id);
    auto http = string_field(t, "http", named);
    if (!http.ok()) return std::move(http).err();
    auto raft = string_field(t, "raft", named);
    if (!raft.ok()) return std::move(raft).err();
    auto h = parse_address(*http, true);
    if (!h.ok()) {
      return make_error(errc::invalid_argument,
                        fmt::format("{}: http \"{}\": {}", named, *http, h.err().message));
    }
    auto r = parse_address(*raft, false);
    if (!r.ok()) {
      return make_error(errc::invalid_argument,
                        fmt::format("{}: raft \"{}\": {}", named, *raft, r.err().message));
    }
    for (const node_config& other : c.nodes_) {
      if (other.id == *id) {
        return make_error(errc::invalid_argument,
                          fmt::format("{}: node id \"{}\" appears twice", source, *id));
      }
    }
    c.nodes_.push_back(
        node_config{std::move(*id), std::move(*http), h->host, h->port, r->host, r->port});
  }

  // No address may serve twice: every http and raft address of the file is
  // distinct (same host text and port).
  struct use {
    std::string_view node, what, host;
    std::uint16_t port;
  };
  std::vector<use> uses;
  for (std::size_t i = 0; i < c.nodes_.size(); ++i) {
    uses.push_back({c.nodes_[i].id, "http", c.nodes_[i].http_host, c.nodes_[i].http_port});
    uses.push_back({c.nodes_[i].id, "raft", c.nodes_[i].raft_host, c.nodes_[i].raft_port});
  }
  for (std::size_t i = 0; i < uses.size(); ++i) {
    for (std::size_t j = i + 1; j < uses.size(); ++j) {
      if (uses[i].host == uses[j].host && uses[i].port == uses[j].port) {
        return bad(source, fmt::format("node {} {} and node {} {} share the address {}:{}",
                                       uses[i].node, uses[i].what, uses[j].node, uses[j].what,
                                       uses[i].host, uses[i].port));
      }
    }
  }

  auto self = std::find_if(c.nodes_.begin(), c.nodes_.end(),
                           [&](const node_config& n) { return n.id == self_id; });
  if (self == c.nodes_.end()) {
    return bad(source,
               fmt::format("this node's id \"{}\" (--node-id) is not in the file", self_id));
  }
  c.self_ = static_cast<std::size_t>(self - c.nodes_.begin());
  return c;
}

result<cluster_config> cluster_config::load(const std::string& path, std::string_view self_id) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::invalid_argument, fmt::format("{}: cannot read the file", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return make_error(errc::invalid_argument, fmt::format("{}: cannot read the file", path));
  }
  return parse(text.str(), path, self_id);
}

std::optional<raft_id> cluster_config::raft_id_of(std::string_view node_id) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].id == node_id) return static_cast<raft_id>(i + 1);
  }
  return std::nullopt;
}

const node_config* cluster_config::node_of(raft_id id) const noexcept {
  if (id == 0 || id > nodes_.size()) return nullptr;
  return &nodes_[id - 1];
}

std::string cluster_config::raft_address(const node_config& n, unsigned group) const {
  return fmt::format("{}:{}", n.raft_host, static_cast<unsigned>(n.raft_port) + group);
}

raft_id cluster_config::preferred_leader(unsigned group) const noexcept {
  return static_cast<raft_id>(group % nodes_.size()) + 1;
}

result<void> cluster_config::check_ports(unsigned groups) const {
  if (groups == 0) return make_error(errc::invalid_argument, "needs at least one group");
  for (const node_config& n : nodes_) {
    if (static_cast<unsigned>(n.raft_port) + groups - 1 > 65535) {
      return make_error(
          errc::invalid_argument,
          fmt::format("node {}: raft port {} + {} groups passes 65535", n.id, n.raft_port, groups));
    }
  }
  auto in_range = [groups](const node_config& n, unsigned port) {
    return port >= n.raft_port && port < static_cast<unsigned>(n.raft_port) + groups;
  };
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const node_config& a = nodes_[i];
    for (std::size_t j = 0; j < nodes_.size(); ++j) {
      const node_config& b = nodes_[j];
      if (j > i && a.raft_host == b.raft_host &&
          (in_range(a, b.raft_port) || in_range(b, a.raft_port))) {
        return make_error(errc::invalid_argument,
                          fmt::format("nodes {} and {}: raft ports {}..{} and {}..{} on {} overlap "
                                      "({} groups, one port each)",
                                      a.id, b.id, a.raft_port, a.raft_port + groups - 1,
                                      b.raft_port, b.raft_port + groups - 1, a.raft_host, groups));
      }
      if (b.http_host == a.raft_host && in_range(a, b.http_port)) {
        return make_error(
            errc::invalid_argument,
            fmt::format("node {}: raft ports {}..{} ({} groups) take node {}'s http "
                        "port {}",
                        a.id, a.raft_port, a.raft_port + groups - 1, groups, b.id, b.http_port));
      }
    }
  }
  return {};
}

}  // namespace onceq::cluster
