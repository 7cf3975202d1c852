#!/usr/bin/env bash
# The server CPU one request costs on onceq's HTTP layer alone, against
# Redis's whole durable write: 64 connections each.
#   onceq  GET /v1/healthz (wrk): parse, route, answer on the shards'
#          loops; no command, no storage, no fsync
#   Redis  PING (redis-benchmark), then XADD of 256 bytes with
#          appendonly yes, appendfsync always
# CPU is the server's utime+stime over the run (/proc/PID/stat) divided by
# the requests. Needs wrk, redis-server, redis-benchmark; talks only to
# 127.0.0.1 and stops only the servers it started.
#   bench/http_floor.sh [ONCEQD]   (default build-rel/cmd/onceqd)
# Environment: SHARDS (onceqd --shards, default 1: one loop, as Redis has
# one), SECONDS_PER_RUN (8).
set -euo pipefail
cd "$(dirname "$0")/.."
onceqd="${1:-build-rel/cmd/onceqd}"
shards="${SHARDS:-1}"
secs="${SECONDS_PER_RUN:-8}"
tck=$(getconf CLK_TCK)
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
per_request() { python3 -c "print(round(($2 - $1) / $tck / $3 * 1e6, 1))" "$@"; }
wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "port $1 did not open" >&2
  exit 1
}

port=18931
"$onceqd" --listen "127.0.0.1:$port" --shards "$shards" --data-dir "$dir/onceq" \
  >"$dir/onceq.log" 2>&1 &
pids+=($!)
wait_port "$port"
c0=$(cpu_ticks "${pids[0]}")
out=$(wrk -t2 -c64 -d"${secs}s" "http://127.0.0.1:$port/v1/healthz")
c1=$(cpu_ticks "${pids[0]}")
n=$(awk '/requests in/ {print $1}' <<<"$out")
rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
echo "onceq GET /v1/healthz (--shards $shards): $rate req/s, server CPU $(per_request "$c0" "$c1" "$n") us/request"

rport=18932
redis-server --port "$rport" --dir "$dir" --appendonly yes --appendfsync always --save '' \
  >"$dir/redis.log" 2>&1 &
pids+=($!)
wait_port "$rport"
value=$(printf 'v%.0s' $(seq 256))
run_redis() {
  local label=$1 n=$2
  shift 2
  c0=$(cpu_ticks "${pids[1]}")
  local line
  line=$(redis-benchmark -p "$rport" -c 64 -n "$n" -q "$@" 2>/dev/null | tr '\r' '\n' | grep -v '^ *$' | tail -1)
  c1=$(cpu_ticks "${pids[1]}")
  echo "redis $label: ${line##*: }, server CPU $(per_request "$c0" "$c1" "$n") us/request"
}
run_redis "PING" 400000 -t ping_mbulk
run_redis "XADD (appendfsync always)" 200000 XADD s '*' f "$value"
