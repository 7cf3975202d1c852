#include "bench/process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace onceq::bench {
namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return "unknown";
}

// fork + exec with stdout/stderr on `out_fd`. The child dies with the bench.
pid_t spawn(const std::vector<std::string>& argv, int out_fd) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    setpgid(0, 0);  // own group: a terminal ^C reaches the bench, which stops it
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

server_process::~server_process() {
  stop(std::chrono::seconds(5));
}

void server_process::start(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  if (argv.empty()) throw std::runtime_error("empty command");
  if (pid_ > 0) throw std::runtime_error("server_process already running");
  log_ = log;
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error(fmt::format("open {}: {}", log.string(), std::strerror(errno)));
  try {
    pid_ = spawn(argv, fd);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
}

bool server_process::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

std::optional<std::string> server_process::wait_for_log(const std::string& needle,
                                                        std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(log_);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find(needle) != std::string::npos) return line;
    }
    if (!running()) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

process_usage server_process::usage() const {
  if (pid_ <= 0) throw std::runtime_error("usage(): server not running");
  process_usage u;
  {
    std::ifstream status(fmt::format("/proc/{}/status", pid_));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) {
        u.peak_rss_kb = std::stoull(line.substr(6));
        break;
      }
    }
  }
  std::ifstream stat(fmt::format("/proc/{}/stat", pid_));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close_paren = text.rfind(')');
  if (close_paren == std::string::npos) throw std::runtime_error("cannot parse /proc/<pid>/stat");
  std::istringstream fields(text.substr(close_paren + 2));
  std::string field;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  // Fields after the command start at #3 (state); utime is #14, stime #15.
  for (int n = 3; n <= 15 && (fields >> field); ++n) {
    if (n == 14) utime = std::stoull(field);
    if (n == 15) stime = std::stoull(field);
  }
  u.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return u;
}

std::string server_process::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return "not running";
  const pid_t pid = pid_;
  int status = 0;
  kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pid_ = -1;
      return describe_status(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  pid_ = -1;
  return describe_status(status) + " (after SIGKILL)";
}

std::string server_process::kill_now() {
  if (pid_ <= 0) return "not running";
  int status = 0;
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return describe_status(status);
}

int pick_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind a free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int pick_free_port_block(int count) {
  // Below 32768, the default ip_local_port_range; a random start so that two
  // benches on one machine rarely try the same block.
  constexpr int k_low = 10000;
  constexpr int k_high = 32000;
  std::random_device rd;
  std::uniform_int_distribution<int> pick(k_low, k_high - count);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = pick(rd);
    bool all_free = true;
    for (int p = base; p < base + count && all_free; ++p) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) throw std::runtime_error("socket() failed");
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<std::uint16_t>(p));
      all_free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      close(fd);
    }
    if (all_free) return base;
  }
  throw std::runtime_error(fmt::format("no block of {} free ports found", count));
}

command_output run_command(const std::vector<std::string>& argv,
                           std::chrono::milliseconds timeout) {
  command_output out;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return out;
  pid_t pid = -1;
  try {
    pid = spawn(argv, fds[1]);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    return out;
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  bool exited = false;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      if (out.output.size() < (1 << 20)) out.output.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (exited) break;  // one more read after the exit has drained the pipe
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  close(fds[0]);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

double self_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

std::optional<std::filesystem::path> make_temp_dir(const std::string& root,
                                                   const std::string& prefix, std::string& error) {
  std::string tmpl = (std::filesystem::path(root) / (prefix + "-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    error = fmt::format("mkdtemp {} failed", tmpl);
    return std::nullopt;
  }
  return std::filesystem::path(tmpl);
}

}  // namespace onceq::bench
