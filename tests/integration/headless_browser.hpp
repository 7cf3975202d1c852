#pragma once

// Headless Chromium for the console's end-to-end test (ui_test.cpp): loads
// a page, lets its scripts run for a virtual-time budget, and answers the
// DOM as serialized HTML, or writes a screenshot. Each call is one
// `chromium --headless` run in its own process group with a fresh profile,
// killed (the group, by its id) if it outlives its time limit.
//
// Thread safety: none; one call at a time.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace onceq::itest {

class headless_browser {
 public:
  // The browser to use: $ONCEQ_CHROMIUM, else chromium, chromium-browser,
  // google-chrome on PATH, if it can render a trivial page. nullopt (and
  // *why says what went wrong) when there is none or it cannot run here.
  static std::optional<headless_browser> find(std::string* why);

  struct run_result {
    bool ok = false;     // exited 0 within the limit
    std::string output;  // stdout (the DOM for dump_dom)
    std::string errors;  // the tail of stderr, for failure messages
  };

  // The DOM of url after budget of virtual time (timers run, fetches done).
  run_result dump_dom(const std::string& url, std::chrono::milliseconds budget,
                      std::chrono::seconds limit = std::chrono::seconds(30)) const;

  // A PNG of url at width x height after budget of virtual time.
  run_result screenshot(const std::string& url, const std::string& png_path, int width, int height,
                        std::chrono::milliseconds budget,
                        std::chrono::seconds limit = std::chrono::seconds(30)) const;

  const std::string& path() const { return path_; }

 private:
  explicit headless_browser(std::string path) : path_(std::move(path)) {}
  run_result run(const std::vector<std::string>& args, std::chrono::seconds limit) const;

  std::string path_;
};

}  // namespace onceq::itest
