#include "storage/rocksdb/fsync_policy.hpp"

#include <charconv>
#include <string>

namespace onceq::storage {

result<fsync_policy> fsync_policy::parse(std::string_view text) {
  if (text == "always") return fsync_policy{mode::always, {}};
  if (text == "none") return fsync_policy{mode::none, {}};
  constexpr std::string_view k_prefix = "interval:";
  if (text.starts_with(k_prefix)) {
    const std::string_view num = text.substr(k_prefix.size());
    std::chrono::milliseconds::rep ms = 0;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), ms);
    if (!num.empty() && ec == std::errc{} && end == num.data() + num.size() && ms >= 1 &&
        ms <= k_max_interval.count()) {
      return fsync_policy{mode::interval, std::chrono::milliseconds{ms}};
    }
  }
  return make_error(errc::invalid_argument,
                    "invalid fsync policy \"" + std::string(text) +
                        "\": expected always, none or interval:<ms> with ms in 1..60000");
}

std::string fsync_policy::to_string() const {
  if (kind == mode::interval) return "interval:" + std::to_string(interval.count());
  return kind == mode::none ? "none" : "always";
}

}  // namespace onceq::storage
