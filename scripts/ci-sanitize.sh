#!/usr/bin/env bash
# Builds onceq and its tests under AddressSanitizer + UndefinedBehaviorSanitizer
# in ./build-asan (scripts/sanitize-build.sh: clang when installed, which
# also builds the libFuzzer targets there for scripts/fuzz.sh) and runs the
# unit and integration tests once. Any sanitizer report fails the test that
# caused it.
# Environment: as for scripts/sanitize-build.sh (BUILD_DIR, JOBS, CXX,
# SANITIZE_OPT, CMAKE_ARGS).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build-asan}"
# UBSan already aborts (-fno-sanitize-recover); ASan: report leaks too, and
# a stack trace for every UBSan report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

BUILD_DIR="$build_dir" bash scripts/sanitize-build.sh
# Unit and integration tests. The crash loops are left to the normal
# build's run: they count kills per wall-clock second, and a sanitized
# onceqd starts several times slower, so under ASan they measure the
# machine, not onceq. The cluster's crash loop runs here with 10 kills
# instead of 20 (tests/integration/CMakeLists.txt). The packaging test
# packs the release binaries. One job per core, as scripts/test.sh.
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" \
  -E 'crash_loop_(test|two_shards_test|catches_rollback|pipeline|ordering|cluster_moves)' -LE 'packaging|cluster_pipeline'
