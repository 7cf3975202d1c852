#pragma once

#include <cstddef>
#include <string>

#include "bench/cluster_nodes.hpp"
#include "bench/driver.hpp"
#include "bench/process.hpp"

namespace onceq::bench {

// What a driver whose system runs as one server or, with --cluster N, as N
// nodes (onceq, NATS) shares: which processes are measured, stopped and
// killed. The driver starts them.
class clustered_driver : public system_driver, public cluster_control {
 public:
  server_process& process() override { return clustered_ ? nodes_.process(0) : proc_; }
  process_usage usage() override { return clustered_ ? nodes_.usage() : proc_.usage(); }
  cluster_control* cluster() override { return clustered_ ? this : nullptr; }

  std::string stop() override {
    if (!clustered_) return proc_.stop();
    auto out = nodes_.stop_all();
    nodes_ = cluster_nodes{};
    return out;
  }

  // cluster_control
  std::string kill(std::size_t i) override { return nodes_.kill(i); }

 protected:
  explicit clustered_driver(bool clustered) : clustered_(clustered) {}

  server_process proc_;  // one server
  cluster_nodes nodes_;  // --cluster N

 private:
  bool clustered_;
};

}  // namespace onceq::bench
