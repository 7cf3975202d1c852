#pragma once

#include <string>
#include <vector>

#include "bench/driver.hpp"
#include "bench/options.hpp"

namespace onceq::bench {

// One kill of a leader.
struct failover_run {
  std::string killed;     // the node killed (the topic's / stream's leader)
  double ms = -1;         // SIGKILL -> first acknowledged write sent after it
  std::string via;        // the node that write went through
  std::string killed_as;  // how the killed process ended ("signal 9")
};

// --failover-runs on one system at one durability level (cluster mode).
struct failover_result {
  std::string system;
  std::string version;
  std::string durability;
  std::string setting;
  std::string skipped;  // why it did not run
  std::string error;    // why it stopped early
  std::string clients;  // where the probe's producer connected first
  std::vector<failover_run> runs;
  std::size_t writes = 0;  // writes acknowledged during the probe
  double median_ms = -1;
  double max_ms = -1;
};

// On a fresh cluster: one producer writes one message per request, about
// every 2 ms, with failover retries (run_setup::failover). Each run waits
// for steady writes, kill -9's the leader of the topic's shard / the
// stream, measures the time from the kill to the first acknowledged write
// whose attempt was sent after it, then restarts the node and waits until
// it has caught up. Never throws: failures land in error / skipped.
failover_result run_failover(system_driver& driver, durability d, const bench_options& o);

}  // namespace onceq::bench
