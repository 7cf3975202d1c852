#!/usr/bin/env bash
# Installs the Debian packages onceq needs to build, test and benchmark.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail

packages=(
  libboost1.81-dev librocksdb-dev nlohmann-json3-dev libfmt-dev libgtest-dev
  ninja-build cmake g++
  libnats-dev libhiredis-dev nats-server redis-server
  curl
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
