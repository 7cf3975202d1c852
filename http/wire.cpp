#include "http/wire.hpp"

#include <charconv>

namespace onceq::http {

void render_head(const response& res, std::string& out) {
  out.clear();
  const unsigned v = res.version();
  // "HTTP/1.1 200 ": by hand, this runs once per answer.
  char line[16] = {'H', 'T',
                   'T', 'P',
                   '/', static_cast<char>('0' + v / 10 % 10),
                   '.', static_cast<char>('0' + v % 10),
                   ' '};
  auto [end, ec] = std::to_chars(line + 9, line + sizeof(line) - 1, res.result_int());
  (void)ec;  // a status has at most three digits
  *end++ = ' ';
  out.append(line, end);
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
