#pragma once

// Runs a real onceqd as a child process for one test: a fresh data
// directory under /tmp, an ephemeral port on 127.0.0.1, stop by SIGTERM or
// SIGKILL (by its own PID only), restart on the same data directory. The
// destructor kills a still-running server and removes the directory, also
// when the test failed (and then prints the tail of the server's stderr).
//
// Thread safety: none; drive it from the test's main thread (the child is
// tied to the forking thread with PR_SET_PDEATHSIG).

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
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
  };

  // Creates the temp directory and starts the server; throws
  // std::runtime_error if it does not become healthy in time.
  server_process();
  explicit server_process(options opts);
  ~server_process();
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  // Starts (again) on the same data directory. Requires !running().
  void start();
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
  std::uint16_t port_ = 0;

  int stdout_fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string stdout_;  // guarded by mu_
  bool eof_ = false;    // guarded by mu_
};

}  // namespace onceq::itest
