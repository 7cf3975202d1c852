#pragma once

// Files compiled into the binary (cmake/embed.cmake): the web console of
// GET /ui and the OpenAPI document of GET /v1/openapi.json. Nothing is read
// from disk at run time.
//
// Thread safety: the views point at constant static data.

#include <string_view>

namespace onceq::http {

// http/ui/index.html with style.css and app.js inlined: one self-contained page.
std::string_view ui_page() noexcept;

// docs/openapi.json as committed.
std::string_view openapi_document() noexcept;

}  // namespace onceq::http
