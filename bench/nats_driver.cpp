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

// One connection plus its JetStream context.
class nats_connection {
 public:
  nats_connection(int port, jsOptions* jo) {
    natsOptions* opts = nullptr;
    check(natsOptions_Create(&opts), "options");
    const auto url = fmt::format("nats://127.0.0.1:{}", port);
    natsOptions_SetURL(opts, url.c_str());
    natsOptions_SetTimeout(opts, 10000);
    natsOptions_SetAllowReconnect(opts, false);
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
  nats_producer(int port, const run_setup& s) : subject_(subject_of(s)) {
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = k_timeout_ms;
    jo.PublishAsync.MaxPending = static_cast<int64_t>(std::max<std::size_t>(s.batch * 2, 256));
    jo.PublishAsync.AckHandler = &nats_producer::on_ack;
    jo.PublishAsync.AckHandlerClosure = this;
    conn_ = std::make_unique<nats_connection>(port, &jo);
  }

  std::size_t produce(std::span<const bench_message> batch) override {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = k_timeout_ms;
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

 private:
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
  std::unique_ptr<nats_connection> conn_;
  std::atomic<std::size_t> duplicates_{0};
  std::atomic<std::size_t> errors_{0};
  std::mutex mu_;
  std::string first_error_;
};

class nats_consumer final : public consumer {
 public:
  nats_consumer(int port, const run_setup& s) : conn_(port, nullptr) {
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

class nats_driver final : public system_driver {
 public:
  explicit nats_driver(const bench_options& o) : o_(o) {}
  ~nats_driver() override {
    proc_.stop();
    nats_Close();
  }

  std::string_view name() const override { return "nats"; }

  std::string setting(durability d) const override {
    return d == durability::synced ? "JetStream sync_interval: always"
                                   : "JetStream default (periodic background fsync)";
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
    std::filesystem::create_directories(dir / "store");
    port_ = pick_free_port();
    std::vector<std::string> argv;
    if (d == durability::synced) {
      const auto conf = dir / "nats.conf";
      std::ofstream out(conf);
      out << "listen: 127.0.0.1:" << port_ << "\njetstream {\n  store_dir: \""
          << (dir / "store").string() << "\"\n  sync_interval: always\n}\n";
      out.close();
      argv = {o_.nats_server, "-c", conf.string()};
    } else {
      argv = {o_.nats_server,          "-js", "-a", "127.0.0.1", "-p", std::to_string(port_), "-sd",
              (dir / "store").string()};
    }
    proc_.start(argv, dir / "nats-server.log");
    if (!proc_.wait_for_log("Server is ready", 30s)) {
      throw std::runtime_error(
          fmt::format("nats-server did not get ready; see {}", proc_.log_path().string()));
    }
  }

  void prepare(const run_setup& s) override {
    nats_connection conn(port_, nullptr);
    const std::string subject = subject_of(s);
    const char* subjects[] = {subject.c_str()};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = k_stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Retention = js_WorkQueuePolicy;
    sc.Storage = js_FileStorage;
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    check(js_AddStream(&si, conn.js(), &sc, nullptr, &jerr), "add stream", jerr);
    jsStreamInfo_Destroy(si);

    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = s.group.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = static_cast<int64_t>(s.lease_ms) * 1'000'000;
    cc.MaxAckPending = 65536;
    jsConsumerInfo* ci = nullptr;
    check(js_AddConsumer(&ci, conn.js(), k_stream, &cc, nullptr, &jerr), "add consumer", jerr);
    jsConsumerInfo_Destroy(ci);
  }

  std::unique_ptr<producer> make_producer(const run_setup& s, int) override {
    return std::make_unique<nats_producer>(port_, s);
  }
  std::unique_ptr<consumer> make_consumer(const run_setup& s, int) override {
    return std::make_unique<nats_consumer>(port_, s);
  }

  server_process& process() override { return proc_; }
  std::string stop() override { return proc_.stop(); }

 private:
  static std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    if (const auto nl = s.find('\n'); nl != std::string::npos) s = s.substr(0, nl);
    return s;
  }

  bench_options o_;
  server_process proc_;
  int port_ = 0;
  std::string version_;
  std::optional<std::string> sync_probe_;
};

}  // namespace

std::unique_ptr<system_driver> make_nats_driver(const bench_options& o) {
  return std::make_unique<nats_driver>(o);
}

}  // namespace onceq::bench
