#pragma once

// The CLI's HTTP client: client/http_client.hpp's one kept-alive
// connection to the server named by --url, with the bearer token on every
// request.
//
// Retries: 429 and 503 are retried (the API says both are safe to retry)
// up to options::retries times, waiting Retry-After / retry_after_ms
// (at most 5 s per wait). Network errors are not retried: a produce without
// a dedup id could be stored twice.
//
// Errors (all cli_error): an unparsable --url is exit_code::usage; a
// connection refused, unresolvable host or timeout is exit_code::unavailable;
// SIGINT during a request is exit_code::interrupted. call() also turns an
// error status into a cli_error "CODE: message" with the status's class.
//
// Thread safety: none; one client per thread.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/http_client.hpp"

namespace onceq::cli {

// http://host[:port][/prefix]
struct endpoint {
  std::string host;
  std::string port = "80";
  std::string prefix;  // "" or "/something", prepended to every path
};
endpoint parse_url(std::string_view url);

struct api_reply {
  unsigned status = 0;
  std::string body;
  std::string header_retry_after;  // Retry-After, "" if none
};

class api_client {
 public:
  struct options {
    std::string url = "http://127.0.0.1:8080";
    std::string token;  // "" = no Authorization header
    std::chrono::milliseconds timeout{30'000};
    int retries = 3;  // extra attempts on 429/503
  };

  explicit api_client(options opts);
  ~api_client();
  api_client(const api_client&) = delete;
  api_client& operator=(const api_client&) = delete;

  // One request, retried on 429/503; any status is returned. extra_wait
  // lengthens the timeout (long polls). headers are added as given.
  api_reply send(std::string_view method, std::string_view target, std::string_view body = {},
                 const std::vector<std::pair<std::string, std::string>>& headers = {},
                 std::chrono::milliseconds extra_wait = {});

  // send(), then: 2xx -> the body as JSON (null for an empty body); an error
  // status -> throws error_from_reply().
  nlohmann::json call(std::string_view method, std::string_view target,
                      const nlohmann::json* body = nullptr,
                      const std::vector<std::pair<std::string, std::string>>& headers = {},
                      std::chrono::milliseconds extra_wait = {});

 private:
  api_reply send_once(std::string_view method, std::string_view target, std::string_view body,
                      const std::vector<std::pair<std::string, std::string>>& headers,
                      std::chrono::milliseconds timeout);

  options opts_;
  endpoint ep_;
  client::http_client http_;
};

// Throws cli_error "NOT_FOUND: topic 'x' not found" from the API's error
// body (or the status when the body is not the API's), classed by the status.
[[noreturn]] void throw_reply_error(const api_reply& r);

using client::url_encode;

}  // namespace onceq::cli
