#!/usr/bin/env bash
# Installs what the client suites need (clients/test.sh): Debian packages
# through apt-get when missing, and the TypeScript dev dependencies pinned
# in clients/typescript/package-lock.json (npm ci). No PyPI: the Python
# package uses the standard library only. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# python3-setuptools and python3-venv: the install test builds the package
# with Debian's setuptools (pip install --no-build-isolation) in a venv;
# openssl makes the TLS tests' certificate; nodejs brings node and npm.
packages=(python3 python3-setuptools python3-venv python3-pip openssl nodejs)
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

(cd "$here/typescript" && npm ci --no-audit --no-fund --loglevel=error)
echo "clients/deps.sh: done"
