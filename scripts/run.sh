#!/usr/bin/env bash
# Installs the dependencies, builds onceq and runs the server in the
# foreground on 127.0.0.1:8080 with its data in ./data (Ctrl-C stops it).
# Extra arguments go to onceqd, e.g. ./scripts/run.sh --fsync interval:5
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build.sh onceqd
mkdir -p data
exec ./build/cmd/onceqd --listen 127.0.0.1:8080 --data-dir ./data "$@"
