#pragma once

// The CLI's exit codes, one per error class, and the error that carries one
// up to main(). Scripts branch on these, so the values never change.

#include <stdexcept>
#include <string>

namespace onceq::cli {

enum class exit_code : int {
  ok = 0,
  failure = 1,        // anything not classed below (500, 405, 413, a bad answer)
  usage = 2,          // bad flags, or 400 INVALID_ARGUMENT from the server
  not_found = 3,      // 404
  conflict = 4,       // 409: ALREADY_EXISTS, FAILED_PRECONDITION (fenced)
  unavailable = 5,    // 503, 429 after the retries, unreachable server
  unauthorized = 6,   // 401, 403
  interrupted = 130,  // SIGINT, as a shell reports it
};

// The class of an HTTP error status.
exit_code exit_code_for_status(unsigned status);

// Thrown by the commands; main() prints "onceq: <what()>" and exits with code.
class cli_error : public std::runtime_error {
 public:
  cli_error(exit_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  exit_code code() const noexcept { return code_; }

 private:
  exit_code code_;
};

}  // namespace onceq::cli
