#include "cmd/cli/api_client.hpp"

#include <algorithm>
#include <charconv>
#include <thread>

#include "cmd/cli/exit_code.hpp"
#include "cmd/cli/interrupt.hpp"

namespace onceq::cli {

using json = nlohmann::json;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds k_max_retry_wait{5'000};
constexpr milliseconds k_default_retry_wait{500};
constexpr milliseconds k_poll_slice{100};  // how often a blocked call checks for SIGINT

milliseconds retry_wait(const api_reply& r) {
  milliseconds wait = k_default_retry_wait;
  int secs = 0;
  const auto& h = r.header_retry_after;
  if (!h.empty() && std::from_chars(h.data(), h.data() + h.size(), secs).ec == std::errc{}) {
    wait = milliseconds(secs * 1000);
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("retry_after_ms") && j["retry_after_ms"].is_number_integer()) {
    wait = milliseconds(j["retry_after_ms"].get<std::int64_t>());
  }
  return std::clamp(wait, milliseconds(1), k_max_retry_wait);
}

void sleep_interruptibly(milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (interrupted()) throw cli_error(exit_code::interrupted, "interrupted");
    std::this_thread::sleep_for(std::min(k_poll_slice, d));
  }
}

}  // namespace

endpoint parse_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme) {
    throw cli_error(exit_code::usage,
                    "--url must start with http:// (got '" + std::string(url) + "')");
  }
  url.remove_prefix(scheme.size());
  endpoint ep;
  auto slash = url.find('/');
  auto authority = url.substr(0, slash);
  if (slash != std::string_view::npos) {
    ep.prefix = std::string(url.substr(slash));
    while (!ep.prefix.empty() && ep.prefix.back() == '/') ep.prefix.pop_back();
  }
  auto colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    ep.port = std::string(authority.substr(colon + 1));
    authority = authority.substr(0, colon);
    unsigned port = 0;
    auto [p, ec] = std::from_chars(ep.port.data(), ep.port.data() + ep.port.size(), port);
    if (ec != std::errc{} || p != ep.port.data() + ep.port.size() || port == 0 || port > 65535) {
      throw cli_error(exit_code::usage, "bad port in --url: '" + ep.port + "'");
    }
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  if (authority.empty()) throw cli_error(exit_code::usage, "--url has no host");
  ep.host = std::string(authority);
  return ep;
}

void throw_reply_error(const api_reply& r) {
  auto code = exit_code_for_status(r.status);
  if (code == exit_code::ok) code = exit_code::failure;
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    std::string msg = j["error"].get<std::string>();
    if (j.contains("message") && j["message"].is_string()) {
      msg += ": " + j["message"].get<std::string>();
    }
    throw cli_error(code, msg);
  }
  throw cli_error(code, "HTTP " + std::to_string(r.status) +
                            (r.body.empty() ? std::string() : ": " + r.body.substr(0, 200)));
}

namespace {

client::options client_options(const api_client::options& o, const endpoint& ep) {
  client::options c;
  c.host = ep.host;
  c.port = static_cast<std::uint16_t>(std::stoi(ep.port));
  c.timeout = o.timeout;
  c.token = o.token;
  c.user_agent = "onceq-cli";
  c.cancelled = interrupted;
  return c;
}

}  // namespace

api_client::api_client(options opts)
    : opts_(std::move(opts)), ep_(parse_url(opts_.url)), http_(client_options(opts_, ep_)) {}

api_client::~api_client() = default;

api_reply api_client::send_once(std::string_view method, std::string_view target,
                                std::string_view body,
                                const std::vector<std::pair<std::string, std::string>>& headers,
                                milliseconds timeout) {
  const std::string where = "http://" + ep_.host + ":" + ep_.port;
  http_.set_timeout(timeout);
  try {
    auto res = http_.request(method, ep_.prefix + std::string(target), body, headers);
    api_reply out;
    out.status = res.status;
    out.header_retry_after = res.header("Retry-After");
    out.body = std::move(res.body);
    return out;
  } catch (const client::error& e) {
    const std::string why = e.code().message();
    switch (e.where()) {
      case client::step::cancelled:
        throw cli_error(exit_code::interrupted, "interrupted");
      case client::step::resolve:
        throw cli_error(exit_code::unavailable, "cannot resolve " + where + ": " + why);
      case client::step::connect:
      case client::step::tls_handshake:
        throw cli_error(exit_code::unavailable, "cannot connect to " + where + ": " + why);
      case client::step::request:
        break;
    }
    throw cli_error(exit_code::unavailable,
                    std::string(method) + " " + where + std::string(target) + ": " + why);
  }
}

api_reply api_client::send(std::string_view method, std::string_view target, std::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& headers,
                           milliseconds extra_wait) {
  for (int attempt = 0;; ++attempt) {
    auto r = send_once(method, target, body, headers, opts_.timeout + extra_wait);
    if ((r.status != 429 && r.status != 503) || attempt >= opts_.retries) return r;
    sleep_interruptibly(retry_wait(r));
  }
}

json api_client::call(std::string_view method, std::string_view target, const json* body,
                      const std::vector<std::pair<std::string, std::string>>& headers,
                      milliseconds extra_wait) {
  std::string text = body != nullptr ? body->dump() : std::string();
  auto r = send(method, target, text, headers, extra_wait);
  if (r.status >= 300) throw_reply_error(r);
  if (r.body.empty()) return json();
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) {
    throw cli_error(exit_code::failure,
                    "the server's answer is not JSON: " + r.body.substr(0, 200));
  }
  return j;
}

}  // namespace onceq::cli
