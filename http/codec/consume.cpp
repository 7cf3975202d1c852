#include "http/codec/consume.hpp"

#include <optional>

#include <fmt/format.h>

#include "http/codec/detail.hpp"
#include "http/rfc3339.hpp"

namespace onceq::http {

using namespace codec_detail;  // the codec's shared readers

result<consume_request> parse_consume(const params& p) {
  return guarded<consume_request>([&] {
    reader r(p);
    consume_request out;
    std::optional<std::int64_t> max;
    std::optional<std::string> deadline_text;
    r.each({"topic", "group", "owner", "lease_ms", "max_messages", "wait_ms", "deadline_ms",
            "deadline_rfc3339", "acks"},
           [&](std::size_t i, field& f) {
             switch (i) {
               case 0:
                 out.cmd.topic = topic_of(f);
                 break;
               case 1:
                 out.cmd.group = label_of(f);
                 break;
               case 2:
                 out.cmd.owner = label_of(f);
                 break;
               case 3:
                 out.cmd.lease_ms = f.integer(1, k_int_max);
                 break;
               case 4:
                 max = f.integer(1, static_cast<std::int64_t>(k_max_batch));
                 break;
               case 5:
                 out.wait_ms = f.integer(0, k_max_wait_ms);
                 break;
               case 6:
                 out.cmd.deadline_ms = f.integer(0, k_int_max);
                 break;
               case 7:
                 deadline_text = std::string(f.str());
                 break;
               default:
                 if (r.from_query()) fail("acks must be sent in a JSON body (POST), not a query");
                 out.acks = ack_items_of(f, false);
                 break;
             }
           });
    if (out.cmd.topic.empty()) required(r, "topic");
    if (out.cmd.group.empty()) required(r, "group");
    if (out.cmd.owner.empty()) required(r, "owner");
    out.stream = !max.has_value();
    out.cmd.max_messages = max.value_or(1);
    if (out.acks && out.stream) fail("acks needs max_messages (a long-poll batch, not a stream)");
    if (deadline_text) {
      if (out.cmd.deadline_ms) fail("give deadline_ms or deadline_rfc3339, not both");
      auto ms = parse_rfc3339(*deadline_text);
      if (!ms.ok()) fail(fmt::format("deadline_rfc3339 is {}", ms.err().message));
      out.cmd.deadline_ms = *ms;
    }
    return out;
  });
}

}  // namespace onceq::http
