#pragma once

#include <cassert>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/errc.hpp"

namespace onceq {

// result<T>: a value or an error, never both. Every core and storage call
// returns one; exceptions never cross the storage/broker boundary.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT
  result(error err) : v_(std::in_place_index<1>, std::move(err)) {}  // NOLINT

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const error& err() const& {
    assert(!ok());
    return std::get<1>(v_);
  }
  error&& err() && {
    assert(!ok());
    return std::get<1>(std::move(v_));
  }
  errc code() const noexcept { return ok() ? errc::ok : std::get<1>(v_).code; }

 private:
  std::variant<T, error> v_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(error err) : err_(std::move(err)), ok_(false) {}  // NOLINT

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const error& err() const& {
    assert(!ok_);
    return err_;
  }
  error&& err() && {
    assert(!ok_);
    return std::move(err_);
  }
  errc code() const noexcept { return ok_ ? errc::ok : err_.code; }

 private:
  error err_;
  bool ok_ = true;
};

inline error make_error(errc code, std::string message) {
  return error{code, std::move(message)};
}

}  // namespace onceq

// Propagates an error from an expression returning result<...>.
#define ONCEQ_TRY(expr)                                           \
  do {                                                            \
    auto onceq_try_r_ = (expr);                                   \
    if (!onceq_try_r_.ok()) return std::move(onceq_try_r_).err(); \
  } while (0)
