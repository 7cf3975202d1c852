#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "bench/failover.hpp"
#include "bench/options.hpp"
#include "bench/workload.hpp"

namespace onceq::bench {

// Facts about the run that go at the top of every report.
struct report_context {
  std::string command;
  std::string started_at;  // UTC, ISO 8601
  std::string machine;     // CPU count and model
  std::string bench_commit;
  std::map<std::string, std::string> versions;  // system -> server version
};

// The Markdown report: context, one row per run, onceq/peer ratios, and the
// issue's targets checked against this run's numbers; in cluster mode
// (--cluster N) the failover runs and onceq / JetStream-RN on the cluster
// measures instead of the targets.
std::string render_markdown(const std::vector<run_result>& runs,
                            const std::vector<failover_result>& failovers, const bench_options& o,
                            const report_context& ctx);

// The same as JSON (every field of every run, plus ratios and targets).
nlohmann::json render_json(const std::vector<run_result>& runs,
                           const std::vector<failover_result>& failovers, const bench_options& o,
                           const report_context& ctx);

}  // namespace onceq::bench
