#include "headless_browser.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace onceq::itest {

namespace {

namespace fs = std::filesystem;

std::optional<std::string> on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return std::nullopt;
}

std::string tail(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

}  // namespace

std::optional<headless_browser> headless_browser::find(std::string* why) {
  std::string path;
  if (const char* env = std::getenv("ONCEQ_CHROMIUM"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      if (auto p = on_path(name)) {
        path = *p;
        break;
      }
    }
  }
  if (path.empty()) {
    *why =
        "no chromium on PATH (install Debian's chromium: scripts/deps.sh, or set ONCEQ_CHROMIUM)";
    return std::nullopt;
  }
  headless_browser b(path);
  auto probe = b.dump_dom("data:text/html,<p>onceq-probe</p>", std::chrono::milliseconds(100),
                          std::chrono::seconds(20));
  if (probe.output.find("onceq-probe") == std::string::npos) {
    *why = path + " cannot render a page here: " + tail(probe.errors, 1500);
    return std::nullopt;
  }
  return b;
}

headless_browser::run_result headless_browser::dump_dom(const std::string& url,
                                                        std::chrono::milliseconds budget,
                                                        std::chrono::seconds limit) const {
  return run({"--virtual-time-budget=" + std::to_string(budget.count()), "--dump-dom", url}, limit);
}

headless_browser::run_result headless_browser::screenshot(const std::string& url,
                                                          const std::string& png_path, int width,
                                                          int height,
                                                          std::chrono::milliseconds budget,
                                                          std::chrono::seconds limit) const {
  return run({"--virtual-time-budget=" + std::to_string(budget.count()),
              "--window-size=" + std::to_string(width) + "," + std::to_string(height),
              "--hide-scrollbars", "--screenshot=" + png_path, url},
             limit);
}

headless_browser::run_result headless_browser::run(const std::vector<std::string>& extra,
                                                   std::chrono::seconds limit) const {
  run_result out;
  char tmpl[] = "/tmp/onceq-chromium-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    out.errors = "mkdtemp failed";
    return out;
  }
  const fs::path dir(tmpl);
  const std::string err_path = (dir / "stderr.log").string();
  // --no-sandbox: test containers often run as root or without user
  // namespaces, where the sandbox cannot start; the page is our own.
  std::vector<std::string> args = {path_,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--disable-dev-shm-usage",
                                   "--disable-extensions",
                                   "--no-first-run",
                                   "--no-default-browser-check",
                                   "--user-data-dir=" + (dir / "profile").string()};
  args.insert(args.end(), extra.begin(), extra.end());

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.errors = "pipe failed";
    return out;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(fds[1], STDOUT_FILENO);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    out.errors = "fork failed";
    return out;
  }
  ::setpgid(pid, pid);  // also here: no race with the child's own call

  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  char buf[65536];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  // Wait for chromium itself to exit (left a zombie, so that its id and
  // group stay ours), then end the helpers left in its process group.
  while (!timed_out) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) timed_out = true;
    ::usleep(20'000);
  }
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.ok = !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;

  std::ifstream err(err_path);
  std::stringstream s;
  s << err.rdbuf();
  out.errors = tail(s.str(), 4000);
  if (timed_out)
    out.errors = "timed out after " + std::to_string(limit.count()) + " s\n" + out.errors;
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return out;
}

}  // namespace onceq::itest
