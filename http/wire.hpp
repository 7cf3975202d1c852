#pragma once

// The bytes of a response on the wire, rendered by hand: the status line
// and the header block into a buffer the session reuses, then that buffer
// and the body go out in one gathered write (writev). Beast's serializer
// does the same job through a chain of buffer views that cost more CPU
// than the rest of a small request's HTTP handling (docs/BENCHMARKS.md,
// "Answers rendered by hand"). Streamed answers keep the serializer.

#include <string>

#include "http/router.hpp"

namespace onceq::http {

// Replaces out with res's status line and header fields, in the order they
// were set, and the blank line that ends them: what Beast's serializer
// writes before the body of a response without chunked encoding.
void render_head(const response& res, std::string& out);

}  // namespace onceq::http
