#pragma once

// onceq::client: the synchronous HTTP/1.1 client of onceq's own C++ tools
// (the onceq CLI, the integration tests, onceq-bench's streaming consumer).
// The Python and TypeScript clients are in clients/.
//
// http_client: one keep-alive connection to options::host:port, plain or
// TLS, opened on the first request and reopened after the server closed it.
// Every connect, handshake and request is bounded by options::timeout.
// line_stream: one streaming response (GET /v1/consume without
// max_messages) read line by line, on a connection of its own.
//
// Thread safety: none; one object per thread.
// Errors: network failures, timeouts and cancellation throw client::error
// (a std::system_error that says which step failed); HTTP error statuses are
// ordinary responses.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace onceq::client {

using header_list = std::vector<std::pair<std::string, std::string>>;

// Speak TLS to the server (onceqd --tls-cert/--tls-key).
struct tls_options {
  // PEM certificate(s) to verify the server with; the server's certificate
  // must also name options::host (an IP address in subjectAltName, or a DNS
  // name). Default: "", no verification.
  std::string ca_file;
};

struct options {
  // An IPv4/IPv6 address or a name (resolved at each connect).
  // Default: loopback.
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;
  // Default: none, plain HTTP.
  std::optional<tls_options> tls;
  // Bounds each connect, TLS handshake and request (write and whole answer).
  // Default: 15 s.
  std::chrono::milliseconds timeout{15'000};
  // A request that fails on a reused keep-alive connection before any byte
  // of the answer arrived is sent once more on a fresh connection: the
  // server may have closed an idle one. false: never send a request twice
  // (a produce without a dedup id to a server that died after reading it
  // would be stored twice). Default: true.
  bool retry_stale_connection = true;
  // "Authorization: Bearer <token>" on every request. Default: "", none.
  std::string token;
  // "User-Agent" on every request. Default: "", none.
  std::string user_agent;
  // Polled every 100 ms while a call waits (e.g. the CLI's SIGINT flag):
  // true closes the connection and throws error with step::cancelled.
  // Default: none, waits are not sliced.
  std::function<bool()> cancelled;
};

// Which step of a call failed.
enum class step { resolve, connect, tls_handshake, request, cancelled };

class error : public std::system_error {
 public:
  error(step s, std::error_code ec, const std::string& what)
      : std::system_error(ec, what), step_(s) {}
  step where() const { return step_; }

 private:
  step step_;
};

struct response {
  unsigned status = 0;
  header_list headers;  // as received, names in their original case
  std::string body;

  // The first header with that name (case-insensitive), or "" if none.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // The body as JSON; throws nlohmann::json::parse_error if it is not.
  nlohmann::json json() const { return nlohmann::json::parse(body); }
  // The body as NDJSON: one JSON value per non-empty line.
  std::vector<nlohmann::json> ndjson() const;
};

struct connection;

class http_client {
 public:
  explicit http_client(options opts);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  // Sends one request on the kept-alive connection (opening one if needed)
  // and reads the whole answer. headers are set as given (e.g. X-Request-Id,
  // or a Content-Type other than the default application/json of a body).
  response request(std::string_view method, std::string_view target, std::string_view body = {},
                   const header_list& headers = {});

  response get(std::string_view target, const header_list& headers = {}) {
    return request("GET", target, {}, headers);
  }
  response post(std::string_view target, const nlohmann::json& body,
                const header_list& headers = {}) {
    return request("POST", target, body.dump(), headers);
  }

  const options& opts() const { return opts_; }
  void set_timeout(std::chrono::milliseconds timeout) { opts_.timeout = timeout; }
  void close();

 private:
  options opts_;
  std::unique_ptr<connection> conn_;
};

class line_stream {
 public:
  // Connects, sends the request and reads the answer's header, all within
  // opts.timeout; any status is accepted (see status()).
  line_stream(options opts, std::string_view method, std::string_view target,
              std::string_view body = {}, const header_list& headers = {});
  ~line_stream();
  line_stream(const line_stream&) = delete;
  line_stream& operator=(const line_stream&) = delete;

  unsigned status() const { return head_.status; }
  const response& head() const { return head_; }  // status and headers; body empty

  // Moves up to max complete non-empty lines into out (cleared first),
  // reading for up to wait when none is buffered, then whatever else has
  // already arrived without waiting. Returns how many: 0 when the wait ran
  // out or the answer ended (ended()). At the end, a last line without a
  // newline counts as a line. A read error ends the answer too (end_error()
  // says which); only options::cancelled throws.
  std::size_t read_lines(std::size_t max, std::chrono::milliseconds wait,
                         std::vector<std::string>& out);
  // The next line, or nullopt (see read_lines).
  std::optional<std::string> next_line(std::chrono::milliseconds wait);
  bool ended() const;
  // Why the answer ended early (a reset, the server gone); none after a
  // complete answer.
  std::error_code end_error() const { return end_error_; }

 private:
  // Appends to the unread body what one read brings: before deadline, or
  // without one when bytes are known to be there already.
  void read_some(std::optional<std::chrono::steady_clock::time_point> deadline);
  // Moves complete lines of the unread body into out, up to max.
  void take(std::size_t max, std::vector<std::string>& out);

  struct impl;
  options opts_;
  std::unique_ptr<impl> impl_;
  response head_;
  bool ended_ = false;
  std::error_code end_error_;
};

// Percent-encodes a query parameter value or a path segment.
std::string url_encode(std::string_view s);

}  // namespace onceq::client
