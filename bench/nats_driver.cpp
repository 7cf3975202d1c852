#include "bench/nats_driver.hpp"

#include <nats/nats.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "bench/cluster_nodes.hpp"
#include "bench/clustered_driver.hpp"

namespace onceq::bench {
namespace {

using namespace std::chrono_literals;

constexpr const char* k_stream = "BENCH";
constexpr int64_t k_timeout_ms = 30000;

void check(natsStatus s, std::string_view what, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  if (s == NATS_OK) return;
  throw std::runtime_error(fmt::format("nats {}: {} (js error {}; {})", what, natsStatus_GetText(s),
                                       static_cast<int>(jerr), nats_GetLastError(nullptr)));
}

std::string subject_of(const run_setup& s) {
  return s.topic + ".msgs";
}

// A server of the run: the single one, or one node of a cluster.
struct nats_node {
  std::string name;  // server_name ("n1"); "" for a single server
  std::string url;   // nats://127.0.0.1:PORT
};

// One connection plus its JetStream context. nodes[0] is the server it
// connects to; with `reconnect` (a failover producer) it moves to the
// others, in order, when that one goes, waiting `reconnect_wait` between
// rounds of the list. Otherwise a lost server fails the connection.
class nats_connection {
 public:
  nats_connection(const std::vector<nats_node>& nodes, jsOptions* jo, bool reconnect = false,
                  int reconnect_wait_ms = 0) {
    natsOptions* opts = nullptr;
    check(natsOptions_Create(&opts), "options");
    std::vector<const char*> urls;
    for (const auto& n : nodes) urls.push_back(n.url.c_str());
    natsOptions_SetServers(opts, urls.data(), static_cast<int>(urls.size()));
    natsOptions_SetNoRandomize(opts, true);
    natsOptions_SetTimeout(opts, 10000);
    natsOptions_SetAllowReconnect(opts, reconnect);
    if (reconnect) {
      natsOptions_SetMaxReconnect(opts, 1'000'000);
      natsOptions_SetReconnectWait(opts, std::max(reconnect_wait_ms, 1));
      natsOptions_SetReconnectJitter(opts, 0, 0);
    }
    const natsStatus s = natsConnection_Connect(&nc_, opts);
    natsOptions_Destroy(opts);
    check(s, "connect");
    check(natsConnection_JetStream(&js_, nc_, jo), "jetstream context");
  }
  nats_connection(const nats_connection&) = delete;
  nats_connection& operator=(const nats_connection&) = delete;
  ~nats_connection() {
    jsCtx_Destroy(js_);
    natsConnection_Destroy(nc_);
  }

  natsConnection* nc() const { return nc_; }
  jsCtx* js() const { return js_; }

 private:
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

class nats_producer final : public producer {
 public:
  nats_producer(std::vector<nats_node> nodes, const run_setup& s)
      : subject_(subject_of(s)),
        nodes_(std::move(nodes)),
        failover_(s.failover),
        attempt_ms_(s.attempt_ms),
        retry_pause_(s.retry_ms) {
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = k_timeout_ms;
    jo.PublishAsync.MaxPending = static_cast<int64_t>(std::max<std::size_t>(s.batch * 2, 256));
    jo.PublishAsync.AckHandler = &nats_producer::on_ack;
    jo.PublishAsync.AckHandlerClosure = this;
    conn_ = std::make_unique<nats_connection>(nodes_, &jo, failover_, s.retry_ms);
  }

  std::size_t produce(std::span<const bench_message> batch) override {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = k_timeout_ms;
    if (failover_ && batch.size() == 1) return publish_until_acknowledged(batch[0], po);
    if (batch.size() == 1) {
      po.MsgId = batch[0].msg_id.c_str();
      jsPubAck* pa = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      const auto& p = batch[0].payload;
      check(js_Publish(&pa, conn_->js(), subject_.c_str(), p.data(), static_cast<int>(p.size()),
                       &po, &jerr),
            "publish", jerr);
      const bool dup = pa != nullptr && pa->Duplicate;
      jsPubAck_Destroy(pa);
      return dup ? 1 : 0;
    }
    duplicates_ = 0;
    errors_ = 0;
    for (const auto& m : batch) {
      po.MsgId = m.msg_id.c_str();
      check(js_PublishAsync(conn_->js(), subject_.c_str(), m.payload.data(),
                            static_cast<int>(m.payload.size()), &po),
            "publish async");
    }
    jsPubOptions wait;
    jsPubOptions_Init(&wait);
    wait.MaxWait = k_timeout_ms;
    check(js_PublishAsyncComplete(conn_->js(), &wait), "publish async complete");
    if (errors_ > 0) {
      std::lock_guard lock(mu_);
      throw std::runtime_error(
          fmt::format("nats: {} async publishes failed: {}", errors_.load(), first_error_));
    }
    return duplicates_;
  }

  std::uint64_t last_attempt_ns() const override { return attempt_ns_; }
  std::string last_node() const override { return last_node_; }

 private:
  // The failover probe's publish: every attempt waits attempt_ms_ for its
  // ack (a publish sent while the stream has no leader is dropped, so only
  // the deadline ends it); any failure is retried after retry_pause_ with
  // the same Nats-Msg-Id, while libnats reconnects to the next server.
  std::size_t publish_until_acknowledged(const bench_message& m, jsPubOptions& po) {
    po.MsgId = m.msg_id.c_str();
    po.MaxWait = attempt_ms_;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      attempt_ns_ = steady_now_ns();
      jsPubAck* pa = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      const natsStatus st = js_Publish(&pa, conn_->js(), subject_.c_str(), m.payload.data(),
                                       static_cast<int>(m.payload.size()), &po, &jerr);
      if (st == NATS_OK) {
        const bool dup = pa != nullptr && pa->Duplicate;
        jsPubAck_Destroy(pa);
        last_node_ = connected_node();
        return dup ? 1 : 0;
      }
      if (std::chrono::steady_clock::now() > deadline) check(st, "publish (failover)", jerr);
      std::this_thread::sleep_for(retry_pause_);
    }
  }

  std::string connected_node() const {
    char url[256] = {0};
    if (natsConnection_GetConnectedUrl(conn_->nc(), url, sizeof(url)) != NATS_OK) return {};
    const std::string_view u(url);
    for (const auto& n : nodes_) {
      const auto port = n.url.substr(n.url.rfind(':'));
      if (u.size() >= port.size() && u.substr(u.size() - port.size()) == port) return n.name;
    }
    return std::string(u);
  }

  static void on_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
    auto* self = static_cast<nats_producer*>(closure);
    if (pa != nullptr && pa->Duplicate) ++self->duplicates_;
    if (pae != nullptr) {
      if (self->errors_++ == 0) {
        std::lock_guard lock(self->mu_);
        self->first_error_ =
            fmt::format("{} ({})", pae->ErrText ? pae->ErrText : "", natsStatus_GetText(pae->Err));
      }
    }
    natsMsg_Destroy(msg);
  }

  std::string subject_;
  std::vector<nats_node> nodes_;
  bool failover_;
  int64_t attempt_ms_;
  std::chrono::milliseconds retry_pause_;
  std::uint64_t attempt_ns_ = 0;
  std::string last_node_;
  std::unique_ptr<nats_connection> conn_;
  std::atomic<std::size_t> duplicates_{0};
  std::atomic<std::size_t> errors_{0};
  std::mutex mu_;
  std::string first_error_;
};

class nats_consumer final : public consumer {
 public:
  nats_consumer(const std::vector<nats_node>& nodes, const run_setup& s) : conn_(nodes, nullptr) {
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = k_stream;
    so.Consumer = s.group.c_str();
    jsErrCode jerr = static_cast<jsErrCode>(0);
    check(js_PullSubscribe(&sub_, conn_.js(), subject_of(s).c_str(), s.group.c_str(), nullptr, &so,
                           &jerr),
          "pull subscribe", jerr);
  }
  ~nats_consumer() override {
    natsMsgList_Destroy(&list_);
    natsSubscription_Destroy(sub_);
  }

  // Same semantics as the onceq long-poll and XREADGROUP BLOCK: return what
  // is ready at once; only when nothing is, wait up to `wait` for the first
  // message. (natsSubscription_Fetch would wait for a full batch.)
  const std::vector<std::string_view>& fetch(std::size_t max,
                                             std::chrono::milliseconds wait) override {
    natsMsgList_Destroy(&list_);
    list_ = natsMsgList{};
    payloads_.clear();
    jsFetchRequest req;
    jsFetchRequest_Init(&req);
    req.Batch = static_cast<int>(max);
    req.NoWait = true;
    // nats-server may hold a no-wait request while deliveries await their
    // AckWait, so it is bounded by `wait` too.
    req.Expires = std::max<int64_t>(wait.count(), 1) * 1'000'000;
    natsStatus s = natsSubscription_FetchRequest(&list_, sub_, &req);
    if (s == NATS_TIMEOUT) return payloads_;
    if (s != NATS_OK || list_.Count == 0) {
      if (s != NATS_OK && s != NATS_NOT_FOUND) check(s, "fetch (no wait)");
      natsMsgList_Destroy(&list_);
      list_ = natsMsgList{};
      jsFetchRequest_Init(&req);
      req.Batch = 1;
      req.Expires = std::max<int64_t>(wait.count(), 1) * 1'000'000;
      s = natsSubscription_FetchRequest(&list_, sub_, &req);
      if (s == NATS_TIMEOUT || s == NATS_NOT_FOUND) return payloads_;
      check(s, "fetch");
    }
    for (int i = 0; i < list_.Count; ++i) {
      payloads_.emplace_back(natsMsg_GetData(list_.Msgs[i]),
                             static_cast<std::size_t>(natsMsg_GetDataLength(list_.Msgs[i])));
    }
    return payloads_;
  }

  std::vector<char> ack(std::span<const std::size_t> which) override {
    for (const auto i : which) check(natsMsg_Ack(list_.Msgs[i], nullptr), "ack");
    check(natsConnection_FlushTimeout(conn_.nc(), k_timeout_ms), "flush acks");
    return std::vector<char>(which.size(), 1);
  }

 private:
  nats_connection conn_;
  natsSubscription* sub_ = nullptr;
  natsMsgList list_{};
  std::vector<std::string_view> payloads_;
};

// jsStreamInfo from a connection; nullptr (and `why`) on a failure.
struct stream_info_deleter {
  void operator()(jsStreamInfo* si) const { jsStreamInfo_Destroy(si); }
};
using stream_info_ptr = std::unique_ptr<jsStreamInfo, stream_info_deleter>;

stream_info_ptr stream_info(nats_connection& conn, std::string& why) {
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 2000;
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus st = js_GetStreamInfo(&si, conn.js(), k_stream, &jo, &jerr);
  if (st != NATS_OK) {
    why = fmt::format("stream info: {} (js error {})", natsStatus_GetText(st),
                      static_cast<int>(jerr));
    return nullptr;
  }
  return stream_info_ptr(si);
}

// nats-server -js alone, or --cluster N: N servers with routes to each
// other, JetStream on each (its own store dir), and an R N stream.
class nats_driver final : public clustered_driver {
 public:
  explicit nats_driver(const bench_options& o) : clustered_driver(o.cluster > 0), o_(o) {}
  ~nats_driver() override {
    proc_.stop();
    nodes_.stop_all();
    nats_Close();
  }

  std::string_view name() const override { return "nats"; }

  std::string setting(durability d) const override {
    const std::string cluster =
        o_.cluster > 0 ? fmt::format(", {}-node cluster, R{} stream", o_.cluster, o_.cluster) : "";
    return d == durability::synced ? "JetStream sync_interval: always" + cluster
                                   : "JetStream default (periodic background fsync)" + cluster;
  }

  bool supports(durability d, std::string& why) override {
    if (version().find("nats-server") == std::string::npos) {
      why = fmt::format("{} not runnable", o_.nats_server);
      return false;
    }
    if (d != durability::synced) return true;
    if (!sync_probe_) {
      // Ask the server binary whether its config accepts sync_interval: always.
      const auto conf = std::filesystem::path(o_.tmp_root) /
                        fmt::format("onceq-bench-nats-probe-{}.conf", getpid());
      {
        std::ofstream out(conf);
        out << "listen: 127.0.0.1:4222\njetstream {\n  store_dir: \"" << o_.tmp_root
            << "/onceq-bench-nats-probe\"\n  sync_interval: always\n}\n";
      }
      const auto r = run_command({o_.nats_server, "-t", "-c", conf.string()});
      std::filesystem::remove(conf);
      sync_probe_ = r.exit_code == 0 ? std::string{}
                                     : fmt::format(
                                           "{} rejects 'sync_interval: always' ({}); it "
                                           "has no synced mode (added in nats-server 2.10)",
                                           version(), trim(r.output));
    }
    why = *sync_probe_;
    return why.empty();
  }

  std::string version() override {
    if (version_.empty()) version_ = trim(run_command({o_.nats_server, "--version"}).output);
    return version_;
  }

  void start(durability d, const std::filesystem::path& dir) override {
    if (o_.cluster > 0) return start_cluster(d, dir);
    std::filesystem::create_directories(dir / "store");
    const int port = pick_free_port();
    std::vector<std::string> argv;
    if (d == durability::synced) {
      const auto conf = dir / "nats.conf";
      std::ofstream out(conf);
      out << "listen: 127.0.0.1:" << port << "\njetstream {\n  store_dir: \""
          << (dir / "store").string() << "\"\n  sync_interval: always\n}\n";
      out.close();
      argv = {o_.nats_server, "-c", conf.string()};
    } else {
      argv = {o_.nats_server,          "-js", "-a", "127.0.0.1", "-p", std::to_string(port), "-sd",
              (dir / "store").string()};
    }
    servers_ = {nats_node{"", fmt::format("nats://127.0.0.1:{}", port)}};
    proc_.start(argv, dir / "nats-server.log");
    if (!proc_.wait_for_log("Server is ready", 30s)) {
      throw std::runtime_error(
          fmt::format("nats-server did not get ready; see {}", proc_.log_path().string()));
    }
  }

  void prepare(const run_setup& s) override {
    nats_connection conn(servers_, nullptr);
    const std::string subject = subject_of(s);
    const char* subjects[] = {subject.c_str()};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = k_stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Retention = js_WorkQueuePolicy;
    sc.Storage = js_FileStorage;
    sc.Replicas = std::max(o_.cluster, 1);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = s.group.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = static_cast<int64_t>(s.lease_ms) * 1'000'000;
    cc.MaxAckPending = 65536;
    // A cluster may still be placing things right after its meta leader
    // appeared: asked again for a while.
    const auto deadline = std::chrono::steady_clock::now() + (o_.cluster > 0 ? 60s : 0s);
    for (;;) {
      jsStreamInfo* si = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      const natsStatus st = js_AddStream(&si, conn.js(), &sc, nullptr, &jerr);
      jsStreamInfo_Destroy(si);
      if (st == NATS_OK || std::chrono::steady_clock::now() > deadline) {
        check(st, "add stream", jerr);
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    for (;;) {
      jsConsumerInfo* ci = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      const natsStatus st = js_AddConsumer(&ci, conn.js(), k_stream, &cc, nullptr, &jerr);
      jsConsumerInfo_Destroy(ci);
      if (st == NATS_OK || std::chrono::steady_clock::now() > deadline) {
        check(st, "add consumer", jerr);
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    if (o_.cluster > 0) locate_leader(60s);
  }

  std::unique_ptr<producer> make_producer(const run_setup& s, int index) override {
    return std::make_unique<nats_producer>(nodes_for(index), s);
  }
  std::unique_ptr<consumer> make_consumer(const run_setup& s, int index) override {
    return std::make_unique<nats_consumer>(nodes_for(index), s);
  }

  // cluster_control
  std::size_t size() const override { return servers_.size(); }
  std::string node_name(std::size_t i) const override { return servers_.at(i).name; }

  std::size_t leader_of(const run_setup&) override {
    locate_leader(60s);
    return leader_;
  }

  // Rejoined: the stream has a leader and every other replica, node i
  // among them, is current (caught up) and was heard from within a second.
  void restart(std::size_t i, const run_setup&, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    nodes_.start(i, "Server is ready", timeout);
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        nats_connection conn(servers_, nullptr);
        while (std::chrono::steady_clock::now() < deadline) {
          const auto si = stream_info(conn, last);
          if (si && si->Cluster != nullptr && si->Cluster->Leader != nullptr &&
              *si->Cluster->Leader != '\0') {
            const auto* c = si->Cluster;
            bool seen = servers_[i].name == c->Leader;
            bool current = c->ReplicasLen == static_cast<int>(servers_.size()) - 1;
            for (int k = 0; k < c->ReplicasLen; ++k) {
              const auto* p = c->Replicas[k];
              seen = seen || servers_[i].name == p->Name;
              current = current && p->Current && !p->Offline && p->Active < 1'000'000'000;
            }
            if (seen && current) {
              locate_leader(timeout);
              return;
            }
            last = fmt::format("leader {}, {} replicas, {} current: {}", c->Leader, c->ReplicasLen,
                               servers_[i].name, seen && current);
          }
          std::this_thread::sleep_for(50ms);
        }
      } catch (const std::exception& e) {
        last = e.what();
        std::this_thread::sleep_for(50ms);
      }
    }
    throw std::runtime_error(
        fmt::format("nats server {} did not catch up in time; last: {}", servers_[i].name, last));
  }

  std::string client_placement(const run_setup&) const override {
    if (o_.cluster_spread) {
      return fmt::format("client i to server i mod {} (spread); the stream led by {}",
                         servers_.size(), servers_.at(leader_).name);
    }
    return fmt::format("every client to {} ({}), the stream leader at the start",
                       servers_.at(leader_).name, servers_.at(leader_).url);
  }

 private:
  static std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    if (const auto nl = s.find('\n'); nl != std::string::npos) s = s.substr(0, nl);
    return s;
  }

  // One config file per server (server_name, client and route listeners,
  // routes to every other server, JetStream with its own store dir), all
  // started, then the wait for a JetStream meta leader (account info is
  // refused until one is elected).
  void start_cluster(durability d, const std::filesystem::path& dir) {
    const auto n = static_cast<std::size_t>(o_.cluster);
    std::vector<int> client_ports;
    std::vector<int> route_ports;
    servers_.clear();
    for (std::size_t k = 0; k < n; ++k) {
      client_ports.push_back(pick_free_port());
      route_ports.push_back(pick_free_port());
      servers_.push_back(nats_node{fmt::format("n{}", k + 1),
                                   fmt::format("nats://127.0.0.1:{}", client_ports[k])});
    }
    nodes_ = cluster_nodes{};
    for (std::size_t k = 0; k < n; ++k) {
      const auto store = dir / servers_[k].name;
      std::filesystem::create_directories(store);
      std::string routes;
      for (std::size_t j = 0; j < n; ++j) {
        if (j == k) continue;
        if (!routes.empty()) routes += ", ";
        routes += fmt::format("\"nats://127.0.0.1:{}\"", route_ports[j]);
      }
      const auto conf = dir / fmt::format("{}.conf", servers_[k].name);
      std::ofstream out(conf);
      out << fmt::format(
          "server_name: {}\nlisten: 127.0.0.1:{}\njetstream {{\n  store_dir: \"{}\"\n{}}}\n"
          "cluster {{\n  name: onceq-bench\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n",
          servers_[k].name, client_ports[k], store.string(),
          d == durability::synced ? "  sync_interval: always\n" : "", route_ports[k], routes);
      out.close();
      if (!out) throw std::runtime_error(fmt::format("cannot write {}", conf.string()));
      nodes_.add(servers_[k].name, {o_.nats_server, "-c", conf.string()}, dir);
    }
    nodes_.start_all("Server is ready", 30s);

    nats_connection conn(servers_, nullptr);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      jsOptions jo;
      jsOptions_Init(&jo);
      jo.Wait = 2000;
      jsAccountInfo* ai = nullptr;
      jsErrCode jerr = static_cast<jsErrCode>(0);
      const natsStatus st = js_GetAccountInfo(&ai, conn.js(), &jo, &jerr);
      jsAccountInfo_Destroy(ai);
      if (st == NATS_OK) break;
      if (std::chrono::steady_clock::now() > deadline) {
        check(st, "JetStream meta leader (account info)", jerr);
      }
      std::this_thread::sleep_for(100ms);
    }
  }

  // The stream leader (by server_name) as a node index, retried while the
  // stream has none.
  void locate_leader(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        nats_connection conn(servers_, nullptr);
        const auto si = stream_info(conn, last);
        if (si && si->Cluster != nullptr && si->Cluster->Leader != nullptr) {
          for (std::size_t k = 0; k < servers_.size(); ++k) {
            if (servers_[k].name == si->Cluster->Leader) {
              leader_ = k;
              return;
            }
          }
          last = fmt::format("leader '{}'", si->Cluster->Leader);
        }
      } catch (const std::exception& e) {
        last = e.what();
      }
      std::this_thread::sleep_for(50ms);
    }
    throw std::runtime_error(
        fmt::format("nats: stream {} has no leader; last: {}", k_stream, last));
  }

  // The servers a client uses, the first one first: the single server; in
  // a cluster the stream leader (or server index mod N with
  // --cluster-clients spread), then the others in order from there.
  std::vector<nats_node> nodes_for(int index) const {
    if (o_.cluster == 0) return servers_;
    const std::size_t n = servers_.size();
    const std::size_t first = o_.cluster_spread ? static_cast<std::size_t>(index) % n : leader_;
    std::vector<nats_node> out;
    for (std::size_t k = 0; k < n; ++k) out.push_back(servers_[(first + k) % n]);
    return out;
  }

  bench_options o_;
  std::vector<nats_node> servers_;
  std::size_t leader_ = 0;  // the stream leader, as last located
  std::string version_;
  std::optional<std::string> sync_probe_;
};

}  // namespace

std::unique_ptr<system_driver> make_nats_driver(const bench_options& o) {
  return std::make_unique<nats_driver>(o);
}

}  // namespace onceq::bench
