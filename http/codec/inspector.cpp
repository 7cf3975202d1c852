#include "http/codec/inspector.hpp"

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <openssl/evp.h>

#include "http/params/json_field.hpp"

namespace onceq::http {

namespace {

// Dot paths into a parsed JSON text, and SHA-256 through OpenSSL.
class json_message_inspector final : public message_inspector {
 public:
  result<std::string> field(std::string_view doc, std::string_view dot_path) const override {
    return json_field(doc, dot_path);
  }

  std::string sha256_hex(std::string_view bytes) const override {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("SHA-256 failed");  // only on allocation failure
    std::string out;
    out.reserve(2 * n);
    for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", md[i]);
    return out;
  }
};

}  // namespace

const message_inspector& json_inspector() {
  static const json_message_inspector k_inspector;
  return k_inspector;
}

}  // namespace onceq::http
