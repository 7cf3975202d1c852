#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/process.hpp"

namespace onceq::bench {

// The server processes of one cluster run (--cluster N), one per node. A
// node can be killed (SIGKILL) and started again with the same command line,
// so with the same data dir and ports; each start logs to a file of its own
// (<dir>/<name>.log, then <name>.2.log, ...), so that waiting for the ready
// line never finds the previous start's. Owns the processes: the destructor
// stops them. Not thread-safe.
class cluster_nodes {
 public:
  // Adds node `name`, run as `argv`, its logs in `log_dir`. Does not start it.
  void add(std::string name, std::vector<std::string> argv, std::filesystem::path log_dir);

  // Starts every node, then waits for each one's log to show `ready_line`.
  // Throws std::runtime_error naming the node and its log on a timeout.
  void start_all(const std::string& ready_line, std::chrono::milliseconds timeout);
  // Starts node i (again) and returns its ready line; throws as start_all.
  std::string start(std::size_t i, const std::string& ready_line,
                    std::chrono::milliseconds timeout);

  // SIGKILL node i; returns how it ended ("signal 9").
  std::string kill(std::size_t i);
  // Stops every node (SIGTERM, then SIGKILL); returns "n1: exit 0, n2: ...".
  std::string stop_all();

  // CPU seconds and peak RSS (VmHWM), summed over the running nodes.
  process_usage usage() const;

  std::size_t size() const { return nodes_.size(); }
  const std::string& name(std::size_t i) const { return nodes_.at(i)->name; }
  server_process& process(std::size_t i) { return nodes_.at(i)->proc; }

 private:
  struct node {
    std::string name;
    std::vector<std::string> argv;
    std::filesystem::path log_dir;
    int starts = 0;
    server_process proc;
  };
  std::vector<std::unique_ptr<node>> nodes_;
};

}  // namespace onceq::bench
