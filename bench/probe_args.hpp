#pragma once

// Shared by the file system probes (fsync_probe.cpp, neighbour_probe.cpp):
// their numeric arguments and their error text.

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onceq::bench {

// A failed call and its errno text.
inline std::string failed(const std::string& call) {
  return call + ": " + std::strerror(errno);
}

// argv[first..argc) as whole positive decimals; nothing, after printing
// which one is not and the usage to stderr, if one is not.
inline std::optional<std::vector<long>> positive_args(int argc, char** argv, int first,
                                                      const char* tool, const char* usage) {
  std::vector<long> out;
  for (int i = first; i < argc; ++i) {
    const std::string_view s = argv[i];
    long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v <= 0) {
      std::fprintf(stderr, "%s: '%s' is not a positive whole number\n%s", tool, argv[i], usage);
      return std::nullopt;
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace onceq::bench
