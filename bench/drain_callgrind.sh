#!/usr/bin/env bash
# Instructions per drained message, onceq against Redis Streams, under
# callgrind (docs/BENCHMARKS.md, "Ninth round"): each server runs under
# valgrind, bench/drain_callgrind.py preloads N messages and counts a window
# of the drain, and bench/callgrind_per_message.py prints the totals per
# message of the server's busiest thread (onceq: the shard loop; Redis: its
# main thread).
#   bench/drain_callgrind.sh [ONCEQD] [MODE] [N] [WARM] [MEASURE]
#   defaults: build/cmd/onceqd drain 100000 10000 50000
# Writes the callgrind files to OUT (default a fresh /tmp dir). Needs
# valgrind and redis-server (scripts/deps.sh installs both).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
onceqd="${1:-build/cmd/onceqd}"
mode="${2:-drain}" n="${3:-100000}" warm="${4:-10000}" measure="${5:-50000}"
out="${OUT:-$(mktemp -d /tmp/onceq-drain-cg.XXXXXX)}"
mkdir -p "$out"

wait_for() {  # file pattern
  for _ in $(seq 1 120); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 1; done
  echo "drain_callgrind: $1 never said '$2'" >&2
  return 1
}

run() {  # system command...
  local system=$1
  shift
  valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes \
    --callgrind-out-file="$out/cg-$system.%p" "$@" >"$out/$system.out" 2>"$out/$system.err" &
  local vg=$!
  local port
  if [ "$system" = onceq ]; then
    wait_for "$out/onceq.out" listening
    port=$(grep -o '[0-9]*$' "$out/onceq.out" | head -1)
  else
    wait_for "$out/redis.out" 'Ready to accept'
    port=$redis_port
  fi
  python3 "$here/drain_callgrind.py" "$system" "$port" "$n" "$mode" "$warm" "$measure" "$vg"
  kill "$vg"
  wait "$vg" || true
}

rm -rf "$out/onceq-data" "$out/redis-data"
mkdir -p "$out/onceq-data" "$out/redis-data"
run onceq "$onceqd" --listen 127.0.0.1:0 --data-dir "$out/onceq-data" --fsync always --shards 1
redis_port=$((20000 + RANDOM % 20000))
run redis redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly yes \
  --appendfsync always --dir "$out/redis-data"

# The window's counts are the dump taken when it closed (cg-SYSTEM.PID.1-TID,
# one file a thread); the thread with the most instructions is the one that
# serves.
for system in onceq redis; do
  busiest=$(for f in "$out"/cg-"$system".*.1-*; do
    printf '%s %s\n' "$(awk '/^totals:/ {print $2}' "$f")" "$f"
  done | sort -n | tail -1 | cut -d' ' -f2)
  printf '%s (%s): ' "$system" "$(basename "$busiest")"
  python3 "$here/callgrind_per_message.py" "$busiest" "$measure" | head -1
done
echo "callgrind files in $out"
