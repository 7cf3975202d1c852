#include "cluster_support.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "http_client.hpp"

namespace onceq::itest {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string cluster_file_text(const std::vector<cluster_member>& members, std::string_view head) {
  std::ostringstream out;
  out << head;
  if (!head.empty()) out << "\n";
  for (const auto& m : members) {
    out << "[[node]]\n"
        << "id = \"" << m.id << "\"\n"
        << "http = \"" << m.host << ":" << m.http_port << "\"\n"
        << "raft = \"" << m.host << ":" << m.raft_port << "\"\n\n";
  }
  return out.str();
}

namespace {

// Whether 127.0.0.1:port can be bound right now (no SO_REUSEADDR: a port
// in TIME_WAIT counts as taken).
bool port_free(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// The low end of the kernel's ephemeral port range (outgoing connections
// take ports from there up).
int ephemeral_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  in >> low;
  return low;
}

}  // namespace

std::vector<cluster_member> free_loopback_members(int n, std::uint64_t seed) {
  // Member i takes the block base + i * 32: http at +0, raft at +16 ..
  // +16 + k_max_test_groups - 1.
  constexpr int k_block = 32;
  constexpr int k_raft_offset = 16;
  static_assert(k_raft_offset + k_max_test_groups <= k_block);
  const int low = 12000;
  const int high = std::max(low + 1000, ephemeral_low()) - n * k_block;
  std::mt19937_64 rng(
      seed ^ static_cast<std::uint64_t>(::getpid()) ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = low + static_cast<int>(rng() % static_cast<std::uint64_t>(high - low));
    std::vector<cluster_member> out;
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      const int b = base + i * k_block;
      cluster_member m{"n" + std::to_string(i + 1), "127.0.0.1", static_cast<std::uint16_t>(b),
                       static_cast<std::uint16_t>(b + k_raft_offset)};
      ok = port_free(m.http_port);
      for (int g = 0; g < k_max_test_groups && ok; ++g) {
        ok = port_free(static_cast<std::uint16_t>(m.raft_port + g));
      }
      out.push_back(std::move(m));
    }
    if (ok) return out;
  }
  throw std::runtime_error("free_loopback_members: no free block of ports found");
}

const cluster_shard_status* cluster_status::shard_of_topic(std::string_view topic) const {
  for (const auto& s : shards) {
    for (const auto& t : s.topics) {
      if (t == topic) return &s;
    }
  }
  return nullptr;
}

const cluster_node_status* cluster_status::node_status(std::string_view id) const {
  for (const auto& n : nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

const cluster_shard_status* cluster_status::shard(unsigned s) const {
  for (const auto& x : shards) {
    if (x.shard == s) return &x;
  }
  return nullptr;
}

std::optional<cluster_status> parse_cluster_status(const http_response& r) {
  if (r.status != 200) return std::nullopt;
  try {
    const auto j = r.json();
    cluster_status out;
    out.node = j.at("node").get<std::string>();
    for (const auto& n : j.value("nodes", nlohmann::json::array())) {
      out.nodes.push_back({n.value("id", ""), n.value("http", ""), n.value("raft", ""),
                           n.value("reachable", false), n.value("state", ""),
                           n.value("replicas", std::size_t{0})});
    }
    for (const auto& s : j.at("shards")) {
      cluster_shard_status x;
      x.shard = s.at("shard").get<unsigned>();
      x.leader = s.at("leader").is_string() ? s.at("leader").get<std::string>() : std::string();
      x.term = s.value("term", std::uint64_t{0});
      x.commit_index = s.value("commit_index", std::uint64_t{0});
      x.applied_index = s.value("applied_index", std::uint64_t{0});
      x.last_index = s.value("last_index", std::uint64_t{0});
      x.failure = s.value("failure", std::string());
      for (const auto& t : s.value("topics", nlohmann::json::array())) {
        x.topics.push_back(t.get<std::string>());
      }
      for (const auto& n : s.value("replicas", nlohmann::json::array())) {
        x.replicas.push_back(n.get<std::string>());
      }
      x.config_version = s.value("config_version", std::uint64_t{0});
      x.held_here = s.value("held_here", false);
      for (const auto& n : s.value("voters", nlohmann::json::array())) {
        x.voters.push_back(n.get<std::string>());
      }
      if (s.contains("moving") && s.at("moving").is_object()) {
        const auto& m = s.at("moving");
        x.moving_from = m.at("from").is_string() ? m.at("from").get<std::string>() : std::string();
        x.moving_to = m.value("to", "");
        x.moving_state = m.value("state", "");
      }
      out.shards.push_back(std::move(x));
    }
    if (j.contains("meta")) {
      const auto& m = j.at("meta");
      out.meta_leader = m.value("leader", "");
      out.placed = m.value("placed", false);
      out.moves_started = m.value("moves_started", std::uint64_t{0});
      out.moves_finished = m.value("moves_finished", std::uint64_t{0});
      out.moves_cancelled = m.value("moves_cancelled", std::uint64_t{0});
    }
    return out;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<http_response> request_once(const std::string& host, std::uint16_t port,
                                          std::string_view method, std::string_view target,
                                          std::string_view body, const header_list& headers,
                                          std::chrono::milliseconds timeout) {
  try {
    host_client c(host, port, timeout);
    return c.request(method, target, body, headers);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void local_cluster::write_file(std::size_t count) {
  const std::vector<cluster_member> listed(opts_.members.begin(),
                                           opts_.members.begin() + static_cast<long>(count));
  const std::string tmp = file_ + ".tmp";
  {
    std::ofstream f(tmp);
    f << cluster_file_text(listed, opts_.file_head);
    if (!f) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, file_);
}

void local_cluster::add_args(std::size_t i, const std::vector<std::string>& args) {
  auto all = nodes_.at(i)->extra_args();
  all.insert(all.end(), args.begin(), args.end());
  nodes_.at(i)->set_extra_args(std::move(all));
}

cli_run run_cli(const std::string& cli_path, std::uint16_t port, const std::string& args) {
  const std::string cmd =
      "'" + cli_path + "' --url http://127.0.0.1:" + std::to_string(port) + " " + args + " 2>&1";
  cli_run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

local_cluster::local_cluster(options opts) : opts_(std::move(opts)) {
  if (opts_.root.empty()) {
    std::string tmpl = "/tmp/onceq-cluster-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    }
    root_ = tmpl;
    temp_root_ = true;
  } else {
    root_ = opts_.root;
    fs::create_directories(root_);
  }
  file_ = root_ + "/cluster.toml";
  write_file(std::min(opts_.file_count, opts_.members.size()));
  for (std::size_t i = 0; i < opts_.members.size(); ++i) {
    const auto& m = opts_.members[i];
    server_process::options o;
    o.onceqd_path = opts_.onceqd;
    o.fsync = opts_.fsync;
    o.data_dir = i < opts_.data_dirs.size() && !opts_.data_dirs[i].empty() ? opts_.data_dirs[i]
                                                                           : root_ + "/" + m.id;
    o.log_path = root_ + "/" + m.id + ".log";
    o.listen_args = {"--cluster", file_, "--node-id", m.id};
    if (opts_.shards > 0) {
      o.extra_args = {"--shards", std::to_string(opts_.shards)};
    }
    o.extra_args.insert(o.extra_args.end(), opts_.extra_args.begin(), opts_.extra_args.end());
    if (i < opts_.command_prefixes.size()) o.command_prefix = opts_.command_prefixes[i];
    o.ready_probe = [](const std::string& host, std::uint16_t port) {
      auto r = request_once(host, port, "GET", "/v1/cluster", {}, {}, 2s);
      return r && r->status == 200;
    };
    o.start_timeout = opts_.start_timeout;
    o.defer_start = true;
    nodes_.push_back(std::make_unique<server_process>(std::move(o)));
  }
  try {
    const std::size_t started = std::min(opts_.start_count, nodes_.size());
    for (std::size_t i = 0; i < started; ++i) nodes_[i]->spawn();
    for (std::size_t i = 0; i < started; ++i) nodes_[i]->await_ready();
  } catch (...) {
    std::cerr << "local_cluster: a node did not start; stderr tails:\n" << log_tails() << "\n";
    for (auto& n : nodes_) n->kill9();
    keep_ = keep_ || std::getenv("ONCEQ_IT_KEEP_TMP") != nullptr;
    nodes_.clear();
    if (temp_root_ && !keep_) {
      std::error_code ignored;
      fs::remove_all(root_, ignored);
    }
    throw;
  }
}

local_cluster::~local_cluster() {
  for (auto& n : nodes_) n->kill9();
  nodes_.clear();
  if (temp_root_ && !keep_ && std::getenv("ONCEQ_IT_KEEP_TMP") == nullptr) {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  } else if (temp_root_) {
    std::cerr << "local_cluster: kept " << root_ << "\n";
  }
}

int local_cluster::index_of(std::string_view id) const {
  for (std::size_t i = 0; i < opts_.members.size(); ++i) {
    if (opts_.members[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

std::optional<http_response> local_cluster::request(std::size_t i, std::string_view method,
                                                    std::string_view target, std::string_view body,
                                                    const header_list& headers,
                                                    std::chrono::milliseconds timeout) {
  const auto& m = member(i);
  return request_once(m.host, m.http_port, method, target, body, headers, timeout);
}

std::optional<cluster_status> local_cluster::status(std::size_t i,
                                                    std::chrono::milliseconds timeout) {
  auto r = request(i, "GET", "/v1/cluster", {}, {}, timeout);
  if (!r) return std::nullopt;
  return parse_cluster_status(*r);
}

std::string local_cluster::leader_of(std::string_view topic) {
  for (std::size_t i = 0; i < size(); ++i) {
    if (!nodes_[i]->running()) continue;
    auto s = status(i, 1s);
    if (!s) continue;
    const auto* sh = topic.empty() ? s->shard(0) : s->shard_of_topic(topic);
    if (sh != nullptr && !sh->leader.empty()) return sh->leader;
  }
  return {};
}

bool local_cluster::wait_settled(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < size(); ++i) {
      if (!nodes_[i]->running()) continue;
      auto s = status(i, 1s);
      if (!s || !s->placed || s->shards.empty()) continue;
      bool ok = true;
      for (const auto& sh : s->shards) {
        ok = ok && !sh.replicas.empty() && sh.leader == sh.replicas.front() && sh.moving_to.empty();
      }
      if (ok) return true;
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

std::string local_cluster::wait_for_leader(std::string_view topic,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < size(); ++i) {
      if (!nodes_[i]->running()) continue;
      auto s = status(i, 1s);
      if (!s || s->shards.empty()) continue;
      // Leader of every shard named, or of the topic's.
      std::vector<const cluster_shard_status*> wanted;
      if (topic.empty()) {
        for (const auto& sh : s->shards) wanted.push_back(&sh);
      } else if (const auto* sh = s->shard_of_topic(topic)) {
        wanted.push_back(sh);
      }
      if (wanted.empty()) continue;
      bool ok = true;
      for (const auto* sh : wanted) {
        const int l = index_of(sh->leader);
        if (l < 0 || !nodes_[static_cast<std::size_t>(l)]->running()) {
          ok = false;
          break;
        }
        auto ls = status(static_cast<std::size_t>(l), 1s);
        const auto* own = ls ? ls->shard(sh->shard) : nullptr;
        if (own == nullptr || own->leader != sh->leader) ok = false;
      }
      if (!ok) continue;
      if (topic.empty()) {
        const auto* first = s->shard(0);
        return first != nullptr ? first->leader : wanted.front()->leader;
      }
      return wanted.front()->leader;
    }
    std::this_thread::sleep_for(100ms);
  }
  return {};
}

std::string local_cluster::log_tails(std::size_t max_bytes_each) const {
  std::string out;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    out += "---- " + opts_.members[i].id + " stderr ----\n" + nodes_[i]->log_tail(max_bytes_each) +
           "\n";
  }
  return out;
}

}  // namespace onceq::itest
