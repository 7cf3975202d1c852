#pragma once

#include <compare>
#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace onceq {

// A value of type T that only converts to and from T on purpose, so that two
// ids (or an id and a count) of the same underlying type cannot be swapped
// without a compile error (Redpanda's named_type).
//
//   using partition_id = named_type<std::uint32_t, struct partition_id_tag>;
//   partition_id p{3};        // explicit: `partition_id p = 3;` does not compile
//   p() + 1                   // the value, spelled out
//
// Compares and hashes as T, formats with fmt as T. An arithmetic T also gets
// ++ and --, and + and - with a plain T (an offset plus a count is an
// offset); two named values are never added, since that is what the type is
// there to stop.
template <typename T, typename Tag>
class named_type {
 public:
  using type = T;

  constexpr named_type() = default;
  constexpr explicit named_type(const T& v) noexcept(std::is_nothrow_copy_constructible_v<T>)
      : v_(v) {}
  constexpr explicit named_type(T&& v) noexcept(std::is_nothrow_move_constructible_v<T>)
      : v_(std::move(v)) {}

  constexpr const T& operator()() const& noexcept { return v_; }
  constexpr T& operator()() & noexcept { return v_; }
  constexpr T&& operator()() && noexcept { return std::move(v_); }

  friend constexpr bool operator==(const named_type&, const named_type&) = default;
  friend constexpr auto operator<=>(const named_type&, const named_type&) = default;

  constexpr named_type& operator++() requires std::is_arithmetic_v<T> {
    ++v_;
    return *this;
  }
  constexpr named_type operator++(int) requires std::is_arithmetic_v<T> {
    named_type old = *this;
    ++v_;
    return old;
  }
  constexpr named_type& operator--() requires std::is_arithmetic_v<T> {
    --v_;
    return *this;
  }
  constexpr named_type operator--(int) requires std::is_arithmetic_v<T> {
    named_type old = *this;
    --v_;
    return old;
  }
  constexpr named_type& operator+=(const T& n) requires std::is_arithmetic_v<T> {
    v_ += n;
    return *this;
  }
  constexpr named_type& operator-=(const T& n) requires std::is_arithmetic_v<T> {
    v_ -= n;
    return *this;
  }
  friend constexpr named_type operator+(named_type a, const T& n) requires std::is_arithmetic_v<T> {
    return a += n;
  }
  friend constexpr named_type operator-(named_type a, const T& n) requires std::is_arithmetic_v<T> {
    return a -= n;
  }

 private:
  T v_{};
};

}  // namespace onceq

template <typename T, typename Tag>
struct std::hash<onceq::named_type<T, Tag>> {
  std::size_t operator()(const onceq::named_type<T, Tag>& v) const
      noexcept(noexcept(std::hash<T>{}(v()))) {
    return std::hash<T>{}(v());
  }
};

template <typename T, typename Tag, typename Char>
struct fmt::formatter<onceq::named_type<T, Tag>, Char> : fmt::formatter<T, Char> {
  template <typename FormatContext>
  auto format(const onceq::named_type<T, Tag>& v, FormatContext& ctx) const {
    return fmt::formatter<T, Char>::format(v(), ctx);
  }
};
