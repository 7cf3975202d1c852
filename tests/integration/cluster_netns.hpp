#pragma once

// A private network for cluster tests that cut links: n network namespaces
// (oq<pid>n1 ..), each with a veth pair to one bridge (oq<pid>br) in the
// root namespace, on a /24 of 10.0.0.0/8 no interface here uses yet. Node i
// has 10.A.B.i, the bridge 10.A.B.254, so the test (in the root namespace)
// reaches every node, and a blackhole route inside a namespace cuts only
// that node's packets to one other node.
//
// Needs root and iproute2's ip. The destructor removes the namespaces and
// the bridge; the constructor first removes leftovers with the same names
// (a run with the same pid that was killed) and those of pids that no
// longer exist.
//
// Thread safety: none.

#include <string>
#include <utility>
#include <vector>

namespace onceq::itest {

class netns_lab {
 public:
  // Why a lab cannot be built here ("" when it can): not root, no ip, or
  // no permission to create a namespace.
  static std::string unavailable_reason();

  // Throws std::runtime_error (after removing what it made).
  explicit netns_lab(int nodes);
  ~netns_lab();
  netns_lab(const netns_lab&) = delete;
  netns_lab& operator=(const netns_lab&) = delete;

  int size() const { return nodes_; }
  // Namespace and address of node i (0-based).
  std::string ns(int i) const;
  std::string address(int i) const;
  std::string bridge_address() const;
  // Prefix that runs a command inside node i's namespace.
  std::vector<std::string> exec_prefix(int i) const;

  // Drops node from's packets to node to (a blackhole route in from's
  // namespace). Throws std::runtime_error.
  void cut(int from, int to);
  // Cuts node i off from every other node (both directions); the root
  // namespace still reaches it.
  void isolate(int i);
  // Removes every cut.
  void heal();

 private:
  void remove_all() noexcept;
  static void remove_stale() noexcept;

  int nodes_;
  std::string prefix_;  // "oq<pid>"
  std::string net_;     // "10.A.B."
  std::vector<std::pair<int, int>> cuts_;
};

// The path of iproute2's ip, or "" if none is installed.
std::string ip_binary();

}  // namespace onceq::itest
