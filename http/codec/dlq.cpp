#include "http/codec/dlq.hpp"

#include "http/codec/detail.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

result<redrive_cmd> parse_redrive(const params& p) {
  return guarded<redrive_cmd>([&] {
    reader r(p);
    redrive_cmd c;
    r.each({"topic", "max_messages"}, [&](std::size_t i, field& f) {
      if (i == 0) {
        c.topic = topic_of(f);
      } else {
        c.max_messages = f.integer(1, k_int_max);
      }
    });
    if (c.topic.empty()) required(r, "topic");
    return c;
  });
}

json to_json(const dlq_origin& d) {
  return {{"original_topic", d.original_topic},   {"original_partition", d.original_partition},
          {"original_offset", d.original_offset}, {"attempts", d.attempts},
          {"last_error", d.last_error},           {"routed_at_ms", d.routed_at_ms}};
}

}  // namespace onceq::http
