#include "shard/layout.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <string_view>

namespace onceq {

namespace {
constexpr std::string_view k_prefix = "shard-";
}

std::string shard_data_dir(const std::string& data_dir, std::uint32_t id) {
  if (id == 0) return data_dir;
  return (std::filesystem::path(data_dir) / (std::string(k_prefix) + std::to_string(id))).string();
}

std::vector<std::uint32_t> shard_dirs_from(const std::string& data_dir, std::uint32_t from) {
  std::vector<std::uint32_t> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(data_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= k_prefix.size() || name.compare(0, k_prefix.size(), k_prefix) != 0) continue;
    std::uint32_t id = 0;
    const char* first = name.data() + k_prefix.size();
    const char* last = name.data() + name.size();
    auto [p, err] = std::from_chars(first, last, id);
    if (err != std::errc{} || p != last || id == 0 || id < from) continue;
    std::error_code fe;
    if (!std::filesystem::exists(it->path() / "CURRENT", fe)) continue;
    out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace onceq
