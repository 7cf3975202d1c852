#!/usr/bin/env bash
# Configures and builds ./build-asan: onceq, its tests and (with clang) the
# libFuzzer targets, all under ASan+UBSan with assertions on. One build
# serves both scripts/ci-sanitize.sh (the test suite) and scripts/fuzz.sh
# (the fuzzers), so CI compiles the sanitized server once.
#   scripts/sanitize-build.sh [target...]    default: everything
# Environment: BUILD_DIR (default build-asan), JOBS (default nproc),
# CXX (default clang++ when installed, else c++), SANITIZE_OPT (default -O0:
# a third of -O1's build time, docs/RELIABILITY.md "CI"),
# CMAKE_ARGS (extra configure arguments).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build-asan}"
jobs="${JOBS:-$(nproc)}"
if [ -z "${CXX:-}" ]; then
  if command -v clang++ >/dev/null; then CXX=clang++; else CXX=c++; fi
fi
# Line tables only: sanitizer reports name file:line at a fraction of -g's
# compile and link time.
case "$("$CXX" --version)" in
  *clang*) debug=-gline-tables-only ;;
  *) debug=-g1 ;;
esac
# The Release configuration with its flags replaced: no -DNDEBUG, so
# assert()s are on. Debian's shared librocksdb (scripts/deps.sh installs it)
# links faster than the static release build, and nothing here measures
# speed.
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="${SANITIZE_OPT:--O0} $debug" \
  -DONCEQ_SANITIZE=ON -DONCEQ_FUZZ=ON -DONCEQ_BUILD_BENCH=OFF \
  -DROCKSDB_INCLUDE_DIR=/usr/include \
  -DROCKSDB_LIBRARY="/usr/lib/$(gcc -print-multiarch)/librocksdb.so" ${CMAKE_ARGS:-}

targets=()
for t in "$@"; do
  targets+=(--target "$t")
done
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
