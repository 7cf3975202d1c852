#include "broker/log_entry.hpp"

#include <string>
#include <type_traits>
#include <utility>

#include "base/bytes.hpp"

namespace onceq {

namespace {

// Each struct's fields are listed once, in fields(io, x), and io is either
// an encoder or a decoder: the order written is the order read, by
// construction. Field order is part of the format (k_log_entry_version).

class encoder {
 public:
  // The format every entry is written in; fields() reads io.version() to
  // know which fields an entry of an older format lacks.
  std::uint8_t version() const { return k_log_entry_version; }
  void operator()(const std::string& s) { w_.str(s); }
  void operator()(bool b) { w_.byte(b ? 1 : 0); }
  template <class T>
  requires std::is_integral_v<T>
  void operator()(T v) {
    if constexpr (std::is_signed_v<T>) {
      w_.svarint(static_cast<std::int64_t>(v));
    } else {
      w_.varint(static_cast<std::uint64_t>(v));
    }
  }
  template <class E>
  requires std::is_enum_v<E>
  void operator()(E e) { w_.byte(static_cast<std::uint8_t>(e)); }
  template <class T>
  void operator()(const std::optional<T>& o) {
    w_.byte(o ? 1 : 0);
    if (o) (*this)(*o);
  }
  template <class T>
  void operator()(const std::vector<T>& v) {
    w_.varint(v.size());
    for (const auto& x : v) (*this)(x);
  }
  template <class T>
  requires std::is_class_v<T>
  void operator()(const T& x) {
    fields(*this, const_cast<T&>(x));  // fields() only reads through an encoder
  }
  std::string take() { return w_.take(); }

 private:
  byte_writer w_;
};

class decoder {
 public:
  explicit decoder(std::string_view in) : r_(in) {}
  std::uint8_t version() const { return version_; }
  void set_version(std::uint8_t v) { version_ = v; }
  void operator()(std::string& s) { r_.str(s); }
  void operator()(bool& b) {
    std::uint8_t v = 0;
    if (r_.byte(v) && v > 1) bad_ = true;
    b = v == 1;
  }
  template <class T>
  requires std::is_integral_v<T>
  void operator()(T& v) {
    if constexpr (std::is_signed_v<T>) {
      std::int64_t x = 0;
      r_.svarint(x);
      v = static_cast<T>(x);
      if (static_cast<std::int64_t>(v) != x) bad_ = true;
    } else {
      std::uint64_t x = 0;
      r_.varint(x);
      v = static_cast<T>(x);
      if (static_cast<std::uint64_t>(v) != x) bad_ = true;
    }
  }
  template <class E>
  requires std::is_enum_v<E>
  void operator()(E& e) {
    std::uint8_t v = 0;
    r_.byte(v);
    e = static_cast<E>(v);
  }
  template <class T>
  void operator()(std::optional<T>& o) {
    bool present = false;
    (*this)(present);
    if (!present) {
      o.reset();
      return;
    }
    o.emplace();
    (*this)(*o);
  }
  template <class T>
  void operator()(std::vector<T>& v) {
    std::uint64_t n = 0;
    if (!r_.varint(n)) return;
    // Every element takes at least one byte: a count past what is left is
    // corrupt, not a reason to allocate.
    if (n > k_max_elements) {
      bad_ = true;
      return;
    }
    v.clear();
    for (std::uint64_t i = 0; i < n && ok(); ++i) (*this)(v.emplace_back());
  }
  template <class T>
  requires std::is_class_v<T>
  void operator()(T& x) { fields(*this, x); }
  bool ok() const { return r_.ok() && !bad_; }
  bool at_end() const { return r_.at_end(); }
  void bad() { bad_ = true; }

 private:
  static constexpr std::uint64_t k_max_elements = 1u << 20;
  byte_reader r_;
  bool bad_ = false;
  std::uint8_t version_ = k_log_entry_version;
};

template <class IO>
void fields(IO& io, topic_settings& s) {
  io(s.lease_ms), io(s.max_attempts), io(s.backoff_ms), io(s.max_backoff_ms);
  io(s.key_ttl_ms), io(s.dedup_window_ms), io(s.retention_ms);
  io(s.max_backlog_messages), io(s.max_backlog_bytes), io(s.max_inflight);
  io(s.idempotency_key_fields), io(s.idempotency_key_include_topic);
  io(s.idempotency_key_optional), io(s.dedup_by_content), io(s.key_conflict);
  io(s.key_history), io(s.replay_window_ms);
  if (io.version() >= 2) io(s.ordering);
}
template <class IO>
void fields(IO& io, create_topic_cmd& c) {
  io(c.name), io(c.partitions), io(c.settings);
}
template <class IO>
void fields(IO& io, delete_topic_cmd& c) {
  io(c.name);
}
template <class IO>
void fields(IO&, tick_cmd&) {}
template <class IO>
void fields(IO& io, retry_policy& r) {
  io(r.max_attempts), io(r.backoff_ms), io(r.max_backoff_ms);
}
template <class IO>
void fields(IO& io, message_in& m) {
  io(m.key), io(m.value), io(m.envelope_json), io(m.idempotency_key), io(m.tenant_id);
  io(m.msg_id), io(m.partition_override), io(m.key_ttl_ms), io(m.delay_ms), io(m.deadline_ms);
  io(m.retry);
}
template <class IO>
void fields(IO& io, produce_cmd& c) {
  io(c.topic), io(c.messages), io(c.idempotency_header), io(c.skip_if_committed);
}
template <class IO>
void fields(IO& io, consume_cmd& c) {
  io(c.topic), io(c.group), io(c.owner), io(c.lease_ms), io(c.max_messages), io(c.deadline_ms);
}
template <class IO>
void fields(IO& io, delivery_ref& r) {
  io(r.topic), io(r.group), io(r.owner), io(r.partition), io(r.offset), io(r.attempts);
  io(r.fencing_token);
}
template <class IO>
void fields(IO& io, step_message& m) {
  io(m.topic), io(m.message);
}
template <class IO>
void fields(IO& io, ack_cmd& c) {
  io(c.ref), io(c.result_json);
  if (io.version() >= 2) io(c.produce);
}
template <class IO>
void fields(IO& io, ack_item& a) {
  io(a.partition), io(a.offset), io(a.attempts), io(a.result_json), io(a.fencing_token);
  if (io.version() >= 2) io(a.produce);
}
template <class IO>
void fields(IO& io, outbox_entry& e) {
  io(e.seq), io(e.msg), io(e.created_at_ms);
}
template <class IO>
void fields(IO& io, outbox_append_cmd& c) {
  io(c.source), io(c.entries);
}
template <class IO>
void fields(IO& io, outbox_appended& a) {
  io(a.seq), io(a.code), io(a.message), io(a.stored), io(a.duplicate), io(a.partition);
  io(a.offset);
}
template <class IO>
void fields(IO& io, outbox_done_cmd& c) {
  io(c.done);
}
template <class IO>
void fields(IO& io, ack_batch_cmd& c) {
  io(c.topic), io(c.group), io(c.owner), io(c.acks);
}
template <class IO>
void fields(IO& io, consume_after_acks_cmd& c) {
  io(c.acks), io(c.consume);
}
template <class IO>
void fields(IO& io, nack_cmd& c) {
  io(c.ref), io(c.reason), io(c.delay_ms);
}
template <class IO>
void fields(IO& io, extend_cmd& c) {
  io(c.ref), io(c.lease_ms);
}
template <class IO>
void fields(IO& io, redrive_cmd& c) {
  io(c.topic), io(c.max_messages);
}
template <class IO>
void fields(IO& io, replay_position& p) {
  io(p.partition), io(p.offset);
}
template <class IO>
void fields(IO& io, replay_cmd& c) {
  io(c.topic), io(c.group), io(c.from_ms), io(c.to_ms), io(c.from_offset), io(c.to_offset);
  io(c.partition), io(c.dry_run), io(c.max_messages), io(c.cursor);
}

// log_tag <-> the variant's alternative, in one table.
template <class T>
struct tag_for;
#define ONCEQ_LOG_TAG(T, TAG)                      \
  template <>                                      \
  struct tag_for<T> {                              \
    static constexpr log_tag value = log_tag::TAG; \
  };
ONCEQ_LOG_TAG(tick_cmd, tick)
ONCEQ_LOG_TAG(create_topic_cmd, create_topic)
ONCEQ_LOG_TAG(delete_topic_cmd, delete_topic)
ONCEQ_LOG_TAG(produce_cmd, produce)
ONCEQ_LOG_TAG(consume_cmd, consume)
ONCEQ_LOG_TAG(consume_after_acks_cmd, consume_after_acks)
ONCEQ_LOG_TAG(ack_cmd, ack)
ONCEQ_LOG_TAG(ack_batch_cmd, ack_batch)
ONCEQ_LOG_TAG(nack_cmd, nack)
ONCEQ_LOG_TAG(extend_cmd, extend)
ONCEQ_LOG_TAG(redrive_cmd, redrive)
ONCEQ_LOG_TAG(replay_cmd, replay)
ONCEQ_LOG_TAG(outbox_append_cmd, outbox_append)
ONCEQ_LOG_TAG(outbox_done_cmd, outbox_done)
#undef ONCEQ_LOG_TAG

// Sets out to the alternative whose tag is tag; false if none is.
template <std::size_t I = 0>
bool emplace_tag(log_command& out, log_tag tag) {
  if constexpr (I == std::variant_size_v<log_command>) {
    return false;
  } else {
    using T = std::variant_alternative_t<I, log_command>;
    if (tag_for<T>::value == tag) {
      out.emplace<I>();
      return true;
    }
    return emplace_tag<I + 1>(out, tag);
  }
}

// The enums a command carries, checked after decoding.
bool valid(const log_command& cmd) {
  if (const auto* c = std::get_if<create_topic_cmd>(&cmd)) {
    const auto k = c->settings.key_conflict;
    const auto o = c->settings.ordering;
    return (k == topic_settings::conflict::hold || k == topic_settings::conflict::supersede) &&
           (o == topic_settings::ordering_mode::none || o == topic_settings::ordering_mode::key);
  }
  return true;
}

error corrupt(std::string_view what) {
  return make_error(errc::internal, std::string("corrupt log entry: ") + std::string(what));
}

}  // namespace

log_tag tag_of(const log_command& cmd) noexcept {
  return std::visit([](const auto& c) { return tag_for<std::decay_t<decltype(c)>>::value; }, cmd);
}

std::string encode_entry(const log_entry& e) {
  encoder io;
  io(k_log_entry_version);
  io(tag_of(e.cmd));
  io(e.now_ms);
  std::visit([&io](const auto& c) { io(c); }, e.cmd);
  return io.take();
}

result<log_entry> decode_entry(std::string_view bytes) {
  decoder io(bytes);
  std::uint8_t version = 0;
  io(version);
  if (!io.ok()) return corrupt("empty");
  io.set_version(version);
  if (version < 1 || version > k_log_entry_version) {
    return make_error(errc::failed_precondition,
                      "log entry format " + std::to_string(version) +
                          " is not known to this onceq (it reads format " +
                          std::to_string(k_log_entry_version) + "): upgrade this node");
  }
  log_tag tag{};
  io(tag);
  if (!io.ok()) return corrupt("no command tag");
  log_entry e;
  if (!emplace_tag(e.cmd, tag)) {
    return make_error(errc::failed_precondition,
                      "log entry command " + std::to_string(static_cast<int>(tag)) +
                          " is not known to this onceq: upgrade this node");
  }
  io(e.now_ms);
  std::visit([&io](auto& c) { io(c); }, e.cmd);
  if (!io.ok()) return corrupt("truncated or malformed fields");
  if (!io.at_end()) return corrupt("bytes after the command");
  if (!valid(e.cmd)) return corrupt("a field out of range");
  return e;
}

std::string encode_message(const message_in& m) {
  encoder io;
  io(k_log_entry_version);
  io(m);
  return io.take();
}

result<message_in> decode_message(std::string_view bytes) {
  decoder io(bytes);
  std::uint8_t version = 0;
  io(version);
  if (!io.ok() || version < 1 || version > k_log_entry_version) return corrupt("message format");
  io.set_version(version);
  message_in m;
  io(m);
  if (!io.ok() || !io.at_end()) return corrupt("message");
  return m;
}

}  // namespace onceq
