#!/usr/bin/env bash
# Builds onceq and its tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (ONCEQ_SANITIZE, the default compiler) in ./build-asan and runs the unit and
# integration tests once. Any sanitizer report fails the test that caused it.
# Environment: BUILD_DIR (default build-asan), JOBS, CMAKE_ARGS, as for
# scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build-asan}"
# UBSan already aborts (-fno-sanitize-recover); ASan: report leaks too, and
# a stack trace for every UBSan report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# -O1 instead of Release's -O3 -DNDEBUG: the sanitizers find the same bugs,
# the build is about twice as fast, and assert()s are on.
BUILD_DIR="$build_dir" \
  CMAKE_ARGS="-DONCEQ_SANITIZE=ON -DONCEQ_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELEASE=-O1 ${CMAKE_ARGS:-}" \
  bash scripts/build.sh
# Unit and integration tests. The crash loops are left to the normal
# build's run: they count kills per wall-clock second, and a sanitized
# onceqd starts several times slower, so under ASan they measure the
# machine, not onceq. The packaging test packs the release binaries.
ctest --test-dir "$build_dir" --output-on-failure \
  -E 'crash_loop_test|crash_loop_catches_rollback' -LE packaging
