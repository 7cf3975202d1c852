// onceq-soak: drives the broker in-process over the real RocksDB store with
// a steady produce -> consume -> ack load and prints disk usage as it goes,
// to show that retention (acked-by-every-group deletion), key TTL and the
// dedup window keep the disk flat. No HTTP: this measures storage, not the
// wire.
//
//   onceq-soak [--messages N] [--batch B] [--ttl-ms T] [--dir DIR]

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "broker/broker.hpp"
#include "storage/rocksdb/rocksdb_store.hpp"

namespace {

struct soak_options {
  std::int64_t messages = 1'000'000;
  std::int64_t batch = 1000;
  std::int64_t ttl_ms = 10'000;  // key TTL and dedup window
  std::string dir;
};

bool parse(int argc, char** argv, soak_options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--messages" && (v = next())) {
      o.messages = std::atoll(v);
    } else if (a == "--batch" && (v = next())) {
      o.batch = std::atoll(v);
    } else if (a == "--ttl-ms" && (v = next())) {
      o.ttl_ms = std::atoll(v);
    } else if (a == "--dir" && (v = next())) {
      o.dir = v;
    } else {
      fmt::print(stderr, "usage: onceq-soak [--messages N] [--batch B] [--ttl-ms T] [--dir DIR]\n");
      return false;
    }
  }
  return o.messages > 0 && o.batch > 0 && o.batch <= 1000 && o.ttl_ms >= 0;
}

void fail(std::string_view what, const onceq::error& e) {
  fmt::print(stderr, "onceq-soak: {}: {}\n", what, e.message);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  soak_options o;
  if (!parse(argc, argv, o)) return 2;
  bool own_dir = o.dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/onceq-soak-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    o.dir = tmpl;
  }
  onceq::system_clock clock;
  onceq::storage::storage_options so;
  so.data_dir = o.dir;
  so.fsync.kind = onceq::storage::fsync_policy::mode::none;
  so.time = &clock;
  auto opened = onceq::storage::rocksdb_store::open(so);
  if (!opened.ok()) fail("open", opened.err());
  auto& store = **opened;
  onceq::broker b(store, clock, nullptr);
  if (auto r = b.recover(); !r.ok()) fail("recover", r.err());

  onceq::topic_settings s;
  s.key_ttl_ms = o.ttl_ms;
  s.dedup_window_ms = o.ttl_ms;
  if (auto r = b.create_topic({"soak", 4, s}); !r.ok()) fail("create", r.err());

  const std::string payload(256, 'x');
  auto start = std::chrono::steady_clock::now();
  std::uint64_t first_sample = 0, peak = 0, last = 0;
  std::int64_t done = 0;
  fmt::print("{:>10} {:>14} {:>10}\n", "messages", "disk_bytes", "elapsed_s");
  while (done < o.messages) {
    onceq::produce_cmd pc;
    pc.topic = "soak";
    auto n = std::min(o.batch, o.messages - done);
    for (std::int64_t i = 0; i < n; ++i) {
      onceq::message_in m;
      m.value = payload;
      m.key = fmt::format("k{}", (done + i) % 64);
      m.idempotency_key = fmt::format("work-{}", done + i);
      m.msg_id = fmt::format("msg-{}", done + i);
      pc.messages.push_back(std::move(m));
    }
    if (auto r = b.produce(pc); !r.ok()) fail("produce", r.err());
    std::int64_t acked = 0;
    while (acked < n) {
      onceq::consume_cmd cc;
      cc.topic = "soak";
      cc.group = "workers";
      cc.owner = "w1";
      cc.max_messages = 1000;
      auto got = b.consume(cc);
      if (!got.ok()) fail("consume", got.err());
      if (got->empty()) break;
      onceq::ack_batch_cmd ac{"soak", "workers", "w1", {}};
      for (auto& d : *got) {
        onceq::ack_item a;
        a.partition = d.partition;
        a.offset = d.offset;
        a.attempts = d.attempts;
        ac.acks.push_back(std::move(a));
      }
      auto r = b.ack_batch(ac);
      if (!r.ok()) fail("ack", r.err());
      acked += static_cast<std::int64_t>(got->size());
    }
    b.tick();
    done += n;
    if (done % 100'000 == 0 || done == o.messages) {
      last = store.disk_bytes();
      if (first_sample == 0) first_sample = last;
      peak = std::max(peak, last);
      auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print("{:>10} {:>14} {:>10.1f}\n", done, last, secs);
      std::fflush(stdout);
    }
  }
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(
      "\nmessages={} elapsed_s={:.1f} rate={:.0f}/s disk_at_100k={} disk_peak={} disk_end={}\n",
      done, secs, static_cast<double>(done) / secs, first_sample, peak, last);
  if (own_dir) {
    std::error_code ec;
    opened->reset();
    std::filesystem::remove_all(o.dir, ec);
  }
  return 0;
}
