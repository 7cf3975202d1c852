#include "http/embedded.hpp"

#include "onceq_embedded.hpp"

namespace onceq::http {

namespace {

template <std::size_t N>
std::string_view view(const unsigned char (&bytes)[N]) noexcept {
  return {reinterpret_cast<const char*>(bytes), N};
}

}  // namespace

std::string_view ui_page() noexcept {
  return view(embedded::k_ui_html);
}

std::string_view openapi_document() noexcept {
  return view(embedded::k_openapi_json);
}

}  // namespace onceq::http
