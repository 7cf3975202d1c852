#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace onceq::bench {

// Resource use of a server process, read from /proc while it runs.
struct process_usage {
  std::uint64_t peak_rss_kb = 0;  // VmHWM
  double cpu_seconds = 0;         // utime + stime
};

// One server process that the bench started. Owns it: the destructor stops
// it (SIGTERM, then SIGKILL after a grace period). The child also gets
// SIGKILL if the bench dies (PR_SET_PDEATHSIG), so nothing is left behind.
// Only this object signals its pid. Not thread-safe.
class server_process {
 public:
  server_process() = default;
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;
  ~server_process();

  // Starts argv[0] (looked up in PATH) with stdout and stderr appended to
  // `log`. Throws std::runtime_error when it cannot be started.
  void start(const std::vector<std::string>& argv, const std::filesystem::path& log);

  // Waits until the log holds a line containing `needle` and returns that
  // line; nullopt on timeout or if the process exits first.
  std::optional<std::string> wait_for_log(const std::string& needle,
                                          std::chrono::milliseconds timeout);

  bool running();
  pid_t pid() const { return pid_; }
  const std::filesystem::path& log_path() const { return log_; }

  // Throws std::runtime_error if /proc cannot be read.
  process_usage usage() const;

  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status
  // description ("exit 0", "signal 9", ...). No-op when not running.
  std::string stop(std::chrono::milliseconds grace = std::chrono::seconds(10));

  // SIGKILL (a crash: no shutdown path runs) and reap. Returns the status
  // description; no-op when not running.
  std::string kill_now();

 private:
  pid_t pid_ = -1;
  std::filesystem::path log_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int pick_free_port();

// The first of `count` consecutive TCP ports on 127.0.0.1 that were all free
// a moment ago, below the kernel's ephemeral range (so that the ports
// pick_free_port() hands out never fall inside the block). Throws
// std::runtime_error when none is found.
int pick_free_port_block(int count);

// Runs a short command to completion (bounded by `timeout`) and returns its
// exit code and combined output. Used for version and config probes.
struct command_output {
  int exit_code = -1;
  std::string output;
};
command_output run_command(const std::vector<std::string>& argv,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10));

// The bench process's own CPU seconds (user + system) so far.
double self_cpu_seconds();

// Creates a fresh directory <root>/<prefix>-XXXXXX (mkdtemp). On failure
// returns nullopt and says why in error.
std::optional<std::filesystem::path> make_temp_dir(const std::string& root,
                                                   const std::string& prefix, std::string& error);

}  // namespace onceq::bench
