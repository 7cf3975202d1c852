#pragma once

#include <compare>
#include <functional>
#include <utility>

namespace onceq {

// A strong typedef: named_type<std::uint64_t, struct offset_tag> does not
// mix with a partition number by accident. Parsed at the HTTP edge.
template <class T, class Tag>
class named_type {
 public:
  using value_type = T;
  constexpr named_type() = default;
  constexpr explicit named_type(T v) : v_(std::move(v)) {}
  constexpr const T& get() const noexcept { return v_; }
  constexpr T& get() noexcept { return v_; }
  friend constexpr auto operator<=>(const named_type&, const named_type&) = default;
  friend constexpr bool operator==(const named_type&, const named_type&) = default;

 private:
  T v_{};
};

}  // namespace onceq

template <class T, class Tag>
struct std::hash<onceq::named_type<T, Tag>> {
  std::size_t operator()(const onceq::named_type<T, Tag>& v) const noexcept {
    return std::hash<T>{}(v.get());
  }
};
