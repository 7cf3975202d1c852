// raft_node: start, stop, status, and the facade (raft_node_impl.hpp).

#include "cluster/raft_node_impl.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

// raft 0.15 checksums every entry it writes, sends and reads with
// byteCrc32: a CRC-32 computed most significant bit first (polynomial
// 0x04C11DB7, the checksum of CRC-32/MPEG-2 with a caller's init and no
// final inversion), one table lookup per byte. That was 45% of a 3-node
// group's CPU with 40 KB entries (a produce of 100 messages;
// docs/BENCHMARKS.md, "Replication"). The static libraft's calls
// (--wrap=byteCrc32, cluster/CMakeLists.txt) come here instead (in this
// file, which every user of raft links, so that the static library finds it): the same
// checksum eight bytes per step (slicing-by-8), so that logs, snapshots and
// messages are unchanged. cluster_test's raft_checksum test compares both
// on random data.

namespace crc_detail {

constexpr std::uint32_t k_poly = 0x04C11DB7u;

struct tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  constexpr tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i << 24;
      for (int k = 0; k < 8; ++k) c = (c & 0x80000000u) ? (c << 1) ^ k_poly : (c << 1);
      t[0][i] = c;
    }
    for (std::size_t k = 1; k < 8; ++k) {
      for (std::uint32_t i = 0; i < 256; ++i) {
        t[k][i] = (t[k - 1][i] << 8) ^ t[0][t[k - 1][i] >> 24];
      }
    }
  }
};
constexpr tables k_tables;

inline std::uint32_t load_be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

}  // namespace crc_detail

extern "C" unsigned __wrap_byteCrc32(const void* buf, std::size_t size, unsigned init) {
  const auto& t = crc_detail::k_tables.t;
  const auto* p = static_cast<const unsigned char*>(buf);
  std::uint32_t crc = init;
  while (size >= 8) {
    const std::uint32_t a = crc ^ crc_detail::load_be32(p);
    const std::uint32_t b = crc_detail::load_be32(p + 4);
    crc = t[7][a >> 24] ^ t[6][(a >> 16) & 0xff] ^ t[5][(a >> 8) & 0xff] ^ t[4][a & 0xff] ^
          t[3][b >> 24] ^ t[2][(b >> 16) & 0xff] ^ t[1][(b >> 8) & 0xff] ^ t[0][b & 0xff];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc << 8) ^ t[0][((crc >> 24) ^ *p++) & 0xff];
  return crc;
}

namespace onceq::cluster {

result<void> raft_node::impl::init() {
  if (int rv = uv_loop_init(&loop_); rv != 0) {
    return make_error(errc::unavailable, fmt::format("uv_loop_init: {}", uv_strerror(rv)));
  }
  loop_ready_ = true;
  async_.data = this;
  check_.data = this;
  if (int rv = uv_async_init(&loop_, &async_, &impl::on_async); rv != 0) {
    auto e = make_error(errc::unavailable, fmt::format("uv_async_init: {}", uv_strerror(rv)));
    shutdown_inline();
    return e;
  }
  async_ready_ = true;
  uv_check_init(&loop_, &check_);
  uv_check_start(&check_, &impl::on_check);
  check_ready_ = true;
  for (auto& g : groups_) {
    if (!opts_.specs.empty() && !opts_.specs[g->index].open) continue;
    if (auto r = init_group(*g); !r.ok()) {
      shutdown_inline();
      return std::move(r).err();
    }
  }
  publish();
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    shutdown_inline();
    return make_error(errc::unavailable, fmt::format("raft loop thread: {}", e.what()));
  }
  return {};
}

void raft_node::impl::stop() {
  std::lock_guard stop_lock(stop_mu_);
  if (finalized_) return;
  if (thread_.joinable()) {
    if (std::this_thread::get_id() == thread_.get_id()) {
      log(log_level::error, k_log,
          "raft_node::stop called on the raft loop thread (from a callback): cannot join "
          "itself");
      std::terminate();
    }
    {
      std::lock_guard lock(mu_);
      accepting_ = false;
      stop_requested_ = true;
      uv_async_send(&async_);
    }
    thread_.join();
  }
  finalize();
}

result<group_status> raft_node::impl::status(unsigned g) const {
  if (g >= groups_.size()) return no_group(g);
  published p;
  {
    std::lock_guard lock(status_mu_);
    p = published_[g];
  }
  group_status s;
  if (const node_config* n = cfg_.node_of(p.leader)) s.leader = n->id;
  s.is_leader = p.is_leader;
  s.leader_ready = p.leader_ready;
  s.term = p.term;
  s.commit_index = p.commit_index;
  s.last_applied = p.last_applied;
  s.last_index = p.last_index;
  s.proposals = p.proposals;
  s.apply_calls = p.apply_calls;
  s.snapshots_restored = p.restores;
  s.snapshot_bytes_restored = p.restored_bytes;
  s.terms_seen = p.terms_seen;
  for (::raft_id id : p.heard) {
    if (const node_config* n = cfg_.node_of(id)) s.heard.push_back(n->id);
  }
  s.failure = std::move(p.failure);
  s.open = p.open;
  s.members = std::move(p.members);
  return s;
}

bool raft_node::impl::leads(unsigned g) const {
  if (g >= groups_.size()) return false;
  std::lock_guard lock(status_mu_);
  return published_[g].is_leader;
}

error raft_node::impl::no_group(unsigned g) {
  return make_error(errc::invalid_argument, fmt::format("no group {}", g));
}

namespace {

// <data_dir>/raft/<group>.wiped: what a wipe cut short by a crash left.
std::filesystem::path wiped_path(const std::string& dir) {
  return std::filesystem::path(dir + ".wiped");
}

}  // namespace

result<void> raft_node::impl::init_group(group& g) {
  std::error_code ec;
  std::filesystem::remove_all(wiped_path(g.dir), ec);  // a wipe a crash cut short
  ec.clear();
  std::filesystem::create_directories(g.dir, ec);
  if (ec) {
    return make_error(errc::unavailable, fmt::format("{}: {}", g.dir, ec.message()));
  }
  auto raft_error = [&](std::string_view what, int rv, const char* msg) {
    return make_error(errc::unavailable,
                      fmt::format("group {} ({}, raft {}): {}: {}", g.index, g.dir, g.address, what,
                                  msg != nullptr && *msg != 0 ? msg : raft_strerror(rv)));
  };
  int rv = g.transport.init(&loop_);
  if (rv != 0) return raft_error("raft_uv_tcp_init", rv, g.transport.errmsg());
  g.transport_ready = true;
  rv = raft_uv_init(&g.io, &loop_, g.dir.c_str(), g.transport.get());
  if (rv != 0) return raft_error("raft_uv_init", rv, g.io.errmsg);
  g.io_ready = true;
  raft_uv_set_connect_retry_delay(&g.io, opts_.connect_retry_delay_ms);
  const std::size_t own =
      opts_.specs.empty() ? 0 : opts_.specs[static_cast<std::size_t>(g.index)].segment_bytes;
  raft_uv_set_segment_size(&g.io, own != 0 ? own : opts_.segment_bytes);

  g.fsm.version = 1;
  g.fsm.data = &g;
  g.fsm.apply = &impl::fsm_apply;
  g.fsm.snapshot = &impl::fsm_snapshot;
  g.fsm.restore = &impl::fsm_restore;
  g.fsm.snapshot_finalize = nullptr;
  g.fsm.snapshot_async = nullptr;

  rv = raft_init(&g.r, &g.io, &g.fsm, cfg_.self_raft_id(), g.address.c_str());
  if (rv != 0) return raft_error("raft_init", rv, g.r.errmsg);
  g.raft_ready = true;
  g.r.data = &g;
  watch_appends(g);
  raft_set_election_timeout(&g.r, opts_.election_timeout_ms);
  raft_set_heartbeat_timeout(&g.r, opts_.heartbeat_timeout_ms);
  raft_set_snapshot_threshold(&g.r, opts_.snapshot_threshold);
  raft_set_snapshot_trailing(&g.r, opts_.snapshot_trailing);
  raft_set_pre_vote(&g.r, opts_.pre_vote);

  raft_set_max_catch_up_rounds(&g.r, opts_.max_catch_up_rounds);
  raft_set_max_catch_up_round_duration(&g.r, opts_.max_catch_up_round_ms);

  struct raft_configuration conf;
  raft_configuration_init(&conf);
  for (const member& m : g.bootstrap) {
    const node_config* n = cfg_.node_of(m.id);
    if (n == nullptr) {
      raft_configuration_close(&conf);
      return make_error(
          errc::invalid_argument,
          fmt::format("group {}: raft id {} is not in the cluster file", g.index, m.id));
    }
    const std::string addr = cfg_.raft_address(*n, g.index);
    rv = raft_configuration_add(&conf, m.id, addr.c_str(), role_of(m.role));
    if (rv != 0) {
      raft_configuration_close(&conf);
      return raft_error("raft_configuration_add", rv, nullptr);
    }
  }
  // Only a pristine directory takes the configuration; on a restart the
  // log already holds it and raft answers RAFT_CANTBOOTSTRAP. Without one
  // the node waits for a leader that adds it.
  rv = conf.n == 0 ? RAFT_CANTBOOTSTRAP : raft_bootstrap(&g.r, &conf);
  raft_configuration_close(&conf);
  if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) return raft_error("raft_bootstrap", rv, g.r.errmsg);
  rv = raft_start(&g.r);
  if (rv != 0) return raft_error("raft_start", rv, g.r.errmsg);
  return {};
}

void raft_node::impl::run() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  pthread_setname_np(pthread_self(), "onceq-raft");
  uv_run(&loop_, UV_RUN_DEFAULT);
}

void raft_node::impl::begin_close() {
  if (closing_all_) return;
  closing_all_ = true;
  for (auto& g : groups_) {
    g->closing = true;
    if (g->closing_one && !g->closed) continue;  // close_group's raft_close is under way
    if (g->raft_ready && !g->closed) {
      raft_close(&g->r, &impl::on_raft_closed);
    } else {
      g->closed = true;
    }
  }
  if (async_ready_) uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
  if (check_ready_) uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
}

void raft_node::impl::shutdown_inline() {
  begin_close();
  if (loop_ready_) uv_run(&loop_, UV_RUN_DEFAULT);
  finalize();
}

void raft_node::impl::finalize() {
  if (finalized_) return;
  finalized_ = true;
  for (auto& g : groups_) {
    release_all(*g);
    for (auto& cb : g->close_cbs)
      deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
    g->close_cbs.clear();
    if (g->io_ready) raft_uv_close(&g->io);
    if (g->transport_ready) g->transport.release();
    g->io_ready = g->transport_ready = false;
  }
  if (loop_ready_) {
    if (int rv = uv_loop_close(&loop_); rv != 0) {
      log(log_level::warn, k_log, "uv_loop_close", {{"error", uv_strerror(rv)}});
    }
    loop_ready_ = false;
  }
}

void raft_node::impl::on_raft_closed(struct raft* r) {
  auto* g = static_cast<group*>(r->data);
  g->closed = true;
  g->node->release_all(*g);
  if (!g->node->closing_all_) {
    // close_group: raft_uv is released on the next turn of the loop, once
    // raft has returned from this callback.
    impl* node = g->node;
    (void)node->post([node, g] { node->finish_close(*g); });
  }
}

void raft_node::impl::finish_close(group& g) {
  if (closing_all_ || !g.closed) return;  // stop() releases it
  if (g.io_ready) raft_uv_close(&g.io);
  if (g.transport_ready) g.transport.release();
  g.io_ready = g.transport_ready = g.raft_ready = false;
  g.closing = g.closed = g.closing_one = false;
  g.barrier_term = g.ready_term = 0;
  g.failure.clear();
  g.r = {};
  g.io = {};
  g.fsm = {};
  g.raw_append = nullptr;
  {
    std::lock_guard lock(status_mu_);
    published_[g.index] = published{};
  }
  std::string why;
  if (g.wipe) why = wipe_dir(g.dir);
  g.wipe = false;
  auto cbs = std::move(g.close_cbs);
  g.close_cbs.clear();
  for (auto& cb : cbs) deliver(cb, why.empty() ? op_result{} : fail(raft_errc::failed, why));
}

result<void> raft_node::impl::open_group(unsigned g, std::vector<member> bootstrap, op_cb cb) {
  if (g >= groups_.size()) return no_group(g);
  group* gp = groups_[g].get();
  return post([this, gp, bootstrap = std::move(bootstrap), cb = std::move(cb)]() mutable {
    group& grp = *gp;
    if (closing_all_)
      return deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
    if (grp.raft_ready && !grp.closing) return deliver(cb, op_result{});
    if (grp.closing) {
      return deliver(cb, fail(raft_errc::failed, fmt::format("group {} is closing", grp.index)));
    }
    grp.bootstrap = std::move(bootstrap);
    if (auto r = init_group(grp); !r.ok()) {
      // Undo what was set up: the group stays dormant.
      if (grp.raft_ready) {
        grp.closing = grp.closing_one = true;
        grp.close_cbs.push_back([cb = std::move(cb), why = r.err().message](op_result) mutable {
          deliver(cb, fail(raft_errc::failed, why));
        });
        raft_close(&grp.r, &impl::on_raft_closed);
        return;
      }
      if (grp.io_ready) raft_uv_close(&grp.io);
      if (grp.transport_ready) grp.transport.release();
      grp.io_ready = grp.transport_ready = false;
      grp.io = {};
      return deliver(cb, fail(raft_errc::failed, r.err().message));
    }
    log(log_level::info, k_log, "group opened", {log_number("group", grp.index)});
    publish();  // status() says open before the callback runs
    deliver(cb, op_result{});
  });
}

result<void> raft_node::impl::close_group(unsigned g, bool wipe, op_cb cb) {
  if (g >= groups_.size()) return no_group(g);
  group* gp = groups_[g].get();
  return post([this, gp, wipe, cb = std::move(cb)]() mutable {
    group& grp = *gp;
    if (closing_all_)
      return deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
    grp.wipe = grp.wipe || wipe;
    grp.close_cbs.push_back(std::move(cb));
    if (grp.closing) return;  // the close under way answers it too
    if (!grp.raft_ready) {
      grp.closed = true;
      return finish_close(grp);
    }
    grp.closing = grp.closing_one = true;
    log(log_level::info, k_log, "group closing", {log_number("group", grp.index)});
    raft_close(&grp.r, &impl::on_raft_closed);
  });
}

int raft_node::impl::role_of(member_role r) {
  switch (r) {
    case member_role::voter:
      return RAFT_VOTER;
    case member_role::standby:
      return RAFT_STANDBY;
    case member_role::spare:
      return RAFT_SPARE;
  }
  return RAFT_SPARE;
}

result<void> raft_node::impl::change(unsigned g, member_change c, op_cb cb) {
  if (g >= groups_.size()) return no_group(g);
  const node_config* n = cfg_.node_of(c.id);
  if (n == nullptr) {
    return make_error(errc::invalid_argument,
                      fmt::format("raft id {} is not in the cluster file", c.id));
  }
  std::string address = cfg_.raft_address(*n, g);
  group* gp = groups_[g].get();
  return post([this, gp, c, address = std::move(address), cb = std::move(cb)]() mutable {
    group& grp = *gp;
    if (grp.closing) return deliver(cb, fail(raft_errc::shutting_down, "the group is closing"));
    if (!grp.raft_ready || raft_state(&grp.r) != RAFT_LEADER) {
      return deliver(cb, fail(raft_errc::not_leader,
                              fmt::format("group {}: this node is not the leader", grp.index),
                              grp.raft_ready ? leader_name(grp) : std::string()));
    }
    auto* op = new change_op;
    op->req.data = op;
    op->cb = std::move(cb);
    int rv = 0;
    switch (c.op) {
      case member_change::kind::add:
        rv = raft_add(&grp.r, &op->req, c.id, address.c_str(), &impl::on_change);
        break;
      case member_change::kind::standby:
        rv = raft_assign(&grp.r, &op->req, c.id, RAFT_STANDBY, &impl::on_change);
        break;
      case member_change::kind::promote:
        rv = raft_assign(&grp.r, &op->req, c.id, RAFT_VOTER, &impl::on_change);
        break;
      case member_change::kind::remove:
        rv = raft_remove(&grp.r, &op->req, c.id, &impl::on_change);
        break;
    }
    if (rv != 0) {
      op_cb done = std::move(op->cb);
      delete op;
      deliver(done, fail(rv == RAFT_NOTLEADER ? raft_errc::not_leader : raft_errc::failed,
                         fmt::format("group {}: {}", grp.index, raft_strerror(rv))));
    }
  });
}

void raft_node::impl::on_change(struct raft_change* req, int status) {
  auto* op = static_cast<change_op*>(req->data);
  op_cb cb = std::move(op->cb);
  delete op;
  if (status == 0) return deliver(cb, op_result{});
  deliver(cb,
          fail(code_of(status), fmt::format("configuration change: {}", raft_strerror(status))));
}

void raft_node::impl::release_all(group& g) {
  std::vector<op_cb> cbs;
  for (batch* b : g.inflight) {
    for (auto& cb : b->cbs) {
      if (cb) cbs.push_back(std::move(cb));
    }
    delete b;
  }
  g.inflight.clear();
  std::vector<transfer_op*> settling = std::move(g.settling);
  g.settling.clear();
  for (transfer_op* t : settling) {
    cbs.push_back(std::move(t->cb));
    delete t;
  }
  for (auto& cb : cbs) deliver(cb, fail(raft_errc::shutting_down, "the raft node is stopping"));
}

// A group's directory goes in one step a crash cannot cut in half: renamed
// aside (atomic), the rename made durable, then deleted. A kill -9 in the
// middle of deleting the directory itself left a log with a hole in it
// (its first segment and its last ones, the snapshot gone), which raft
// refuses at the next start ("unexpected closed segment"), so the node
// could not start again; now the group's path holds the whole directory or
// nothing, and init_group deletes a leftover.
std::string raft_node::impl::wipe_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path trash = wiped_path(dir);
  std::error_code ec;
  fs::remove_all(trash, ec);
  if (ec) return fmt::format("{}: {}", trash.string(), ec.message());
  fs::rename(dir, trash, ec);
  if (ec == std::errc::no_such_file_or_directory) return {};
  if (ec) return fmt::format("{}: {}", dir, ec.message());
  const std::string parent = fs::path(dir).parent_path().string();
  const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return fmt::format("{}: fsync: {}", parent, std::strerror(err));
  }
  ::close(fd);
  fs::remove_all(trash, ec);
  if (ec) return fmt::format("{}: {}", trash.string(), ec.message());
  return {};
}

namespace {

// <data_dir>/raft/identity: the node id and raft id this directory
// belongs to, so that a reordered cluster file cannot hand it to another
// node's identity.
result<void> check_identity(const std::string& data_dir, const cluster_config& cfg) {
  const auto dir = std::filesystem::path(data_dir) / "raft";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return make_error(errc::unavailable, fmt::format("{}: {}", dir.string(), ec.message()));
  }
  const auto path = dir / "identity";
  const std::string want =
      fmt::format("node_id={}\nraft_id={}\n", cfg.self().id, cfg.self_raft_id());
  if (std::filesystem::exists(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream have;
    have << in.rdbuf();
    if (!in) {
      return make_error(errc::unavailable, fmt::format("{}: cannot read", path.string()));
    }
    if (have.str() != want) {
      return make_error(
          errc::invalid_argument,
          fmt::format("{} says this data dir belongs to another identity:\n{}but the cluster file "
                      "makes this node {} with raft id {} (nodes may be added at the end of the "
                      "cluster file, never reordered or removed)",
                      path.string(), have.str(), cfg.self().id, cfg.self_raft_id()));
    }
    return {};
  }
  const auto tmp = dir / "identity.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << want;
    out.flush();
    if (!out) return make_error(errc::unavailable, fmt::format("{}: cannot write", tmp.string()));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return make_error(errc::unavailable, fmt::format("{}: {}", path.string(), ec.message()));
  }
  return {};
}

}  // namespace

raft_node::raft_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

raft_node::~raft_node() {
  if (impl_) impl_->stop();
}

result<std::unique_ptr<raft_node>> raft_node::start(cluster_config cfg, raft_node_options opts,
                                                    std::vector<state_machine*> machines) {
  auto bad = [](std::string why) { return make_error(errc::invalid_argument, std::move(why)); };
  if (opts.data_dir.empty()) return bad("raft_node: needs a data_dir");
  if (opts.groups == 0) return bad("raft_node: needs at least one group");
  if (machines.size() != opts.groups) {
    return bad(
        fmt::format("raft_node: {} state machines for {} groups", machines.size(), opts.groups));
  }
  if (std::find(machines.begin(), machines.end(), nullptr) != machines.end()) {
    return bad("raft_node: a state machine is null");
  }
  if (opts.heartbeat_timeout_ms == 0 || opts.heartbeat_timeout_ms >= opts.election_timeout_ms) {
    return bad(
        fmt::format("raft_node: heartbeat timeout {} ms must be above 0 and below the "
                    "election timeout {} ms",
                    opts.heartbeat_timeout_ms, opts.election_timeout_ms));
  }
  if (opts.snapshot_threshold == 0) return bad("raft_node: snapshot_threshold must be above 0");
  if (!opts.specs.empty() && opts.specs.size() != opts.groups) {
    return bad(
        fmt::format("raft_node: {} group specs for {} groups", opts.specs.size(), opts.groups));
  }
  if (opts.max_batch_entries == 0 || opts.max_batch_bytes == 0 || opts.max_entry_bytes == 0 ||
      opts.max_queued == 0) {
    return bad("raft_node: batch and queue limits must be above 0");
  }
  // A raft_apply batch fits in one open segment.
  auto segment_too_small = [&](std::size_t bytes, std::string_view whose) {
    return bad(fmt::format("raft_node: {} open segments of {} bytes are below max_batch_bytes {}",
                           whose, bytes, opts.max_batch_bytes));
  };
  if (opts.segment_bytes < opts.max_batch_bytes) {
    return segment_too_small(opts.segment_bytes, "the groups'");
  }
  for (std::size_t g = 0; g < opts.specs.size(); ++g) {
    const std::size_t b = opts.specs[g].segment_bytes;
    if (b != 0 && b < opts.max_batch_bytes) {
      return segment_too_small(b, fmt::format("group {}'s", g));
    }
  }
  ONCEQ_TRY(cfg.check_ports(opts.groups));
  ONCEQ_TRY(check_identity(opts.data_dir, cfg));
  auto p = std::make_unique<impl>(std::move(cfg), std::move(opts), std::move(machines));
  ONCEQ_TRY(p->init());
  return std::unique_ptr<raft_node>(new raft_node(std::move(p)));
}

result<void> raft_node::propose(unsigned g, std::string entry, op_cb cb) {
  return impl_->propose(g, std::move(entry), std::move(cb));
}
result<void> raft_node::barrier(unsigned g, op_cb cb) {
  return impl_->barrier(g, std::move(cb));
}
result<void> raft_node::transfer(unsigned g, std::string_view to_node, op_cb cb) {
  return impl_->transfer(g, to_node, std::move(cb));
}
result<void> raft_node::rebalance() {
  return impl_->rebalance();
}
result<void> raft_node::read(unsigned g, bool fresh, op_cb cb) {
  return impl_->read(g, fresh, std::move(cb));
}

bool raft_node::leads(unsigned g) const {
  return impl_->leads(g);
}

bool raft_node::opened(unsigned g) const {
  return impl_->opened(g);
}

bool raft_node::impl::opened(unsigned g) const {
  if (g >= groups_.size()) return false;
  std::lock_guard lock(status_mu_);
  return published_[g].open;
}

std::uint64_t raft_node::leader_term(unsigned g) const {
  return impl_->leader_term(g);
}

std::uint64_t raft_node::impl::leader_term(unsigned g) const {
  if (g >= groups_.size()) return 0;
  std::lock_guard lock(status_mu_);
  return published_[g].is_leader ? published_[g].term : 0;
}

result<void> raft_node::open_group(unsigned g, std::vector<member> bootstrap, op_cb cb) {
  return impl_->open_group(g, std::move(bootstrap), std::move(cb));
}
result<void> raft_node::close_group(unsigned g, bool wipe, op_cb cb) {
  return impl_->close_group(g, wipe, std::move(cb));
}
result<void> raft_node::change(unsigned g, member_change c, op_cb cb) {
  return impl_->change(g, c, std::move(cb));
}

std::string_view to_string(member_role r) noexcept {
  switch (r) {
    case member_role::voter:
      return "voter";
    case member_role::standby:
      return "standby";
    case member_role::spare:
      return "spare";
  }
  return "spare";
}

result<group_status> raft_node::status(unsigned g) const {
  return impl_->status(g);
}
void raft_node::stop() {
  impl_->stop();
}
const cluster_config& raft_node::config() const noexcept {
  return impl_->config();
}
unsigned raft_node::groups() const noexcept {
  return impl_->groups();
}

}  // namespace onceq::cluster
