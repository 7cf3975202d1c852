// libFuzzer target: any bytes as the body (and, split at the first NUL, the
// query string) of every request the codec parses. It must never crash,
// leak or trip a sanitizer; rejecting is fine. Also checks that minified
// output parses again and that whatever our JSON parser accepts,
// nlohmann::json accepts too (http/json.hpp promises it accepts a subset).
// Built with -DONCEQ_FUZZ=ON and clang; run with scripts/fuzz.sh codec_fuzz.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "http/codec.hpp"
#include "http/json.hpp"
#include "http/params.hpp"

using namespace onceq;
using namespace onceq::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string body = input.substr(0, nul);
  const std::string query = nul == std::string::npos ? std::string() : input.substr(nul + 1);

  jdoc doc;
  json_error err;
  if (doc.parse(std::string_view(body), &err)) {
    std::string out;
    append_minified(out, doc.root());
    jdoc again;
    if (!again.parse(std::string_view(out))) __builtin_trap();  // minified text must parse
    if (!nlohmann::json::accept(body)) __builtin_trap();
  }

  auto p = read_params(body, query);
  if (!p.ok()) return 0;
  const topic_settings defaults{};
  (void)parse_create_topic(*p, defaults);
  (void)parse_produce(*p, query);
  (void)parse_consume(*p);
  (void)parse_ack(*p);
  (void)parse_nack(*p);
  (void)parse_extend(*p);
  (void)parse_key_query(*p);
  (void)parse_redrive(*p);
  return 0;
}
