#pragma once

// A bare TCP connection to 127.0.0.1:<port> for tests that must control the
// bytes on the wire (half a header, nothing at all) or watch when the server
// closes. Every wait is bounded by a timeout. POSIX sockets, so that one
// test can hold hundreds of them and poll them together.
//
// Thread safety: none.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace onceq::itest {

class raw_socket {
 public:
  explicit raw_socket(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      const int e = errno;
      ::close(fd_);
      throw std::runtime_error(std::string("connect: ") + std::strerror(e));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~raw_socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;

  int fd() const { return fd_; }

  // False if the connection is closed or reset.
  bool send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  enum class got { data, closed, timeout };

  // Waits up to timeout for bytes (appended to out) or the server's close
  // (EOF or reset).
  got read_some(std::string& out, std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (r == 0) return got::timeout;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return got::closed;
    out.append(buf, static_cast<std::size_t>(n));
    return got::data;
  }

  // One HTTP response with a Content-Length body (what onceqd sends outside
  // streams). Empty if the server closed or timeout passed before all of it.
  std::string read_response(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto end = pending_.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::size_t length = 0;
        auto cl = pending_.find("Content-Length: ");
        if (cl == std::string::npos) cl = pending_.find("content-length: ");
        if (cl != std::string::npos && cl < end) length = std::stoul(pending_.substr(cl + 16));
        if (pending_.size() >= end + 4 + length) {
          std::string res = pending_.substr(0, end + 4 + length);
          pending_.erase(0, end + 4 + length);
          return res;
        }
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || read_some(pending_, left) != got::data) return {};
    }
  }

 private:
  int fd_ = -1;
  std::string pending_;
};

}  // namespace onceq::itest
