#include "cmd/cli/exit_code.hpp"

namespace onceq::cli {

exit_code exit_code_for_status(unsigned status) {
  switch (status) {
    case 400:
      return exit_code::usage;
    case 401:
    case 403:
      return exit_code::unauthorized;
    case 404:
      return exit_code::not_found;
    case 409:
      return exit_code::conflict;
    case 429:
    case 503:
      return exit_code::unavailable;
    default:
      return status < 400 ? exit_code::ok : exit_code::failure;
  }
}

}  // namespace onceq::cli
