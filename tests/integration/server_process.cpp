#include "server_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "http_client.hpp"

#ifndef ONCEQD_PATH
#error "ONCEQD_PATH must be defined to the path of the onceqd binary"
#endif

namespace onceq::itest {

namespace {

constexpr std::string_view k_ready_prefix = "onceqd listening on ";

std::string make_temp_root() {
  std::string tmpl = "/tmp/onceq-it-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  }
  return tmpl;
}

}  // namespace

server_process::server_process() : server_process(options{}) {}

server_process::server_process(options opts) : opts_(std::move(opts)) {
  root_ = make_temp_root();
  data_dir_ = opts_.data_dir.empty() ? root_ + "/data" : opts_.data_dir;
  log_path_ = opts_.log_path.empty() ? root_ + "/server.log" : opts_.log_path;
  std::filesystem::create_directories(data_dir_);
  if (opts_.defer_start) return;
  try {
    start();
  } catch (...) {
    std::cerr << "onceqd failed to start; its stderr:\n" << log_tail() << "\n";
    if (running()) kill9();
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
    throw;
  }
}

server_process::~server_process() {
  if (running()) kill9();
  stop_reader();
  if (::testing::Test::HasFailure()) {
    std::cerr << "---- onceqd stderr (" << log_path_ << ") ----\n"
              << log_tail() << "\n---- end of onceqd stderr ----\n";
  }
  std::error_code ignored;
  if (std::getenv("ONCEQ_IT_KEEP_TMP") == nullptr) std::filesystem::remove_all(root_, ignored);
}

void server_process::start() {
  spawn();
  await_ready();
}

void server_process::spawn() {
  if (running()) throw std::logic_error("server_process::spawn: already running");
  stop_reader();

  const std::string binary = opts_.onceqd_path.empty() ? ONCEQD_PATH : opts_.onceqd_path;
  std::vector<std::string> args = opts_.command_prefix;
  args.push_back(binary);
  args.insert(args.end(), opts_.listen_args.begin(), opts_.listen_args.end());
  for (const char* a : {"--data-dir", data_dir_.c_str(), "--fsync", opts_.fsync.c_str()}) {
    args.emplace_back(a);
  }
  args.insert(args.end(), opts_.extra_args.begin(), opts_.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("cannot open the server log or /dev/null");
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    ::close(log_fd);
    ::close(null_fd);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(null_fd, 0);
    ::dup2(out[1], 1);
    ::dup2(log_fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(log_fd);
  ::close(null_fd);
  pid_ = pid;
  stdout_fd_ = out[0];
  {
    std::lock_guard lock(mu_);
    stdout_.clear();
    eof_ = false;
  }
  // Drains the child's stdout so that it can never block on a full pipe.
  reader_ = std::thread([this, fd = stdout_fd_] {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mu_);
      if (n <= 0) {
        eof_ = true;
        cv_.notify_all();
        return;
      }
      stdout_.append(buf, static_cast<std::size_t>(n));
      cv_.notify_all();
    }
  });

  spawned_at_ = std::chrono::steady_clock::now();
}

void server_process::await_ready() {
  if (!running()) throw std::logic_error("server_process::await_ready: not running");
  const auto deadline = spawned_at_ + opts_.start_timeout;
  std::string line;
  {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, deadline, [&] {
      auto pos = stdout_.find(k_ready_prefix);
      return eof_ || (pos != std::string::npos && stdout_.find('\n', pos) != std::string::npos);
    });
    auto pos = stdout_.find(k_ready_prefix);
    if (pos != std::string::npos) {
      auto end = stdout_.find('\n', pos);
      if (end != std::string::npos) line = stdout_.substr(pos, end - pos);
    }
  }
  if (line.empty()) {
    std::string out_copy;
    {
      std::lock_guard lock(mu_);
      out_copy = stdout_;
    }
    kill9();
    throw std::runtime_error("onceqd did not print its listening line; stdout: '" + out_copy +
                             "'; stderr tail:\n" + log_tail());
  }
  // "HOST:PORT", HOST possibly "[v6]".
  const std::string address = line.substr(k_ready_prefix.size());
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    kill9();
    throw std::runtime_error("onceqd printed no port: '" + line + "'");
  }
  host_ = address.substr(0, colon);
  if (host_.size() >= 2 && host_.front() == '[') host_ = host_.substr(1, host_.size() - 2);
  port_ = static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)));

  // Wait for /v1/healthz to answer 200 (or the caller's probe).
  for (;;) {
    try {
      if (opts_.ready_probe) {
        if (opts_.ready_probe(host_, port_)) return;
        throw std::runtime_error("not ready");
      }
      // (Not a ?: of two prvalues: GCC 12 mis-destroys those.)
      std::optional<http_client> client;
      if (opts_.tls) {
        client.emplace(port_, tls_client_options{}, std::chrono::seconds(2));
      } else {
        client.emplace(port_, std::chrono::seconds(2));
      }
      if (client->get("/v1/healthz").status == 200) return;
    } catch (const std::exception&) {
      // not ready yet
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("onceqd exited during start; stderr tail:\n" + log_tail());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill9();
      throw std::runtime_error(opts_.ready_probe ? "onceqd's ready probe did not pass in time"
                                                 : "onceqd did not answer /v1/healthz in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void server_process::reap(int* status) {
  while (::waitpid(pid_, status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  stop_reader();
}

void server_process::stop_reader() {
  if (reader_.joinable()) reader_.join();
  if (stdout_fd_ >= 0) {
    ::close(stdout_fd_);
    stdout_fd_ = -1;
  }
}

int server_process::terminate(std::chrono::milliseconds timeout) {
  if (!running()) throw std::logic_error("server_process::terminate: not running");
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill9();
      return -1000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  stop_reader();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -999;
}

bool server_process::alive() {
  if (!running()) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    stop_reader();
    return false;
  }
  return true;
}

void server_process::kill9() {
  if (!running()) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  reap(&status);
}

std::string server_process::log_tail(std::size_t max_bytes) const {
  std::ifstream in(log_path_, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return s;
}

}  // namespace onceq::itest
