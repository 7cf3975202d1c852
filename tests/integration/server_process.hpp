#pragma once

// Runs a real onceqd as a child process for one test: a fresh data
// directory under /tmp, an ephemeral port on 127.0.0.1, stop by SIGTERM or
// SIGKILL (by its own PID only), restart on the same data directory. The
// destructor kills a still-running server and removes the directory, also
// when the test failed (and then prints the tail of the server's stderr).
//
// A cluster node is the same with other options (cluster_support.hpp):
// listen_args "--cluster FILE --node-id ID" instead of --listen, a
// ready_probe asking
// /v1/cluster instead of /v1/healthz, and (for a node in a network
// namespace) a command_prefix "ip netns exec NS": ip execs onceqd in place,
// so pid() is still onceqd's own.
//
// Thread safety: none; drive it from the test's main thread (the child is
// tied to the forking thread with PR_SET_PDEATHSIG).

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace onceq::itest {

class server_process {
 public:
  struct options {
    std::string fsync = "always";         // --fsync
    std::vector<std::string> extra_args;  // appended to the command line
    // The server binary; "" = the build's onceqd (ONCEQD_PATH).
    std::string onceqd_path;
    // The data directory, created if missing and kept afterwards; "" = a
    // fresh one inside the temp root (removed with it).
    std::string data_dir;
    bool tls = false;  // extra_args make it serve HTTPS: check readiness over TLS
    // What tells onceqd where to listen ({"--cluster", FILE, "--node-id",
    // ID} for a cluster node). Default: {"--listen", "127.0.0.1:0"}.
    std::vector<std::string> listen_args = {"--listen", "127.0.0.1:0"};
    // Run before the server binary (argv[0] an absolute path), e.g.
    // {"/usr/sbin/ip", "netns", "exec", "oq123n1"}. Default: none.
    std::vector<std::string> command_prefix;
    // Whether the server at host:port (from its listening line) is ready;
    // called every 20 ms until it says so or start() times out. Default
    // (empty): GET /v1/healthz answers 200 on 127.0.0.1:port.
    std::function<bool(const std::string& host, std::uint16_t port)> ready_probe;
    // How long start() waits for the listening line and the probe.
    std::chrono::milliseconds start_timeout = std::chrono::seconds(20);
    // The constructor only prepares the directories; the caller starts the
    // server (start(), or spawn() then await_ready()). Default: false.
    bool defer_start = false;
    // Where the server's stderr goes (appended, kept afterwards); "" = a
    // file inside the temp root (removed with it).
    std::string log_path;
  };

  // Creates the temp directory and starts the server (unless
  // options::defer_start); throws std::runtime_error if it does not become
  // healthy in time.
  server_process();
  explicit server_process(options opts);
  ~server_process();
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  // Starts (again) on the same data directory. Requires !running().
  // Flags appended to the command line from the next start on.
  void set_extra_args(std::vector<std::string> args) { opts_.extra_args = std::move(args); }
  const std::vector<std::string>& extra_args() const { return opts_.extra_args; }
  void start();
  // start() in two halves, so that several servers that need each other to
  // become ready (the nodes of a cluster) can be started together from one
  // thread: spawn() forks and execs; await_ready() waits for the listening
  // line and the probe (options::start_timeout from spawn()), and on
  // failure kills the server and throws std::runtime_error.
  void spawn();
  void await_ready();
  // SIGTERM, then waits up to timeout for the exit. Returns the exit code,
  // or -signal if it died of a signal, or -1000 if it had to be SIGKILLed
  // after the timeout.
  int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(15));
  // SIGKILL and reap.
  void kill9();

  bool running() const { return pid_ > 0; }
  // True while the child has not exited (reaps it if it has).
  bool alive();
  pid_t pid() const { return pid_; }
  std::uint16_t port() const { return port_; }
  // The host of its listening line ("127.0.0.1", "10.1.2.3", "::1").
  const std::string& host() const { return host_; }
  const std::string& data_dir() const { return data_dir_; }
  // The last max_bytes of the server's stderr (all starts).
  std::string log_tail(std::size_t max_bytes = 4000) const;

 private:
  void reap(int* status);
  void stop_reader();

  options opts_;
  std::string root_;      // mkdtemp dir: data/ and server.log
  std::string data_dir_;  // root_/data
  std::string log_path_;  // root_/server.log
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point spawned_at_;
  std::uint16_t port_ = 0;
  std::string host_;

  int stdout_fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string stdout_;  // guarded by mu_
  bool eof_ = false;    // guarded by mu_
};

}  // namespace onceq::itest
