#include "http/params/json_field.hpp"

#include "http/params/detail.hpp"

namespace onceq::http {

using namespace params_detail;  // this folder's own simdjson walks

result<std::string> json_field(std::string_view doc_text, std::string_view dot_path) {
  std::string& copy = t_state.copy;
  copy.reserve(doc_text.size() + k_json_padding);
  copy.assign(doc_text);
  try {
    od::document& doc = start(copy);
    od::json_type type;
    check(doc.type().get(type));
    validate_document(doc, type, "");
    if (type != od::json_type::object) return make_error(errc::not_found, "absent");
    doc.rewind();
    od::value v;
    check(doc.get_value().get(v));
    std::string_view rest = dot_path;
    for (;;) {
      auto dot = rest.find('.');
      const std::string_view name = rest.substr(0, dot);
      if (type_of(v) != od::json_type::object) return make_error(errc::not_found, "absent");
      od::object obj;
      check(v.get_object().get(obj));
      bool found = false;
      for (auto member : obj) {
        od::field fl;
        check(std::move(member).get(fl));
        std::string_view key;
        check(fl.unescaped_key().get(key));
        if (key == name) {
          v = fl.value();
          found = true;
          break;
        }
      }
      if (!found) return make_error(errc::not_found, "absent");
      if (dot == std::string_view::npos) break;
      rest.remove_prefix(dot + 1);
    }
    switch (type_of(v)) {
      case od::json_type::null:
        return make_error(errc::not_found, "null");
      case od::json_type::string: {
        std::string_view s;
        check(v.get_string().get(s));
        return std::string(s);
      }
      case od::json_type::number:
        return std::string(trim_end(v.raw_json_token()));
      case od::json_type::boolean: {
        bool b = false;
        check(v.get_bool().get(b));
        return std::string(b ? "true" : "false");
      }
      default:
        return make_error(errc::invalid_argument, "names an object or array, not a value");
    }
  } catch (const bad_input&) {
    return make_error(errc::invalid_argument, "the document is not JSON");
  }
}

}  // namespace onceq::http
