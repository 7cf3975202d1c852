#!/usr/bin/env bash
# Installs the dependencies, builds onceq and its tests, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure
