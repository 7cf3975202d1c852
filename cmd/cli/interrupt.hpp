#pragma once

// SIGINT/SIGTERM as a flag the blocking client polls, so that `consume
// --follow` stops between (or inside) requests and exits 130 cleanly,
// instead of dying with leased messages half printed.

namespace onceq::cli {

// Installs the handlers; call once from main().
void install_interrupt_handler();
// True once SIGINT or SIGTERM arrived. Async-signal-safe to set, any thread.
bool interrupted();

}  // namespace onceq::cli
