#include "http/codec/ack.hpp"

#include <optional>

#include <fmt/format.h>

#include "broker/limits.hpp"
#include "http/codec/detail.hpp"
#include "http/json_write.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

namespace {

// [{"topic":..,"partition":..,"offset":..,"duplicate":..,"status":"stored"}, ...]; a message
// its target shard has not taken yet: {"topic":..,"status":"pending"}; one
// stored where is not known: {"topic":..,"status":"stored"}.
void append_produced(std::string& out, const std::vector<step_produced>& list) {
  out += '[';
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& p = list[i];
    if (i > 0) out += ',';
    out += R"({"topic":)";
    append_json_string(out, p.topic);
    if (p.pending) {
      out += R"(,"status":"pending"})";
      continue;
    }
    if (!p.no_position) {
      out += R"(,"partition":)";
      append_json_int(out, p.partition);
      out += R"(,"offset":)";
      append_json_int(out, p.offset);
      out += p.duplicate ? R"(,"duplicate":true)" : R"(,"duplicate":false)";
    }
    out += R"(,"status":"stored"})";
  }
  out += ']';
}

// The delivery a consumer names (ack, nack, extend): the fields of
// delivery_ref. take() reads one if it is one of them.
struct ref_reader {
  delivery_ref ref;
  bool partition = false, offset = false;

  bool take(field& f) {
    const std::string_view n = f.name();
    if (n == "topic") {
      ref.topic = topic_of(f);
    } else if (n == "group") {
      ref.group = label_of(f);
    } else if (n == "owner") {
      ref.owner = label_of(f);
    } else if (n == "partition") {
      ref.partition = static_cast<std::uint32_t>(f.integer(0, k_u32_max));
      partition = true;
    } else if (n == "offset") {
      ref.offset = static_cast<std::uint64_t>(f.integer(0, k_int_max));
      offset = true;
    } else if (n == "attempts") {
      ref.attempts = f.integer(0, k_int_max);
    } else if (n == "fencing_token") {
      ref.fencing_token = token_of(f);
    } else {
      return false;
    }
    return true;
  }

  // The required fields, in the order they are named in errors.
  delivery_ref done(const reader& r) {
    if (ref.topic.empty()) required(r, "topic");
    if (ref.group.empty()) required(r, "group");
    if (ref.owner.empty()) required(r, "owner");
    if (!partition) required(r, "partition");
    if (!offset) required(r, "offset");
    return std::move(ref);
  }
};

// An ack's produce list: messages shaped like a single produce body.
std::vector<step_message> step_messages_of(field& f) {
  std::vector<step_message> out;
  f.objects(k_max_step_messages, [&](std::size_t, reader& r) {
    step_message s;
    r.each({"topic", "key", "value", "envelope"}, [&](std::size_t i, field& x) {
      if (i == 0) {
        s.topic = topic_of(x);
      } else {
        read_message_field(i - 1, x, s.message);
      }
    });
    if (s.topic.empty()) required(r, "topic");
    if (s.message.value.empty()) required(r, "value");
    out.push_back(std::move(s));
  });
  return out;
}

// open, the outcomes as a JSON array (one object per ack, in order), close.
std::string ack_outcomes_in(std::string_view open, const std::vector<ack_outcome>& outcomes,
                            std::string_view close) {
  std::string out;
  out.reserve(16 + outcomes.size() * 64);
  out += open;
  out += '[';
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const ack_outcome& o = outcomes[i];
    if (i > 0) out += ',';
    out += '{';
    if (o.code != errc::ok) {
      out += R"("error":)";
      append_json_string(out, to_string(o.code));
      out += ',';
    }
    out += R"("offset":)";
    append_json_int(out, o.offset);
    out += R"(,"partition":)";
    append_json_int(out, o.partition);
    if (o.produced) {
      out += R"(,"produced":)";
      append_produced(out, *o.produced);
    }
    out += o.code == errc::ok ? R"(,"status":"acked"})" : R"(,"status":"error"})";
  }
  out += ']';
  out += close;
  return out;
}

}  // namespace

namespace codec_detail {

std::vector<ack_item> ack_items_of(field& f, bool with_produce) {
  std::vector<ack_item> items;
  f.objects(k_max_batch, [&](std::size_t, reader& a) {
    ack_item item;
    bool partition = false, offset = false;
    a.each({"partition", "offset", "attempts", "result", "fencing_token", "produce"},
           [&](std::size_t k, field& x) {
             switch (k) {
               case 0:
                 item.partition = static_cast<std::uint32_t>(x.integer(0, k_u32_max));
                 partition = true;
                 break;
               case 1:
                 item.offset = static_cast<std::uint64_t>(x.integer(0, k_int_max));
                 offset = true;
                 break;
               case 2:
                 item.attempts = x.integer(0, k_int_max);
                 break;
               case 3:
                 item.result_json = x.json();
                 break;
               case 4:
                 item.fencing_token = token_of(x);
                 break;
               default:
                 if (!with_produce)
                   fail(
                       fmt::format("{}: an ack carried on a consume cannot produce; send it "
                                   "with POST /v1/ack",
                                   x.path()));
                 item.produce = step_messages_of(x);
                 break;
             }
           });
    if (!partition) required(a, "partition");
    if (!offset) required(a, "offset");
    items.push_back(std::move(item));
  });
  return items;
}

}  // namespace codec_detail

result<ack_request> parse_ack(const params& p) {
  return guarded<ack_request>([&]() -> ack_request {
    reader r(p);
    ref_reader single;
    std::string result_json;
    std::string_view first_single;  // the single form's first own field, if any
    ack_batch_cmd b;
    bool batch = false;
    std::vector<step_message> produce;
    r.each({"topic", "group", "owner", "acks", "partition", "offset", "attempts", "result",
            "fencing_token", "produce"},
           [&](std::size_t i, field& f) {
             if (i < 3) {
               single.take(f);
               return;
             }
             if (i == 3) {
               // The batch form: the single form's own fields are unknown.
               if (!first_single.empty()) unknown(r, first_single);
               batch = true;
               b.acks = ack_items_of(f, true);
               return;
             }
             if (batch) unknown(r, f.name());
             if (first_single.empty()) first_single = f.name();
             if (i == 7) {
               result_json = f.json();
             } else if (i == 9) {
               produce = step_messages_of(f);
             } else {
               single.take(f);
             }
           });
    if (batch) {
      if (single.ref.topic.empty()) required(r, "topic");
      if (single.ref.group.empty()) required(r, "group");
      if (single.ref.owner.empty()) required(r, "owner");
      b.topic = std::move(single.ref.topic);
      b.group = std::move(single.ref.group);
      b.owner = std::move(single.ref.owner);
      return b;
    }
    ack_cmd c;
    c.ref = single.done(r);
    c.result_json = std::move(result_json);
    c.produce = std::move(produce);
    return c;
  });
}

result<nack_cmd> parse_nack(const params& p) {
  return guarded<nack_cmd>([&] {
    reader r(p);
    ref_reader ref;
    nack_cmd c;
    std::optional<std::string> reason, error;
    r.each({"topic", "group", "owner", "partition", "offset", "attempts", "fencing_token", "reason",
            "error", "delay_ms"},
           [&](std::size_t i, field& f) {
             if (i == 7) {
               reason = std::string(f.str());
             } else if (i == 8) {
               error = std::string(f.str());  // DriftQ's name for the reason
             } else if (i == 9) {
               c.delay_ms = f.integer(0, k_int_max);
             } else {
               ref.take(f);
             }
           });
    c.ref = ref.done(r);
    if (reason && error) fail("give reason or error, not both");
    if (reason) c.reason = std::move(*reason);
    if (error) c.reason = std::move(*error);
    return c;
  });
}

result<extend_cmd> parse_extend(const params& p) {
  return guarded<extend_cmd>([&] {
    reader r(p);
    ref_reader ref;
    std::optional<std::int64_t> lease_ms;
    r.each(
        {"topic", "group", "owner", "partition", "offset", "attempts", "fencing_token", "lease_ms"},
        [&](std::size_t i, field& f) {
          if (i == 7) {
            lease_ms = f.integer(1, k_int_max);
          } else {
            ref.take(f);
          }
        });
    extend_cmd c;
    c.ref = ref.done(r);
    if (!lease_ms) required(r, "lease_ms");
    c.lease_ms = *lease_ms;
    return c;
  });
}

std::string ack_outcomes_json(const std::vector<ack_outcome>& outcomes) {
  return ack_outcomes_in(R"({"results":)", outcomes, "}");
}

std::string ack_produced_json(const ack_outcome& o) {
  // No list: a repeat of an ack whose message had no idempotency key (its
  // messages were stored once, by the first).
  if (!o.produced) return R"({"status":"acked"})";
  std::string out = R"({"produced":)";
  append_produced(out, *o.produced);
  out += R"(,"status":"acked"})";
  return out;
}

std::string consumed_acks_line(const std::vector<ack_outcome>& outcomes) {
  return ack_outcomes_in(R"({"acks":)", outcomes, "}\n");
}

}  // namespace onceq::http
