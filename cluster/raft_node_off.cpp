// raft_node in a build without clustering (-DONCEQ_CLUSTER=OFF,
// cluster/CMakeLists.txt): start() refuses, so no raft_node ever exists, and
// nothing in the binary links raft or libuv. The other members are there
// for the linker only. onceqd answers --cluster before it gets here
// (raft_check.hpp); this is the same answer for any other caller.

#include "cluster/raft_node.hpp"

namespace onceq::cluster {

class raft_node::impl {};

namespace {

error not_built_in() {
  return make_error(errc::failed_precondition,
                    "raft_node: clustering is not built in (-DONCEQ_CLUSTER=OFF)");
}

}  // namespace

raft_node::raft_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
raft_node::~raft_node() = default;

result<std::unique_ptr<raft_node>> raft_node::start(cluster_config, raft_node_options,
                                                    std::vector<state_machine*>) {
  return not_built_in();
}

result<void> raft_node::propose(unsigned, std::string, op_cb) {
  return not_built_in();
}
result<void> raft_node::barrier(unsigned, op_cb) {
  return not_built_in();
}
result<void> raft_node::read(unsigned, bool, op_cb) {
  return not_built_in();
}
result<void> raft_node::transfer(unsigned, std::string_view, op_cb) {
  return not_built_in();
}
result<void> raft_node::rebalance() {
  return not_built_in();
}
result<group_status> raft_node::status(unsigned) const {
  return not_built_in();
}
result<void> raft_node::open_group(unsigned, std::vector<member>, op_cb) {
  return not_built_in();
}
result<void> raft_node::close_group(unsigned, bool, op_cb) {
  return not_built_in();
}
result<void> raft_node::change(unsigned, member_change, op_cb) {
  return not_built_in();
}
bool raft_node::opened(unsigned) const {
  return false;
}
std::string_view to_string(member_role r) noexcept {
  return r == member_role::voter ? "voter" : r == member_role::standby ? "standby" : "spare";
}
bool raft_node::leads(unsigned) const {
  return false;
}
std::uint64_t raft_node::leader_term(unsigned) const {
  return 0;
}
void raft_node::stop() {}
unsigned raft_node::groups() const noexcept {
  return 0;
}

const cluster_config& raft_node::config() const noexcept {
  static const cluster_config none;
  return none;
}

}  // namespace onceq::cluster
