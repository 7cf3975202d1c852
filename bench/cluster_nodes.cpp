#include "bench/cluster_nodes.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace onceq::bench {

void cluster_nodes::add(std::string name, std::vector<std::string> argv,
                        std::filesystem::path log_dir) {
  auto n = std::make_unique<node>();
  n->name = std::move(name);
  n->argv = std::move(argv);
  n->log_dir = std::move(log_dir);
  nodes_.push_back(std::move(n));
}

void cluster_nodes::start_all(const std::string& ready_line, std::chrono::milliseconds timeout) {
  // All processes first, then the waits: the nodes of a cluster wait for
  // each other before they say they are ready.
  for (auto& n : nodes_) {
    ++n->starts;
    n->proc.start(n->argv, n->log_dir / fmt::format("{}.log", n->name));
  }
  for (auto& n : nodes_) {
    if (!n->proc.wait_for_log(ready_line, timeout)) {
      throw std::runtime_error(
          fmt::format("{} did not get ready; see {}", n->name, n->proc.log_path().string()));
    }
  }
}

std::string cluster_nodes::start(std::size_t i, const std::string& ready_line,
                                 std::chrono::milliseconds timeout) {
  auto& n = *nodes_.at(i);
  ++n.starts;
  const auto log =
      n.starts == 1 ? fmt::format("{}.log", n.name) : fmt::format("{}.{}.log", n.name, n.starts);
  n.proc.start(n.argv, n.log_dir / log);
  auto line = n.proc.wait_for_log(ready_line, timeout);
  if (!line) {
    throw std::runtime_error(
        fmt::format("{} did not get ready; see {}", n.name, n.proc.log_path().string()));
  }
  return *line;
}

std::string cluster_nodes::kill(std::size_t i) {
  return nodes_.at(i)->proc.kill_now();
}

std::string cluster_nodes::stop_all() {
  std::string out;
  for (auto& n : nodes_) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}: {}", n->name, n->proc.stop());
  }
  return out;
}

process_usage cluster_nodes::usage() const {
  process_usage sum;
  for (const auto& n : nodes_) {
    if (n->proc.pid() <= 0) continue;
    const auto u = n->proc.usage();
    sum.cpu_seconds += u.cpu_seconds;
    sum.peak_rss_kb += u.peak_rss_kb;
  }
  return sum;
}

}  // namespace onceq::bench
