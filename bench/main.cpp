// onceq-bench: the same workloads against onceq, NATS JetStream and Redis
// Streams, each server started (and stopped) by the bench on loopback.
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>

#include "bench/failover.hpp"
#include "bench/nats_driver.hpp"
#include "bench/onceq_driver.hpp"
#include "bench/options.hpp"
#include "bench/redis_driver.hpp"
#include "bench/report.hpp"
#include "bench/workload.hpp"

#ifdef ONCEQ_HAVE_COMMIT_HEADER
#include "onceq_commit.hpp"  // generated at build time: ONCEQ_COMMIT
#else
#define ONCEQ_COMMIT "unknown"
#endif

namespace {

using namespace onceq::bench;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string machine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return fmt::format("{} CPUs ({})", sysconf(_SC_NPROCESSORS_ONLN), model);
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  const auto parsed = parse_options(argc, argv, error);
  if (!parsed) {
    if (error.empty()) return 0;
    std::fprintf(stderr, "onceq-bench: %s\n", error.c_str());
    return 2;
  }
  const bench_options& o = *parsed;
  // A server that closes a connection must not kill the bench.
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::unique_ptr<system_driver>> drivers;
  for (const auto& s : o.systems) {
    if (s == "onceq") drivers.push_back(make_onceq_driver(o));
    if (s == "nats") drivers.push_back(make_nats_driver(o));
    if (s == "redis") drivers.push_back(make_redis_driver(o));
  }

  report_context ctx;
  ctx.command = o.command_line;
  ctx.started_at = utc_now();
  ctx.machine = machine();
  ctx.bench_commit = ONCEQ_COMMIT;

  std::vector<run_result> runs;
  for (const auto kind : expand_workloads(o)) {
    for (const auto d : o.durabilities) {
      for (auto& drv : drivers) {
        runs.push_back(run_workload(*drv, kind, d, o));
        if (!runs.back().version.empty()) ctx.versions[runs.back().system] = runs.back().version;
      }
    }
  }
  std::vector<failover_result> failovers;
  if (o.failover_runs > 0) {
    for (const auto d : o.durabilities) {
      for (auto& drv : drivers) {
        failovers.push_back(run_failover(*drv, d, o));
        if (!failovers.back().version.empty()) {
          ctx.versions[failovers.back().system] = failovers.back().version;
        }
      }
    }
  }
  for (auto& drv : drivers) {
    if (!ctx.versions.contains(std::string(drv->name()))) {
      ctx.versions[std::string(drv->name())] = drv->version();
    }
  }

  const std::string md = render_markdown(runs, failovers, o, ctx);
  std::fputs(md.c_str(), stdout);
  int rc = 0;
  if (!o.out_md.empty() && !write_file(o.out_md, md)) {
    std::fprintf(stderr, "onceq-bench: cannot write %s\n", o.out_md.c_str());
    rc = 1;
  }
  if (!o.out_json.empty() &&
      !write_file(o.out_json, render_json(runs, failovers, o, ctx).dump(2) + "\n")) {
    std::fprintf(stderr, "onceq-bench: cannot write %s\n", o.out_json.c_str());
    rc = 1;
  }
  for (const auto& r : runs) {
    if (!r.error.empty()) rc = rc == 0 ? 3 : rc;
  }
  for (const auto& f : failovers) {
    if (!f.error.empty()) rc = rc == 0 ? 3 : rc;
  }
  return rc;
}
