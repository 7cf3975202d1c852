#!/usr/bin/env bash
# Builds a release (NDEBUG, -O3) static librocksdb.a from Debian's own
# RocksDB source package and installs it to /opt/onceq-rocksdb.
#
# Why: Debian 12's librocksdb 7.8.3 is built without NDEBUG (CMake build type
# "None"), so every RocksDB assert() stays in; about half of the broker core's
# CPU goes to MemTable::Add / InlineSkipList::Insert. Same version, same
# Debian patches, same compressions (snappy, lz4, zstd, zlib, bz2), so data
# directories stay interchangeable with the Debian library. See
# docs/ROCKSDB-NDEBUG.md.
#
# Idempotent: does nothing when $ROCKSDB_PREFIX/lib/librocksdb.a exists and
# was built with this script's current flags (the stamp file
# $ROCKSDB_PREFIX/onceq-build-id records them); otherwise it rebuilds.
# Then build onceq against it:
#   cmake -S . -B build-ndebug -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DROCKSDB_INCLUDE_DIR=/opt/onceq-rocksdb/include \
#     -DROCKSDB_LIBRARY=/opt/onceq-rocksdb/lib/librocksdb.a
#
# Environment: ROCKSDB_PREFIX (default /opt/onceq-rocksdb), ROCKSDB_VERSION
# (Debian source version, default: that of the installed librocksdb-dev, or
# 7.8.3-2), ROCKSDB_WORK (scratch dir, default /tmp/onceq-rocksdb-build),
# JOBS (default nproc).
set -euo pipefail

prefix="${ROCKSDB_PREFIX:-/opt/onceq-rocksdb}"
work="${ROCKSDB_WORK:-/tmp/onceq-rocksdb-build}"
jobs="${JOBS:-$(nproc)}"

# Bump when the cmake flags below change, so that existing installs rebuild.
build_id="release-rtti-sse42-1"
stamp="$prefix/onceq-build-id"
if [ -f "$prefix/lib/librocksdb.a" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$build_id" ]; then
  echo "rocksdb-release: $prefix/lib/librocksdb.a ($build_id) already exists, nothing to do"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

version="${ROCKSDB_VERSION:-}"
if [ -z "$version" ]; then
  version="$(dpkg-query -W -f='${Version}' librocksdb-dev 2>/dev/null || true)"
  version="${version:-7.8.3-2}"
fi
upstream="${version%-*}"   # 7.8.3-2 -> 7.8.3
upstream="${upstream#*:}"  # drop an epoch, if any

# Build tools and the libraries the Debian package is linked against
# (minus gflags, which only the RocksDB tools use).
packages=(cmake ninja-build g++ dpkg-dev
          libsnappy-dev liblz4-dev libzstd-dev zlib1g-dev libbz2-dev)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# deb-src line, so that `apt-get source` works.
src_list=/etc/apt/sources.list.d/debian-src.sources
need_update=0
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "rocksdb-release: adding $src_list"
  printf '%s\n' \
    'Types: deb-src' \
    'URIs: http://deb.debian.org/debian' \
    'Suites: bookworm' \
    'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
    | "${sudo[@]}" tee "$src_list" >/dev/null
  need_update=1
fi
if ! ls /var/lib/apt/lists/*_source_Sources* >/dev/null 2>&1; then
  need_update=1
fi
if [ "${#missing[@]}" -gt 0 ]; then
  need_update=1
fi
if [ "$need_update" -eq 1 ]; then
  "${sudo[@]}" apt-get update
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "rocksdb-release: installing ${missing[*]}"
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Source, with the Debian patches applied (apt-get source runs dpkg-source -x;
# already-downloaded files with the right checksums are not fetched again).
mkdir -p "$work"
cd "$work"
src="$work/rocksdb-$upstream"
if [ ! -f "$src/CMakeLists.txt" ]; then
  apt-get source "rocksdb=$version"
fi

# Release = -O3 -DNDEBUG. USE_RTTI=1 because onceq subclasses RocksDB classes
# (compaction filter) and is itself built with RTTI; RocksDB's Release default
# is -fno-rtti, which leaves out the typeinfo symbols onceq needs.
# PORTABLE=1 as in Debian (no -march=native: the library may run on other
# CPUs), but FORCE_SSE42=ON: with PORTABLE alone RocksDB computes every WAL
# and block checksum with its table-driven Slow_CRC32 (2.4% of onceqd's CPU
# in W1); SSE4.2's crc32 instruction and PCLMULQDQ are on every x86-64 CPU
# since 2010 (Nehalem / Bulldozer).
sse42=OFF
if [ "$(uname -m)" = x86_64 ] && grep -qw sse4_2 /proc/cpuinfo && grep -qw pclmulqdq /proc/cpuinfo; then
  sse42=ON
fi
cmake -S "$src" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_INSTALL_INCLUDEDIR=include \
  -DROCKSDB_BUILD_SHARED=OFF \
  -DWITH_TESTS=OFF -DWITH_TOOLS=OFF -DWITH_CORE_TOOLS=OFF \
  -DWITH_BENCHMARK_TOOLS=OFF -DWITH_TRACE_TOOLS=OFF \
  -DWITH_GFLAGS=OFF -DWITH_LIBURING=OFF -DWITH_JNI=OFF \
  -DWITH_SNAPPY=ON -DWITH_LZ4=ON -DWITH_ZSTD=ON -DWITH_ZLIB=ON -DWITH_BZ2=ON \
  -DPORTABLE=1 -DFORCE_SSE42="$sse42" -DFAIL_ON_WARNINGS=OFF -DUSE_RTTI=1

cmake --build "$work/build" -j "$jobs" --target rocksdb
"${sudo[@]}" cmake --install "$work/build"
echo "$build_id" | "${sudo[@]}" tee "$stamp" >/dev/null

echo "rocksdb-release: installed $prefix/lib/librocksdb.a (RocksDB $version, NDEBUG)"
echo "rocksdb-release: link it with: -llz4 -lzstd -lsnappy -lz -lbz2 -lpthread -ldl"
