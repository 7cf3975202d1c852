#pragma once

// Where a plain HTTP session should run (session.hpp), from how busy the
// loops are (shard/loop_load.hpp). A session's HTTP parsing, JSON and
// answer rendering run on its loop; the typed command runs on the loop of
// the shard that owns the topic, crossing through its mailbox when that
// is another loop. So:
//  - migrate: a session whose requests keep going to another shard moves
//    to that shard's loop (one hop less per request), as long as that loop
//    is not saturated while this one has room;
//  - spread: a session on a saturated loop, whose requests that loop
//    serves, moves to the least busy loop with room; its commands then
//    cross, and the owner's core is left for the commands of every
//    session. One topic's work so uses more than one core.
// Neither happens while cores are scarce (a loop waits for a core more
// than k_scarce of the time): then more runnable threads only add
// crossings, and sessions migrate as they always did. The gap between
// k_saturated and k_stay_away keeps sessions from moving back and forth.

#include <cstdint>
#include <optional>
#include <span>

#include "shard/loop_load.hpp"

namespace onceq::http {

using loop_reading = loop_load::reading;

// A loop at least this busy sheds sessions it serves itself.
inline constexpr double k_saturated = 0.90;
// A session stays off a loop at least this busy (when its own has room).
inline constexpr double k_stay_away = 0.60;
// A loop at most this busy has room for more sessions.
inline constexpr double k_room = 0.50;
// A loop waiting this much for a core: cores are scarce.
inline constexpr double k_scarce = 0.10;

// A session on loop `here` whose last requests went to the loop `owner`:
// true when it should stay instead of migrating there.
bool stays_off(loop_reading owner, loop_reading here) noexcept;

// A session on loop `home` whose requests that loop serves: the loop it
// should spread to (loops[i] is loop i's reading), if any.
std::optional<std::uint32_t> spread_to(std::uint32_t home,
                                       std::span<const loop_reading> loops) noexcept;

}  // namespace onceq::http
