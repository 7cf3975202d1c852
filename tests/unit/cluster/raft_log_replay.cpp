// raft_log_replay: applies a shard group's Raft log, read offline from a
// node's raft directory (<data-dir>/raft/<g>), to fresh replicas, and
// compares what each entry wrote (applied_index_store::last_digest):
//
//   raft_log_replay RAFT_DIR [RESTART_INDEX ...] [vINDEX] [state]
//
// Replica A applies every command entry without a stop. Replica B applies
// the same entries but restarts (a new replica over the same store, whose
// open() recovers the broker from it) after each RESTART_INDEX. The first
// index at which their writes differ is where a restarted replica parts
// from one that never stopped. Exit status 1 when they differ. vINDEX prints
// the 40 entries from INDEX on with both replicas' replies (the deliveries
// of a consume, the outcome of an ack); `state` prints the first replica's
// whole in-memory state at the end (broker::describe_state). Work on a copy of the directory:
// raft_uv may tidy its open segments as it loads them.

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "broker/log_entry.hpp"
#include "cluster/raft_node_impl.hpp"
#include "cluster/replica.hpp"
#include "http/codec/inspector.hpp"
#include "storage/memory_store.hpp"

namespace {

using namespace onceq;

struct loaded {
  std::string snapshot;  // the replica's snapshot the log starts after ("" for none)
  raft_index start = 0;
  struct raft_entry* entries = nullptr;
  std::size_t n = 0;
};

loaded load_log(const std::string& dir) {
  static uv_loop_t loop;
  uv_loop_init(&loop);
  static struct raft_uv_transport transport;
  static struct raft_io io;
  if (raft_uv_tcp_init(&transport, &loop) != 0 ||
      raft_uv_init(&io, &loop, dir.c_str(), &transport) != 0) {
    std::fprintf(stderr, "raft_uv_init failed\n");
    std::exit(2);
  }
  if (io.init(&io, 1, "127.0.0.1:1") != 0) {
    std::fprintf(stderr, "io.init: %s\n", io.errmsg);
    std::exit(2);
  }
  raft_term term = 0;
  raft_id voted = 0;
  struct raft_snapshot* snap = nullptr;
  loaded out;
  if (int rv = io.load(&io, &term, &voted, &snap, &out.start, &out.entries, &out.n); rv != 0) {
    std::fprintf(stderr, "io.load: %s (%s)\n", raft_strerror(rv), io.errmsg);
    std::exit(2);
  }
  if (snap != nullptr && snap->n_bufs > 0) {
    out.snapshot.assign(static_cast<const char*>(snap->bufs[0].base), snap->bufs[0].len);
  }
  std::fprintf(stderr, "loaded %zu entries from index %llu (term %llu, snapshot %s)\n", out.n,
               static_cast<unsigned long long>(out.start), static_cast<unsigned long long>(term),
               snap != nullptr ? "yes" : "no");
  return out;
}

struct applier {
  storage::memory_store store;
  std::unique_ptr<cluster::replica> r;
  // index -> (digest of its writes, tag)
  std::map<std::uint64_t, std::pair<std::uint64_t, unsigned>> at;

  void open() {
    r = std::make_unique<cluster::replica>(store, &http::json_inspector(), broker_options{});
    r->on_trace([this](std::uint64_t index, log_tag tag, std::uint64_t digest) {
      at[index] = {digest, static_cast<unsigned>(tag)};
    });
    if (auto o = r->open(); !o.ok()) {
      std::fprintf(stderr, "open: %s\n", o.err().message.c_str());
      std::exit(2);
    }
  }
};

}  // namespace

std::string describe(const std::optional<result<log_reply>>& r) {
  if (!r) return "-";
  if (!r->ok()) return "error " + r->err().message;
  std::string out;
  if (const auto* ds = std::get_if<std::vector<delivery>>(&**r)) {
    for (const auto& d : *ds) {
      out += std::to_string(d.partition) + "/" + std::to_string(d.offset) + "#" +
             std::to_string(d.attempts) + "(" + d.value.substr(0, 12) + ") ";
    }
    return "deliveries " + out;
  }
  if (const auto* a = std::get_if<ack_outcome>(&**r)) {
    return "ack " + std::to_string(a->partition) + "/" + std::to_string(a->offset) + " " +
           (a->code == errc::ok ? std::string("ok") : a->message);
  }
  return "reply " + std::to_string((*r)->index());
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: raft_log_replay RAFT_DIR [RESTART_INDEX ...]\n");
    return 2;
  }
  std::set<std::uint64_t> restarts;
  std::uint64_t verbose_from = 0;
  bool show_state = false;
  std::uint64_t verbose_count = 40;
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "state") {
      show_state = true;
      continue;
    }
    if (argv[i][0] == 'n') {
      verbose_count = std::strtoull(argv[i] + 1, nullptr, 10);
      continue;
    }
    if (argv[i][0] == 'v') {
      verbose_from = std::strtoull(argv[i] + 1, nullptr, 10);
      continue;
    }
    restarts.insert(std::strtoull(argv[i], nullptr, 10));
  }
  const loaded log = load_log(argv[1]);
  applier a, b;
  a.open();
  b.open();
  if (!log.snapshot.empty()) {
    a.r->restore(log.snapshot);
    b.r->restore(log.snapshot);
  }
  for (std::size_t i = 0; i < log.n; ++i) {
    const auto& e = log.entries[i];
    const std::uint64_t index = log.start + i;
    if (e.type != RAFT_COMMAND) continue;
    auto bytes = cluster::detail::unpad(e.buf);
    if (!bytes) {
      std::fprintf(stderr, "index %llu: not a raft_node entry\n",
                   static_cast<unsigned long long>(index));
      return 2;
    }
    a.r->apply(index, *bytes);
    auto ra = a.r->take_reply();
    b.r->apply(index, *bytes);
    auto rb = b.r->take_reply();
    if (verbose_from != 0 && index >= verbose_from && index < verbose_from + verbose_count) {
      auto e2 = decode_entry(*bytes);
      std::string what;
      if (const auto* c = std::get_if<consume_cmd>(&e2->cmd)) {
        what = c->topic + "/" + c->group + " " + c->owner + " ";
      }
      std::printf("%llu tag %u stamp %lld: %sA %s | B %s\n", static_cast<unsigned long long>(index),
                  static_cast<unsigned>(tag_of(e2->cmd)), static_cast<long long>(e2->now_ms),
                  what.c_str(), describe(ra).c_str(), describe(rb).c_str());
    }
    if (restarts.count(index) != 0) {
      b.r.reset();
      b.open();
    }
  }
  if (show_state) std::fputs(a.r->core().describe_state().c_str(), stdout);
  int shown = 0;
  for (const auto& [index, da] : a.at) {
    auto it = b.at.find(index);
    if (it == b.at.end() || it->second == da) continue;
    std::printf("index %llu tag %u: without restarts %016llx, with %016llx\n",
                static_cast<unsigned long long>(index), da.second,
                static_cast<unsigned long long>(da.first),
                static_cast<unsigned long long>(it->second.first));
    if (++shown >= 20) break;
  }
  std::printf("%zu entries applied; %d differing indexes shown\n", a.at.size(), shown);
  return shown > 0 ? 1 : 0;
}
