#pragma once

// The server's TLS settings: one OpenSSL context shared by every TLS
// session of the listener (http/server, http/session).
//
// Protocols: TLS 1.2 and 1.3 only. Ciphers: Mozilla's "intermediate"
// profile (ECDHE/DHE with AES-GCM or ChaCha20-Poly1305 for TLS 1.2; the
// OpenSSL defaults for TLS 1.3, which are the same three AEADs). No
// compression, no renegotiation.
//
// Thread safety: the context is read-only once made; sessions on any
// thread share it.

#include <memory>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "base/result.hpp"

namespace onceq::http {

// Loads a PEM certificate chain (leaf first) and its PEM private key
// (unencrypted) into a server context.
// Errors: errc::invalid_argument naming the file and OpenSSL's reason
// (missing or unreadable file, not PEM, key not matching the certificate).
result<std::shared_ptr<boost::asio::ssl::context>> make_tls_context(const std::string& cert_file,
                                                                    const std::string& key_file);

}  // namespace onceq::http
