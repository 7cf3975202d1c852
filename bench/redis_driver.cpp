#include "bench/redis_driver.hpp"

#include <hiredis/hiredis.h>

#include <fmt/format.h>

#include <stdexcept>
#include <thread>

namespace onceq::bench {
namespace {

using namespace std::chrono_literals;

struct reply_deleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// One blocking hiredis connection with a 30 s socket timeout.
class redis_connection {
 public:
  explicit redis_connection(int port) {
    timeval connect_timeout{10, 0};
    ctx_ = redisConnectWithTimeout("127.0.0.1", port, connect_timeout);
    if (ctx_ == nullptr || ctx_->err != 0) {
      const std::string err = ctx_ != nullptr ? ctx_->errstr : "out of memory";
      if (ctx_ != nullptr) redisFree(ctx_);
      throw std::runtime_error(fmt::format("redis connect: {}", err));
    }
    timeval io_timeout{30, 0};
    redisSetTimeout(ctx_, io_timeout);
  }
  redis_connection(const redis_connection&) = delete;
  redis_connection& operator=(const redis_connection&) = delete;
  ~redis_connection() { redisFree(ctx_); }

  // Appends one command to the pipeline.
  void append(const std::vector<std::string_view>& args) {
    fill(args);
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data()) !=
        REDIS_OK) {
      throw std::runtime_error(fmt::format("redis append: {}", ctx_->errstr));
    }
  }

  // Reads the next pipelined reply; throws on I/O errors and error replies.
  reply_ptr next(std::string_view what) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK) {
      throw std::runtime_error(fmt::format("redis {}: {}", what, ctx_->errstr));
    }
    reply_ptr r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR) {
      throw std::runtime_error(fmt::format("redis {}: {}", what, std::string(r->str, r->len)));
    }
    return r;
  }

  reply_ptr command(const std::vector<std::string_view>& args) {
    append(args);
    return next(args.empty() ? "command" : args[0]);
  }

 private:
  void fill(const std::vector<std::string_view>& args) {
    argv_.clear();
    lens_.clear();
    for (const auto& a : args) {
      argv_.push_back(a.data());
      lens_.push_back(a.size());
    }
  }

  redisContext* ctx_ = nullptr;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

class redis_producer final : public producer {
 public:
  redis_producer(int port, const run_setup& s) : conn_(port), key_(s.topic) {}

  std::size_t produce(std::span<const bench_message> batch) override {
    for (const auto& m : batch) {
      conn_.append({"XADD", key_, "*", "k", m.key, "m", m.msg_id, "p", m.payload});
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto r = conn_.next("XADD");
      if (r->type != REDIS_REPLY_STRING) throw std::runtime_error("redis XADD: unexpected reply");
    }
    return 0;  // Redis has no produce dedup
  }

 private:
  redis_connection conn_;
  std::string key_;
};

class redis_consumer final : public consumer {
 public:
  redis_consumer(int port, const run_setup& s, int index)
      : conn_(port),
        setup_(s),
        name_(fmt::format("c{}", index)),
        lease_ms_(std::to_string(s.lease_ms)),
        last_claim_(std::chrono::steady_clock::now()) {}

  const std::vector<std::string_view>& fetch(std::size_t max,
                                             std::chrono::milliseconds wait) override {
    // Piggyback: the previous batch's XACK goes out in the same write as
    // this fetch's first command, and its reply is read first (one round
    // trip), as a Redis client pipelines them.
    if (!held_.empty()) {
      std::vector<std::string_view> args{"XACK", setup_.topic, setup_.group};
      for (const auto& id : held_) args.push_back(id);
      conn_.append(args);
    }
    payloads_.clear();
    ids_.clear();
    reply_.reset();
    const std::string count = std::to_string(max);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_claim_ >= std::chrono::milliseconds(setup_.lease_ms / 2)) {
      last_claim_ = now;
      // Entries another consumer received but never acked, idle for a lease.
      reply_ = roundtrip(
          {"XAUTOCLAIM", setup_.topic, setup_.group, name_, lease_ms_, "0-0", "COUNT", count});
      if (reply_->type == REDIS_REPLY_ARRAY && reply_->elements >= 2)
        read_entries(reply_->element[1]);
      // A full batch means more may be waiting: claim again on the next fetch.
      if (payloads_.size() == max) last_claim_ = now - std::chrono::milliseconds(setup_.lease_ms);
      if (!payloads_.empty()) return payloads_;
    }
    const std::string block = std::to_string(wait.count());
    reply_ = roundtrip({"XREADGROUP", "GROUP", setup_.group, name_, "COUNT", count, "BLOCK", block,
                        "STREAMS", setup_.topic, ">"});
    // [[stream, [[id, [field, value, ...]], ...]]] or nil on timeout.
    if (reply_->type == REDIS_REPLY_ARRAY && reply_->elements >= 1) {
      const redisReply* stream = reply_->element[0];
      if (stream->type == REDIS_REPLY_ARRAY && stream->elements >= 2)
        read_entries(stream->element[1]);
    }
    return payloads_;
  }

  std::vector<char> ack(std::span<const std::size_t> which) override {
    if (which.empty()) return {};
    if (setup_.mode == consume_mode::piggyback) {
      for (const auto i : which) held_.emplace_back(ids_.at(i));
      return std::vector<char>(which.size(), 1);
    }
    std::vector<std::string_view> args{"XACK", setup_.topic, setup_.group};
    for (const auto i : which) args.push_back(ids_.at(i));
    conn_.command(args);
    return std::vector<char>(which.size(), 1);
  }

  void flush() override {
    if (held_.empty()) return;
    std::vector<std::string_view> args{"XACK", setup_.topic, setup_.group};
    for (const auto& id : held_) args.push_back(id);
    check_acked(conn_.command(args), held_.size());
    held_.clear();
  }

 private:
  // One command; first the reply of a held XACK appended before it.
  reply_ptr roundtrip(const std::vector<std::string_view>& args) {
    conn_.append(args);
    if (!held_.empty()) {
      check_acked(conn_.next("XACK"), held_.size());
      held_.clear();
    }
    return conn_.next(args[0]);
  }

  static void check_acked(const reply_ptr& r, std::size_t n) {
    if (r->type != REDIS_REPLY_INTEGER || static_cast<std::size_t>(r->integer) != n) {
      throw std::runtime_error(fmt::format("redis XACK: {} of {} acked",
                                           r->type == REDIS_REPLY_INTEGER ? r->integer : -1, n));
    }
  }

  void read_entries(const redisReply* entries) {
    if (entries->type != REDIS_REPLY_ARRAY) return;
    for (std::size_t i = 0; i < entries->elements; ++i) {
      const redisReply* e = entries->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 2) continue;
      const redisReply* fields = e->element[1];
      if (fields->type != REDIS_REPLY_ARRAY) continue;  // deleted entry
      for (std::size_t f = 0; f + 1 < fields->elements; f += 2) {
        if (std::string_view(fields->element[f]->str, fields->element[f]->len) == "p") {
          ids_.emplace_back(e->element[0]->str, e->element[0]->len);
          payloads_.emplace_back(fields->element[f + 1]->str, fields->element[f + 1]->len);
          break;
        }
      }
    }
  }

  redis_connection conn_;
  run_setup setup_;
  std::string name_;
  std::string lease_ms_;
  std::chrono::steady_clock::time_point last_claim_;
  reply_ptr reply_;
  std::vector<std::string_view> payloads_;
  std::vector<std::string_view> ids_;
  std::vector<std::string> held_;  // piggyback: ids acked with the next fetch
};

class redis_driver final : public system_driver {
 public:
  explicit redis_driver(const bench_options& o) : o_(o) {}

  std::string_view name() const override { return "redis"; }

  std::string setting(durability d) const override {
    return fmt::format("appendonly yes, appendfsync {}", fsync_of(d));
  }

  bool supports(durability, std::string& why) override {
    if (version().find("Redis server") == std::string::npos) {
      why = fmt::format("{} not runnable", o_.redis_server);
      return false;
    }
    return true;
  }

  std::string version() override {
    if (version_.empty()) {
      version_ = run_command({o_.redis_server, "--version"}).output;
      while (!version_.empty() && (version_.back() == '\n' || version_.back() == ' ')) {
        version_.pop_back();
      }
    }
    return version_;
  }

  void start(durability d, const std::filesystem::path& dir) override {
    std::filesystem::create_directories(dir / "data");
    port_ = pick_free_port();
    proc_.start({o_.redis_server, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save",
                 "", "--appendonly", "yes", "--appendfsync", fsync_of(d), "--dir",
                 (dir / "data").string(), "--daemonize", "no", "--logfile", ""},
                dir / "redis-server.log");
    if (!proc_.wait_for_log("Ready to accept connections", 30s)) {
      throw std::runtime_error(
          fmt::format("redis-server did not get ready; see {}", proc_.log_path().string()));
    }
  }

  void prepare(const run_setup& s) override {
    redis_connection conn(port_);
    conn.command({"XGROUP", "CREATE", s.topic, s.group, "0", "MKSTREAM"});
  }

  std::unique_ptr<producer> make_producer(const run_setup& s, int) override {
    return std::make_unique<redis_producer>(port_, s);
  }
  std::unique_ptr<consumer> make_consumer(const run_setup& s, int index) override {
    return std::make_unique<redis_consumer>(port_, s, index);
  }

  server_process& process() override { return proc_; }
  std::string stop() override { return proc_.stop(); }

 private:
  static std::string fsync_of(durability d) {
    return d == durability::synced ? "always" : "everysec";
  }

  bench_options o_;
  server_process proc_;
  int port_ = 0;
  std::string version_;
};

}  // namespace

std::unique_ptr<system_driver> make_redis_driver(const bench_options& o) {
  return std::make_unique<redis_driver>(o);
}

}  // namespace onceq::bench
