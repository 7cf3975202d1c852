#include "broker/dispatch.hpp"

#include <type_traits>
#include <utility>
#include <variant>

namespace onceq {

result<log_reply> run_command(broker& b, const log_command& cmd) {
  return std::visit(
      [&b](const auto& c) -> result<log_reply> {
        using row = command_traits<std::decay_t<decltype(c)>>;
        auto r = row::run(b, c);
        if (!r.ok()) return std::move(r).err();
        if constexpr (std::is_void_v<typename row::reply>) {
          return log_reply{std::monostate{}};
        } else {
          // in_place_type: a reply that is not exactly one alternative does
          // not compile.
          return log_reply(std::in_place_type<typename row::reply>, std::move(*r));
        }
      },
      cmd);
}

}  // namespace onceq
