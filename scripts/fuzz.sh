#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in ./build-fuzz and
# runs each for a bounded time, starting from its seed corpus
# (tests/fuzz/corpus/<target>). Fails on the first crash, leak, sanitizer
# report or timeout; the input that caused it is saved in
# build-fuzz/fuzz-artifacts/<target>/ (reproduce: build-fuzz/tests/fuzz/<target> <file>).
#   scripts/fuzz.sh [target...]      default: every target
# Environment: FUZZ_SECONDS (default 60 per target), BUILD_DIR (default
# build-fuzz), JOBS (default nproc), CXX (default clang++), CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build-fuzz}"
jobs="${JOBS:-$(nproc)}"
seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(request_fuzz codec_fuzz schema_fuzz)
fi

# Asserts stay on (no NDEBUG); -O1 as libFuzzer recommends. The fuzz
# targets do not link RocksDB, but configuring the project needs it found.
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DONCEQ_FUZZ=ON -DONCEQ_BUILD_TESTS=OFF -DONCEQ_BUILD_BENCH=OFF \
  -DROCKSDB_INCLUDE_DIR=/usr/include \
  -DROCKSDB_LIBRARY="/usr/lib/$(gcc -print-multiarch)/librocksdb.so" ${CMAKE_ARGS:-}
build_args=()
for t in "${targets[@]}"; do
  build_args+=(--target "$t")
done
cmake --build "$build_dir" -j "$jobs" "${build_args[@]}"

for t in "${targets[@]}"; do
  exe="$build_dir/tests/fuzz/$t"
  seeds="tests/fuzz/corpus/$t"
  # New inputs go to a scratch corpus, not into the repository's seeds.
  work="$build_dir/fuzz-corpus/$t"
  artifacts="$build_dir/fuzz-artifacts/$t"
  mkdir -p "$work" "$artifacts"
  dict=()
  case "$t" in
    request_fuzz | codec_fuzz) dict=(-dict=tests/fuzz/http.dict) ;;
  esac
  echo "fuzz: $t for ${seconds}s"
  "$exe" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "$work" "$seeds"
done
