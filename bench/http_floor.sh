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
# one), SECONDS_PER_RUN (8), REDIS=0 (onceq's row only: for before/after
# runs of onceqd), TLS=1 (onceq serves HTTPS with a throwaway certificate;
# needs openssl).
#
# CALLGRIND=N: instead, the server's instructions per request, which a busy
# machine does not blur: onceqd (--fsync none) under valgrind's callgrind,
# one kept-alive client sending N GET /v1/healthz, then N POST /v1/produce
# of one message each; counters zeroed after a warm-up and dumped after
# each phase (callgrind_control). Prints Ir/request for each.
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

tls_args=()
scheme=http
if [[ -n "${TLS:-}" ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" \
    -days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1
  tls_args=(--tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem")
  scheme=https
fi

if [[ -n "${CALLGRIND:-}" ]]; then
  n="$CALLGRIND"
  port=18933
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
    "$onceqd" --listen "127.0.0.1:$port" --shards "$shards" --data-dir "$dir/onceq" \
    --fsync none "${tls_args[@]}" >"$dir/onceq.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  python3 - "$port" "$n" "${pids[0]}" "$dir" "${TLS:-}" <<'PY'
import glob, os, socket, ssl, subprocess, sys, time
port, n, pid, d, tls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if tls:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(s)
buf = b""
def call(method, path, body=b""):
    global buf
    s.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
              % (method, path, len(body), body))
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    head, buf = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, v = line.split(b":", 1)
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(buf) < length:
        buf += s.recv(65536)
    buf = buf[length:]
    return int(head.split(b" ")[1])
assert call(b"POST", b"/v1/topics", b'{"name":"floor","partitions":1}') in (200, 201)
produce = b'{"topic":"floor","value":"' + b"v" * 256 + b'"}'
def run(k):
    for _ in range(k):
        assert call(b"GET", b"/v1/healthz") == 200
    for _ in range(k):
        assert call(b"POST", b"/v1/produce", produce) == 200
run(200)  # warm-up: buffers, the parser, RocksDB's memtable
def dump(label):
    subprocess.run(["callgrind_control", "-d", label, pid], check=True, stdout=subprocess.DEVNULL)
subprocess.run(["callgrind_control", "-z", pid], check=True, stdout=subprocess.DEVNULL)
for _ in range(n):
    assert call(b"GET", b"/v1/healthz") == 200
dump("healthz")
for _ in range(n):
    assert call(b"POST", b"/v1/produce", produce) == 200
dump("produce")
def total(label):
    for f in glob.glob(os.path.join(d, "cg.*")):
        text = open(f, errors="replace").read()
        if "desc: Trigger: dump " + label + "\n" not in text:
            continue
        for line in text.splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit("no dump for " + label)
for label in ("healthz", "produce"):
    print(f"onceq {label}{' (TLS)' if tls else ''}: {total(label) / n:.0f} Ir/request (callgrind, n={n})")
PY
  exit 0
fi

port=18931
"$onceqd" --listen "127.0.0.1:$port" --shards "$shards" --data-dir "$dir/onceq" \
  "${tls_args[@]}" >"$dir/onceq.log" 2>&1 &
pids+=($!)
wait_port "$port"
c0=$(cpu_ticks "${pids[0]}")
out=$(wrk -t2 -c64 -d"${secs}s" "$scheme://127.0.0.1:$port/v1/healthz")
c1=$(cpu_ticks "${pids[0]}")
n=$(awk '/requests in/ {print $1}' <<<"$out")
rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
echo "onceq GET /v1/healthz (--shards $shards${TLS:+, TLS}): $rate req/s, server CPU $(per_request "$c0" "$c1" "$n") us/request"

[[ "${REDIS:-1}" == 0 ]] && exit 0

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
