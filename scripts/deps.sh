#!/usr/bin/env bash
# Installs the Debian packages onceq needs to build, test and benchmark.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail

packages=(
  libboost1.81-dev librocksdb-dev nlohmann-json3-dev libfmt-dev libgtest-dev
  libssl-dev libsimdjson-dev
  ninja-build cmake g++ libjemalloc-dev
  libnats-dev libhiredis-dev nats-server redis-server wrk
  curl libcli11-dev libtomlplusplus-dev python3-yaml clang libclang-rt-14-dev
  dpkg-dev file chromium python3-jsonschema
  libraft-dev libuv1-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

install_packages() {
  if [ "${#missing[@]}" -eq 0 ]; then
    echo "deps: all ${#packages[@]} packages already installed"
    return 0
  fi
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
}

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi

install_packages

# Debian's librocksdb is built with assertions on, which costs about half of
# the broker core's CPU (docs/BENCHMARKS.md, "RocksDB without assertions").
# Build the same version from Debian's source package without them, once
# (cached in /opt/onceq-rocksdb, ~11 min on 2 cores); scripts/build.sh links
# it when present. If that build fails, onceq still builds and runs against
# Debian's library. ONCEQ_ROCKSDB=debian skips it.
if [ "${ONCEQ_ROCKSDB:-release}" != "debian" ]; then
  if ! bash "$(dirname "$0")/rocksdb-release.sh"; then
    echo "deps: WARNING: building RocksDB without assertions failed;" \
         "using Debian's librocksdb (slower)" >&2
  fi
fi
# The raft a cluster runs on: Debian's raft 0.15 with upstream's commit rule
# linked in (scripts/raft-release.sh, third_party/raft/README.md; seconds).
# Not optional: Debian's own libraft can lose committed entries
# (canonical/raft#220), cluster/CMakeLists.txt refuses to configure without
# the fixed one, and so a failure here is an error. ONCEQ_CLUSTER=off skips
# it, for a build without clustering (scripts/build.sh then configures
# -DONCEQ_CLUSTER=OFF, and onceqd --cluster says it is not built in).
if [ "${ONCEQ_CLUSTER:-on}" != "off" ]; then
  if ! bash "$(dirname "$0")/raft-release.sh"; then
    echo "deps: ERROR: scripts/raft-release.sh failed (above): onceq's cluster needs its" \
         "raft and does not configure without it. Fix that, or set ONCEQ_CLUSTER=off here" \
         "and for scripts/build.sh for a build without clustering." >&2
    exit 1
  fi
fi
