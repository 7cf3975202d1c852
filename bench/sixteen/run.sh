#!/usr/bin/env bash
# The performance issue's many-core rows, in one prepared run (the bigger
# machine of docs/BENCHMARKS.md, "Sixteen cores"). Needs a bundle made here:
#   echo /.devbench/ >> .git/info/exclude
#   bundle.sh .devbench build/cmd/onceqd build/bench/onceq-bench \
#       /usr/bin/redis-server /usr/sbin/nats-server
# then, there: OUT=$OUT bash bench/sixteen/run.sh .devbench
# Rounds interleave the systems; every onceq-bench run appends its JSON
# report to $OUT/runs.jsonl and its log to $OUT/log.txt; the server's loop
# readings (scrape.py) go to $OUT/metrics.txt. No run starts after DEADLINE
# seconds. ROUNDS, SCALE (percent of the sizes below) and PARTS (a b c d)
# shrink it for a trial here.
set -u
bundle=$(cd "${1:?bundle dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/sixteen-out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}; DEADLINE=${DEADLINE:-480}; SCALE=${SCALE:-100}; PARTS=${PARTS:-"a b c d"}
D=${BENCH_DIR:-$bundle/../.bench-data}; mkdir -p "$D"
export ONCEQD=$bundle/wbin/onceqd METRICS_LOG=$OUT/metrics.txt
B=$bundle/wbin
n() { echo $(( $1 * SCALE / 100 )); }   # SCALE percent of the full size
say() { echo "$*" | tee -a "$OUT/log.txt"; }

say "nproc=$(nproc) kernel=$(uname -r) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
say "data: $(df -h "$D" | tail -1) fsync: $(dd if=/dev/zero of="$D/dd" bs=4k count=2000 oflag=dsync 2>&1 | tail -1)"
rm -f "$D/dd"

# bench NAME ARGS...: one onceq-bench run, its JSON appended as one line.
bench() {
  local name=$1; shift
  local t0=$SECONDS
  if [ "$SECONDS" -ge "$DEADLINE" ]; then say "SKIP $name (past ${DEADLINE}s)"; return; fi
  RUN_LABEL=$name timeout 90 "$B/onceq-bench" --tmp "$D" --onceqd "$here/onceqd-watched" \
    --redis-server "$B/redis-server" --nats-server "$B/nats-server" \
    --out-json "$D/r.json" --out-md "$D/r.md" "$@" >>"$OUT/log.txt" 2>&1
  local rc=$?
  if [ -s "$D/r.json" ]; then
    python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "report": json.load(open(sys.argv[2]))}))' \
      "$name" "$D/r.json" >>"$OUT/runs.jsonl"
  fi
  rm -f "$D/r.json" "$D/r.md"
  say "RUN $name rc=$rc ${SECONDS}s (+$((SECONDS - t0))s)"
}

for r in $(seq 1 "$ROUNDS"); do
  say "--- round $r"
  for part in $PARTS; do case $part in
  a)  # one topic, one message per request over 64 connections (and batches)
    for v in "spread:--shards 16" "migrate:--shards 16 --no-spread-connections" \
             "stay:--shards 16 --no-migrate-connections" "one:--shards 1"; do
      bench "a.$r.onceq-${v%%:*}" --systems onceq --onceqd-args "${v#*:}" --workloads w1 \
        --durability synced --messages "$(n 400000)" --single-messages "$(n 200000)"
    done
    bench "a.$r.redis" --systems redis --workloads w1 --durability synced \
      --messages "$(n 400000)" --single-messages "$(n 200000)"
    bench "a.$r.nats" --systems nats --workloads w1 --durability default \
      --messages "$(n 400000)" --single-messages "$(n 200000)" ;;
  b)  # drain and end to end, one topic
    for v in "spread:--shards 16" "migrate:--shards 16 --no-spread-connections" "one:--shards 1"; do
      bench "b.$r.onceq-${v%%:*}" --systems onceq --onceqd-args "${v#*:}" --workloads w2,w3 \
        --durability synced --messages "$(n 200000)" --rate 0
    done
    bench "b.$r.redis" --systems redis --workloads w2,w3 --durability synced \
      --messages "$(n 200000)" --rate 0
    bench "b.$r.nats" --systems nats --workloads w2,w3 --durability default \
      --messages "$(n 200000)" --rate 0 ;;
  c)  # 8 topics over 256 connections: 1 shard against 8
    for v in "1:--shards 1" "8:--shards 8" "8-loopsync:--shards 8 --wal-sync loop"; do
      bench "c.$r.onceq-${v%%:*}" --systems onceq --onceqd-args "${v#*:}" --workloads w1 \
        --durability synced --topics 8 --producers 8 --single-producers 256 \
        --messages "$(n 800000)" --single-messages "$(n 400000)"
    done
    bench "c.$r.redis" --systems redis --workloads w1 --durability synced --producers 8 \
      --single-producers 256 --messages "$(n 800000)" --single-messages "$(n 400000)" ;;
  d)  # p99 at 10k msg/s, fresh and after 1M messages (one per round)
    bench "d.$r.onceq" --systems onceq --workloads w3 --durability synced \
      --messages "$(n 20000)" --history "$(n 1000000)" --rate 10000 --rate-seconds 5 ;;
  esac; done
done
rm -rf "$D"
say "done ${SECONDS}s"
