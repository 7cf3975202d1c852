#!/usr/bin/env bash
# Configures (Release, Ninja) and builds onceq in ./build. Idempotent: a
# second run only rebuilds what changed.
#   scripts/build.sh [target...]    e.g. scripts/build.sh onceqd
# Environment: BUILD_DIR (default build), JOBS (default nproc),
# CMAKE_ARGS (extra configure arguments, e.g. -DONCEQ_BUILD_BENCH=OFF),
# ONCEQ_CLUSTER (off: -DONCEQ_CLUSTER=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"

# The assertion-free RocksDB of scripts/rocksdb-release.sh when it is there
# (and ONCEQ_ROCKSDB is not "debian"), else Debian's librocksdb.
rocksdb_prefix="${ROCKSDB_PREFIX:-/opt/onceq-rocksdb}"
rocksdb_args=()
if [ "${ONCEQ_ROCKSDB:-release}" != "debian" ] && [ -f "$rocksdb_prefix/lib/librocksdb.a" ]; then
  rocksdb_args=(-DROCKSDB_INCLUDE_DIR="$rocksdb_prefix/include"
                -DROCKSDB_LIBRARY="$rocksdb_prefix/lib/librocksdb.a")
else
  rocksdb_args=(-DROCKSDB_INCLUDE_DIR=/usr/include
                -DROCKSDB_LIBRARY="/usr/lib/$(gcc -print-multiarch)/librocksdb.so")
fi

# ONCEQ_CLUSTER=off (as for scripts/deps.sh): a build without clustering,
# which needs no raft (cluster/CMakeLists.txt).
cluster_args=()
if [ "${ONCEQ_CLUSTER:-on}" = "off" ]; then
  cluster_args=(-DONCEQ_CLUSTER=OFF)
fi

# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${rocksdb_args[@]}" \
  "${cluster_args[@]}" ${CMAKE_ARGS:-}

targets=()
for t in "$@"; do
  targets+=(--target "$t")
done
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
