#!/usr/bin/env bash
# Installs what the client suites need (clients/test.sh): Debian packages
# through apt-get when missing, and the TypeScript dev dependencies pinned
# in clients/typescript/package-lock.json (npm ci). No PyPI, no Go module
# proxy: the Python package and the Go module use their standard library
# only. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# python3-venv: the install test builds the package with its in-tree,
# standard-library-only backend (pip install --no-build-isolation) in a venv;
# openssl makes the TLS tests' certificate; nodejs brings node and npm;
# golang-go is Debian 12's Go 1.19, the oldest Go clients/go supports.
packages=(python3 python3-venv python3-pip openssl nodejs golang-go)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "clients/deps.sh: installing ${missing[*]}"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "clients/deps.sh: all ${#packages[@]} Debian packages already installed"
fi

major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
  echo "clients/deps.sh: Node.js >= 20 is needed (fetch, AbortSignal.any); found $(node --version 2>/dev/null || echo none)" >&2
  exit 1
fi
command -v npm >/dev/null || { echo "clients/deps.sh: npm is missing" >&2; exit 1; }

# Go 1.19+ (generics, atomic.Bool); golang-go puts go on PATH.
gominor=$(go env GOVERSION 2>/dev/null | sed -nE 's/^go1\.([0-9]+).*/\1/p')
if [ -z "$gominor" ] || [ "$gominor" -lt 19 ]; then
  echo "clients/deps.sh: Go >= 1.19 is needed; found $(go version 2>/dev/null || echo none)" >&2
  exit 1
fi

(cd "$here/typescript" && npm ci --no-audit --no-fund --loglevel=error)
echo "clients/deps.sh: done"
