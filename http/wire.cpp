#include "http/wire.hpp"

#include <fmt/format.h>

namespace onceq::http {

void render_head(const response& res, std::string& out) {
  out.clear();
  const unsigned v = res.version();
  fmt::format_to(std::back_inserter(out), "HTTP/{}.{} {} ", v / 10, v % 10, res.result_int());
  const auto reason = res.reason();
  out.append(reason.data(), reason.size());
  out += "\r\n";
  for (const auto& f : res) {
    const auto name = f.name_string();
    const auto value = f.value();
    out.append(name.data(), name.size());
    out += ": ";
    out.append(value.data(), value.size());
    out += "\r\n";
  }
  out += "\r\n";
}

}  // namespace onceq::http
