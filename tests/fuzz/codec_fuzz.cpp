// libFuzzer target: any bytes as the body (and, split at the first NUL, the
// query string) of every request the codec parses. It must never crash,
// leak or trip a sanitizer; rejecting is fine. Also checks that a body the
// codec accepts is JSON to nlohmann::json too, and that what the server
// would echo from it (envelopes, ack results) is valid JSON (http/params.hpp
// promises on-demand parsing skips nothing unvalidated).
// Built with -DONCEQ_FUZZ=ON and clang; run with scripts/fuzz.sh codec_fuzz.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "http/codec.hpp"
#include "http/params.hpp"

using namespace onceq;
using namespace onceq::http;

namespace {

void must_be_json(const std::string& text) {
  if (!text.empty() && !nlohmann::json::accept(text)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string body = input.substr(0, nul);
  const std::string query = nul == std::string::npos ? std::string() : input.substr(nul + 1);

  (void)json_field(body, "a.b");

  auto p = read_params(body, query);
  if (!p.ok()) return 0;
  const bool json_body = !p->from_query();
  const topic_settings defaults{};
  bool accepted = false;
  accepted |= parse_create_topic(*p, defaults).ok();
  if (auto pr = parse_produce(*p, query); pr.ok()) {
    accepted = true;
    for (const auto& m : pr->cmd.messages) must_be_json(m.envelope_json);
  }
  accepted |= parse_consume(*p).ok();
  if (auto a = parse_ack(*p); a.ok()) {
    accepted = true;
    if (const auto* c = std::get_if<ack_cmd>(&*a)) must_be_json(c->result_json);
    if (const auto* b = std::get_if<ack_batch_cmd>(&*a)) {
      for (const auto& item : b->acks) must_be_json(item.result_json);
    }
  }
  accepted |= parse_nack(*p).ok();
  accepted |= parse_extend(*p).ok();
  accepted |= parse_key_query(*p).ok();
  accepted |= parse_redrive(*p).ok();
  if (accepted && json_body && !nlohmann::json::accept(body)) __builtin_trap();
  return 0;
}
