#pragma once

// Reading a request's parameters (http/params/params.hpp): reader and
// field, the interface the codec (http/codec/) reads a JSON body and a
// query string through alike.
//
// A JSON body is read with simdjson's on-demand parser, in one forward
// pass: reader::each hands the fields of an object to the codec in the
// order they were written, and the codec reads each value where it is (a
// string, an integer, a nested object, ...). There is no DOM. A query
// string is a list of name/value pairs behind the same readers; its values
// are strings, and the readers take numbers (decimal), booleans ("true",
// "false") and lists (comma-separated) out of them.
//
// What a JSON body must be (each a 400 INVALID_ARGUMENT through the codec):
// RFC 8259 text (an optional leading UTF-8 BOM allowed), an object at the
// top level, no key twice in one object where the codec reads it (names
// the codec knows, envelope.headers, and anywhere inside an ack's result:
// "duplicate field 'messages[1].envelope.msg_id' in the JSON body"), no
// nesting deeper than k_max_json_depth.
//
// Validation: on-demand checks only what is read; what it skips it does
// not validate. Here nothing is skipped: an unknown field is an error, and
// every known field's value is read (strings decoded, numbers parsed,
// objects walked). Free-form values (an ack's result) are walked whole
// (field::json). So everything echoed back later (the envelope copy, a
// stored result, values, keys) is validated JSON; the envelope and result
// are copied minified from the body only after that walk.
//
// Thread safety: a params object is read on one thread at a time; readers
// use a per-thread simdjson parser, so one thread reads one params at a
// time (each parse_* call of the codec reads its params to the end before
// returning).

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "http/params/params.hpp"

namespace onceq::http {

class field;

// One object of the parameters, read once, front to back. Errors name
// fields by their path: "messages[3].envelope.msg_id". Every reader
// function throws bad_input.
class reader {
 public:
  // The top level: starts reading p (at most one reader of p at a time).
  // Throws for a body that is not JSON or not an object.
  explicit reader(const params& p);
  reader(const reader&) = delete;
  reader& operator=(const reader&) = delete;
  reader(reader&&) noexcept;
  ~reader();

  // Calls fn(i, f) for each field, in the order written, with i its index
  // in names. A name not in names is an error ("unknown field"), as is a
  // name twice ("duplicate field"). fn must read f before it returns (or
  // leave it: it is then skipped, unvalidated). Once per reader; at the top
  // level it also reads to the end of the body (anything after the object
  // is an error).
  template <class Fn>
  void each(std::initializer_list<std::string_view> names, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    each_field(
        names, [](void* ctx, std::size_t i, field& f) { (*static_cast<F*>(ctx))(i, f); }, &fn);
  }

  // "messages[3].envelope.name" ("name" at the top level).
  std::string path(std::string_view name) const;
  bool from_query() const noexcept { return query_ != nullptr; }

 private:
  friend class field;
  struct state;
  reader() = default;
  using callback = void (*)(void*, std::size_t, field&);
  void each_field(std::initializer_list<std::string_view> names, callback cb, void* ctx);
  std::string where() const;

  const std::vector<std::pair<std::string, std::string>>* query_ = nullptr;
  const reader* parent_ = nullptr;
  std::string_view name_;                             // in parent_, or the top level's name ("")
  std::size_t index_ = static_cast<std::size_t>(-1);  // in an array field name_
  int depth_ = 1;
  bool top_ = false;
  alignas(8) unsigned char object_[32];  // simdjson's object (JSON bodies)
};

// One field's value, handed to reader::each's fn. Each reading function
// reads the value (once) and throws if it is not of the kind asked for.
class field {
 public:
  std::string_view name() const noexcept { return name_; }
  std::string path() const { return parent_.path(name_); }

  // null is never a valid value: every reading function but is_null
  // rejects it ("X must not be null").
  bool is_null();
  // A string (from a query: the value). The view lives until the next
  // string is read.
  std::string_view str();
  // A JSON integer (from a query: decimal) in [lo, hi].
  std::int64_t integer(std::int64_t lo, std::int64_t hi);
  // true / false (from a query: "true" / "false").
  bool boolean();
  // An array of at most max strings (from a query: comma-separated).
  std::vector<std::string> strings(std::size_t max);
  // An object: its reader.
  reader object();
  // An array of 1..max objects: fn(i, reader&) for each, in order.
  template <class Fn>
  void objects(std::size_t max, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    each_object(
        max, [](void* ctx, std::size_t i, reader& r) { (*static_cast<F*>(ctx))(i, r); }, &fn);
  }
  // An object of strings (envelope.headers): checked, nothing kept.
  void string_map();
  // Any JSON value, validated whole (duplicate keys, depth), minified as
  // written (from a query: the value as a JSON string).
  std::string json();
  // An object, read with r.each (fn), then its text minified as written:
  // fn must read every field (the text is copied only after).
  template <class Fn>
  std::string object_text(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    return object_text_of([](void* ctx, reader& r) { (*static_cast<F*>(ctx))(r); }, &fn);
  }

 private:
  friend class reader;
  field(const reader& parent, std::string_view name, void* value, const std::string* text)
      : parent_(parent), name_(name), value_(value), text_(text) {}
  [[noreturn]] void wrong(std::string_view what) const;
  void not_null();
  void each_object(std::size_t max, void (*cb)(void*, std::size_t, reader&), void* ctx);
  std::string object_text_of(void (*cb)(void*, reader&), void* ctx);

  const reader& parent_;
  std::string_view name_;
  void* value_;              // simdjson's value (JSON bodies)
  const std::string* text_;  // the value (query strings)
};

}  // namespace onceq::http
