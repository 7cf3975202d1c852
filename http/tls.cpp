#include "http/tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

#include <fmt/format.h>

namespace onceq::http {

namespace {

namespace ssl = boost::asio::ssl;

// Mozilla's "intermediate" TLS 1.2 ciphers (ssl-config.mozilla.org, v5.7):
// forward secrecy and AEAD only; every client of the last ~8 years has one.
constexpr const char* k_tls12_ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305";

// OpenSSL's reasons for the last failure, oldest first ("no start line;
// PEM lib"): asio's error_code names only the last, which is the least
// specific ("PEM lib"). Empties the thread's error queue.
std::string reason(const boost::system::error_code& ec) {
  std::string why;
  while (unsigned long e = ERR_get_error()) {
    const char* r = ERR_reason_error_string(e);
    if (!why.empty()) why += "; ";
    why += r != nullptr ? r : fmt::format("OpenSSL error {:#x}", e);
  }
  return why.empty() ? ec.message() : why;
}

// A missing or unreadable file, told the way the OS tells it (OpenSSL would
// say "system lib").
std::optional<error> unreadable(std::string_view what, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return make_error(errc::invalid_argument, fmt::format("cannot load the TLS {} from '{}': {}",
                                                          what, path, std::strerror(errno)));
  }
  std::fclose(f);
  return std::nullopt;
}

}  // namespace

result<std::shared_ptr<ssl::context>> make_tls_context(const std::string& cert_file,
                                                       const std::string& key_file) {
  if (cert_file.empty() || key_file.empty()) {
    return make_error(errc::invalid_argument,
                      "TLS needs both a certificate file and a private key file");
  }
  if (auto e = unreadable("certificate chain", cert_file)) return *e;
  if (auto e = unreadable("private key", key_file)) return *e;
  ERR_clear_error();
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_compression |
                       ssl::context::single_dh_use | SSL_OP_NO_RENEGOTIATION,
                   ec);
  if (ec || SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(native, k_tls12_ciphers) != 1 ||
      SSL_CTX_set_dh_auto(native, 1) != 1) {
    return make_error(errc::internal, fmt::format("cannot configure TLS: {}", reason(ec)));
  }
  // An idle connection then holds no 34 KB read/write buffers: with
  // thousands of kept-alive connections that is most of their memory.
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);

  // An encrypted key fails to load instead of prompting on the terminal.
  ctx->set_password_callback(
      [](std::size_t, ssl::context::password_purpose) { return std::string(); }, ec);
  // The key first: loaded second, a key that does not match the
  // certificate fails with a bare "key values mismatch"; loaded first, the
  // certificate replaces it and the check below names both files.
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) {
    return make_error(
        errc::invalid_argument,
        fmt::format("cannot load the TLS private key from '{}': {}", key_file, reason(ec)));
  }
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return make_error(
        errc::invalid_argument,
        fmt::format("cannot load the TLS certificate chain from '{}': {}", cert_file, reason(ec)));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();  // ("no private key assigned": the certificate dropped it)
    return make_error(
        errc::invalid_argument,
        fmt::format("the TLS private key in '{}' does not match the certificate in '{}'", key_file,
                    cert_file));
  }
  return ctx;
}

}  // namespace onceq::http
