#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) in ./build-asan with clang
# (scripts/sanitize-build.sh, the same build as scripts/ci-sanitize.sh's)
# and runs each for a bounded time, starting from its seed corpus
# (tests/fuzz/corpus/<target>). Fails on the first crash, leak, sanitizer
# report or timeout; the input that caused it is saved in
# build-asan/fuzz-artifacts/<target>/ (reproduce: build-asan/tests/fuzz/<target> <file>).
#   scripts/fuzz.sh [target...]      default: every target
# Environment: FUZZ_SECONDS (default 60 per target), FUZZ_BUILD=0 (run
# what build-asan holds, without building: for two runs side by side, as
# .ci/run does), and as for scripts/sanitize-build.sh (BUILD_DIR, JOBS, CXX
# (must be a clang), SANITIZE_OPT, CMAKE_ARGS).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build-asan}"
seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(request_fuzz codec_fuzz schema_fuzz)
fi

if [ "${FUZZ_BUILD:-1}" != 0 ]; then
  BUILD_DIR="$build_dir" bash scripts/sanitize-build.sh "${targets[@]}"
fi

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
