#!/usr/bin/env bash
# Long crash-loop runs: SIGKILL and restart onceqd N times under load, then
# check the client-side history (see docs/RELIABILITY.md).
#   scripts/crash-loop.sh [KILLS] [SEED] [extra crash_loop flags...]
#   e.g. scripts/crash-loop.sh 500 42
#        scripts/crash-loop.sh 200 42 --cluster 3    (a 3-node cluster: kill -9
#        one node at a time, the shard leader 60% of the time; --leader-percent,
#        --down-max-ms; the nodes' logs are DATA/<id>.log)
# Builds crash_loop and onceqd first (scripts/build.sh) unless NO_BUILD=1.
# The data directory is a fresh one under /tmp, removed when the run passes
# and kept (its path printed) when it fails.
# Environment: BUILD_DIR (default build), DURATION_LIMIT seconds for the kill
# phase (default: 10 s per kill, so a healthy run is never cut short).
set -euo pipefail
cd "$(dirname "$0")/.."

kills="${1:-100}"
seed="${2:-$(date +%s)}"
shift $(($# > 2 ? 2 : $#))
build_dir="${BUILD_DIR:-build}"
duration_limit="${DURATION_LIMIT:-$((kills * 10 + 60))}"

if [ "${NO_BUILD:-0}" != 1 ]; then
  BUILD_DIR="$build_dir" ./scripts/build.sh crash_loop onceqd >/dev/null
fi

data_dir="$(mktemp -d /tmp/onceq-crash-loop-XXXXXX)"
cmd=("$build_dir/tests/integration/crash_loop" --kills "$kills" --seed "$seed"
     --data-dir "$data_dir/data" --onceqd "$build_dir/cmd/onceqd"
     --duration-limit "$duration_limit" "$@")
echo "crash-loop.sh: ${cmd[*]}"
status=0
"${cmd[@]}" || status=$?
if [ "$status" -eq 0 ]; then
  rm -rf "$data_dir"
else
  echo "crash-loop.sh: exit $status; data kept in $data_dir" >&2
fi
exit "$status"
