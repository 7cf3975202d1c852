#!/usr/bin/env bash
# Builds onceq and its tests under ThreadSanitizer in ./build-tsan (clang,
# -O1, Debian's shared librocksdb) and runs the unit and integration tests
# once: the shard loops, requests that cross to another shard's loop,
# connection migration, shutdown, the syncer threads. Any data race the
# server or a test reports fails that test (halt_on_error: the server exits
# with TSan's exit code, and the test that started it sees it die).
#   scripts/tsan.sh [ctest -R pattern]
# Environment: BUILD_DIR (default build-tsan), JOBS (default nproc),
# CMAKE_ARGS (extra configure arguments).
# Not in CI by default (about 25 minutes on 2 cores, half of it the build);
# docs/RELIABILITY.md, "ThreadSanitizer", has the last run.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build-tsan}"
jobs="${JOBS:-$(nproc)}"
if ! command -v clang++ >/dev/null; then
  echo "tsan.sh: needs clang++ (scripts/deps.sh installs it)" >&2
  exit 1
fi
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
  -DONCEQ_TSAN=ON -DONCEQ_BUILD_BENCH=OFF \
  -DROCKSDB_INCLUDE_DIR=/usr/include \
  -DROCKSDB_LIBRARY="/usr/lib/$(gcc -print-multiarch)/librocksdb.so" ${CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"

# second_deadlock_stack: both stacks of a lock-order report. RocksDB and
# libraft are not instrumented: their own threads' synchronisation is
# invisible to TSan, so reports from inside them are suppressed
# (scripts/tsan.supp says which and why); onceq's own code never is.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}"
# The crash loops count kills per wall-clock second (too slow under TSan);
# the packaging test packs release binaries.
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" \
  -E 'crash_loop_(test|two_shards_test|catches_rollback|pipeline|ordering|cluster_moves)' -LE packaging \
  ${1:+-R "$1"}
