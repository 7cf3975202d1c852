#pragma once

// onceqd's command line: every option struct of the server, filled from
// flags. The only place defaults are overridden.

#include <string>
#include <string_view>
#include <vector>

#include "broker/broker.hpp"
#include "broker/runner.hpp"
#include "http/options.hpp"
#include "storage/rocksdb/rocksdb_store.hpp"

namespace onceq::cmd {

struct config {
  storage::storage_options storage = [] {
    storage::storage_options s;
    s.data_dir = "./data";  // Default: ./data
    return s;
  }();
  broker_options broker;
  runner_options runner;
  http::http_options http;
  millis shutdown_grace_ms = 10'000;  // Default: 10 s for open requests at SIGTERM
  // Bearer tokens, scopes and topics (docs/SECURITY.md); reread on SIGHUP.
  std::string auth_file;  // Default: "" = no auth, every route open
  bool show_help = false;
  bool show_version = false;
};

// Parses argv (without argv[0]); "--flag value" and "--flag=value" both work.
// Errors: errc::invalid_argument naming the flag.
result<config> parse_args(const std::vector<std::string_view>& args);

// The --help text: every flag with its default.
std::string usage();

}  // namespace onceq::cmd
