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
// Neither happens while cores are scarce: fewer than k_spare_cores of the
// cores the process may use sat idle over the last period
// (shard/cpu_idle.hpp; unknown counts as scarce), or a loop waits for a
// core more than k_scarce of the time. Then more runnable threads only add
// crossings, and sessions migrate as they always did. A loop that gets
// k_saturated busy sheds sessions; a session stays off a loop only while
// that loop is k_stay_away busy and its own is at most k_room busy, and
// k_room < k_stay_away < k_saturated: two loops never keep each other's
// sessions, and a loop that has shed its sessions (and so runs below
// k_saturated) still keeps them off.
//
// The thresholds come from measurements on 16 cores (docs/BENCHMARKS.md,
// "Sixteen cores"): one topic's loop, with every session on it, ran
// 0.77-0.90 busy, and with every session elsewhere 0.53-0.66 busy while
// the topic moved 1.3-1.8x the messages.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>

#include "shard/loop_load.hpp"

namespace onceq::http {

using loop_reading = loop_load::reading;

// A loop at least this busy sheds sessions it serves itself.
inline constexpr double k_saturated = 0.60;
// A session stays off a loop at least this busy (when its own has room).
inline constexpr double k_stay_away = 0.45;
// A loop at most this busy has room for more sessions.
inline constexpr double k_room = 0.30;
// A loop waiting this much for a core: cores are scarce.
inline constexpr double k_scarce = 0.10;
// Fewer idle cores than this: cores are scarce. A core for the loop that
// takes a session, and half a core of margin: on two cores under a local
// client the reading wandered 0.5-1.8 around one idle core, and spreading
// there measured no better than migrating (docs/BENCHMARKS.md, "Sixteen
// cores").
inline constexpr double k_spare_cores = 1.5;

// A session that spread, or stayed off a busy loop, does not migrate for
// this long: a loop's 50 ms readings swing with its fsync cycle, and on 16
// cores without it nearly every spread session came back at the first low
// window (44 spreads and 44 returns in one run).
inline constexpr std::chrono::milliseconds k_settle{1000};

// idle_cores: cpu_idle::read(), the idle cores over the last period.

// A session on loop `here` whose last requests went to the loop `owner`:
// true when it should stay instead of migrating there.
bool stays_off(loop_reading owner, loop_reading here, std::optional<double> idle_cores) noexcept;

// A session on loop `home` whose requests that loop serves: the loop it
// should spread to (loops[i] is loop i's reading), if any.
std::optional<std::uint32_t> spread_to(std::uint32_t home, std::span<const loop_reading> loops,
                                       std::optional<double> idle_cores) noexcept;

}  // namespace onceq::http
