#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/clock.hpp"
#include "broker/broker.hpp"
#include "storage/memory_store.hpp"

namespace onceq::testing {

// A broker over an in-memory store with a manual clock. restart() builds a
// new broker over the same store, as a process restart would.
class BrokerTest : public ::testing::Test {
 protected:
  BrokerTest() { restart(); }

  void restart(broker_options opts = {}) {
    broker_.reset();
    broker_ = std::make_unique<broker>(store_, clock_, inspector_, opts);
    auto r = broker_->recover();
    ASSERT_TRUE(r.ok()) << r.err().message;
  }

  broker& b() { return *broker_; }

  void create(const std::string& name, std::int64_t partitions = 1, topic_settings s = {}) {
    auto r = b().create_topic(create_topic_cmd{name, partitions, s});
    ASSERT_TRUE(r.ok()) << r.err().message;
  }

  static message_in msg(std::string value, std::string idem = {}) {
    message_in m;
    m.value = std::move(value);
    m.idempotency_key = std::move(idem);
    return m;
  }

  produced produce(const std::string& topic, message_in m, std::string header = {}) {
    produce_cmd cmd{topic, {std::move(m)}, std::move(header), {}};
    auto r = b().produce(cmd);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
    return r.ok() ? r->results.at(0) : produced{};
  }

  produced produce(const std::string& topic, std::string value, std::string idem = {}) {
    return produce(topic, msg(std::move(value), std::move(idem)));
  }

  std::vector<delivery> consume(const std::string& topic, const std::string& group,
                                const std::string& owner, std::int64_t max = 10,
                                std::optional<std::int64_t> lease_ms = std::nullopt) {
    auto r = b().consume(consume_cmd{topic, group, owner, lease_ms, max, {}});
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
    return r.ok() ? std::move(*r) : std::vector<delivery>{};
  }

  // got is one message, delivered for the attempts-th time after last_error.
  static void expect_redelivered(const std::vector<delivery>& got, std::int64_t attempts,
                                 const std::string& last_error) {
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].attempts, attempts);
    EXPECT_EQ(got[0].last_error, last_error);
  }

  static delivery_ref ref(const delivery& d, const std::string& group, const std::string& owner,
                          std::optional<std::int64_t> attempts = std::nullopt) {
    return delivery_ref{d.topic, group, owner, d.partition, d.offset, attempts, {}};
  }

  result<void> ack(const delivery& d, const std::string& group, const std::string& owner,
                   std::string result_json = {},
                   std::optional<std::int64_t> attempts = std::nullopt) {
    auto r = b().ack(ack_cmd{ref(d, group, owner, attempts), std::move(result_json), {}});
    if (!r.ok()) return std::move(r).err();
    return {};
  }

  result<void> nack(const delivery& d, const std::string& group, const std::string& owner,
                    std::optional<std::int64_t> delay_ms = std::nullopt,
                    std::string reason = "nack") {
    return b().nack(nack_cmd{ref(d, group, owner), std::move(reason), delay_ms});
  }

  key_info key(const std::string& topic, const std::string& group, const std::string& k,
               const std::string& tenant = {}) {
    auto r = b().get_key(key_query{topic, group, k, tenant});
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
    return r.ok() ? *r : key_info{};
  }

  group_stats stats(const std::string& topic, const std::string& group) {
    auto t = b().get_topic(topic);
    EXPECT_TRUE(t.ok());
    if (!t.ok()) return {};
    auto it = t->groups.find(group);
    return it == t->groups.end() ? group_stats{} : it->second;
  }

  void advance(millis ms) {
    clock_.advance(ms);
    b().tick();
  }

  manual_clock clock_;
  storage::memory_store store_;
  const message_inspector* inspector_ = nullptr;  // set, then restart(), to use one
  std::unique_ptr<broker> broker_;
};

}  // namespace onceq::testing
