#include "cluster_netns.hpp"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>

namespace onceq::itest {

namespace {

// Runs ip with these arguments (no shell quoting needed: names and
// addresses are [a-z0-9./]); exit code and its combined output.
std::pair<int, std::string> ip(const std::string& args) {
  const std::string cmd = ip_binary() + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 512> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {status, out};
}

void ip_or_throw(const std::string& args) {
  auto [status, out] = ip(args);
  if (status != 0) throw std::runtime_error("ip " + args + ": " + out);
}

}  // namespace

std::string ip_binary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return {};
}

std::string netns_lab::unavailable_reason() {
  if (::geteuid() != 0) return "needs root (network namespaces, veth pairs, a bridge)";
  if (ip_binary().empty()) return "needs iproute2's ip (apt-get install iproute2)";
  const std::string probe = "oq" + std::to_string(::getpid()) + "probe";
  auto [status, out] = ip("netns add " + probe);
  if (status != 0) return "cannot create a network namespace: " + out;
  ip("netns del " + probe);
  return {};
}

netns_lab::netns_lab(int nodes) : nodes_(nodes), prefix_("oq" + std::to_string(::getpid())) {
  if (nodes < 1 || nodes > 9) throw std::invalid_argument("netns_lab: 1..9 nodes");
  remove_all();  // leftovers of a killed run with the same pid
  remove_stale();
  // A /24 that nothing here routes yet.
  const auto [rc, used] = ip("-4 -o addr show");
  const auto [rc2, routes] = ip("-4 route show table all");
  (void)rc;
  (void)rc2;
  const int pid = static_cast<int>(::getpid());
  for (int attempt = 0; attempt < 256 && net_.empty(); ++attempt) {
    const int a = 100 + (pid / 256 + attempt * 7) % 150;
    const int b = (pid + attempt * 13) % 256;
    const std::string net = "10." + std::to_string(a) + "." + std::to_string(b) + ".";
    if (used.find(net) == std::string::npos && routes.find(net) == std::string::npos) net_ = net;
  }
  if (net_.empty()) throw std::runtime_error("netns_lab: no free 10.x.y.0/24");
  try {
    const std::string br = prefix_ + "br";
    ip_or_throw("link add " + br + " type bridge");
    ip_or_throw("addr add " + bridge_address() + "/24 dev " + br);
    ip_or_throw("link set " + br + " up");
    for (int i = 0; i < nodes_; ++i) {
      const std::string host_end = prefix_ + "v" + std::to_string(i + 1);
      const std::string ns_end = prefix_ + "p" + std::to_string(i + 1);
      ip_or_throw("netns add " + ns(i));
      ip_or_throw("link add " + host_end + " type veth peer name " + ns_end + " netns " + ns(i));
      ip_or_throw("link set " + host_end + " master " + br);
      ip_or_throw("link set " + host_end + " up");
      ip_or_throw("-n " + ns(i) + " addr add " + address(i) + "/24 dev " + ns_end);
      ip_or_throw("-n " + ns(i) + " link set " + ns_end + " up");
      ip_or_throw("-n " + ns(i) + " link set lo up");
    }
  } catch (...) {
    remove_all();
    throw;
  }
}

// Namespaces oq<pid>n<i> and bridges oq<pid>br of processes that no longer
// exist: what a test killed by a timeout left behind.
void netns_lab::remove_stale() noexcept {
  auto stale = [](const std::string& name, char kind) -> bool {
    if (name.size() < 5 || name.compare(0, 2, "oq") != 0) return false;
    std::size_t i = 2;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    if (i == 2 || i >= name.size() || name[i] != kind) return false;
    const std::string pid = name.substr(2, i - 2);
    return !std::filesystem::exists("/proc/" + pid);
  };
  std::error_code ec;
  for (const char* dir : {"/run/netns", "/var/run/netns"}) {
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (stale(name, 'n')) ip("netns del " + name);
    }
  }
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    const std::string name = e.path().filename().string();
    if (stale(name, 'b') && name.size() > 2 && name.compare(name.size() - 2, 2, "br") == 0) {
      ip("link del " + name);
    }
  }
}

netns_lab::~netns_lab() {
  remove_all();
}

void netns_lab::remove_all() noexcept {
  // Deleting a namespace deletes its veth end, and with it the bridge's.
  for (int i = 0; i < nodes_; ++i) {
    if (std::filesystem::exists("/run/netns/" + ns(i)) ||
        std::filesystem::exists("/var/run/netns/" + ns(i))) {
      ip("netns del " + ns(i));
    }
    ip("link del " + prefix_ + "v" + std::to_string(i + 1));
  }
  ip("link del " + prefix_ + "br");
  cuts_.clear();
}

std::string netns_lab::ns(int i) const {
  return prefix_ + "n" + std::to_string(i + 1);
}

std::string netns_lab::address(int i) const {
  return net_ + std::to_string(i + 1);
}

std::string netns_lab::bridge_address() const {
  return net_ + "254";
}

std::vector<std::string> netns_lab::exec_prefix(int i) const {
  return {ip_binary(), "netns", "exec", ns(i)};
}

void netns_lab::cut(int from, int to) {
  ip_or_throw("-n " + ns(from) + " route add blackhole " + address(to) + "/32");
  cuts_.emplace_back(from, to);
}

void netns_lab::isolate(int i) {
  for (int j = 0; j < nodes_; ++j) {
    if (j == i) continue;
    cut(i, j);
    cut(j, i);
  }
}

void netns_lab::heal() {
  std::string errors;
  for (const auto& [from, to] : cuts_) {
    auto [status, out] = ip("-n " + ns(from) + " route del blackhole " + address(to) + "/32");
    if (status != 0) errors += out;
  }
  cuts_.clear();
  if (!errors.empty()) throw std::runtime_error("netns_lab::heal: " + errors);
}

}  // namespace onceq::itest
