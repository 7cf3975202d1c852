#!/usr/bin/env bash
# An onceqd cluster on 127.0.0.1 for trying things out (3 nodes by default).
#   scripts/cluster.sh start     write DIR/cluster.toml, start the nodes, wait for leaders
#   scripts/cluster.sh stop      SIGTERM the nodes started here (SIGKILL after a grace)
#   scripts/cluster.sh status    each node's pid and whether it lives, then GET /v1/cluster
#   scripts/cluster.sh clean     stop, then remove DIR
# Node i (1-based) serves its API on HTTP_PORT + i - 1 and speaks Raft on
# RAFT_PORT + 10 * (i - 1) (group g on that + g, and the meta group on
# that + shards, so --shards up to 9 fit).
# Data, logs (nI.log) and pid files (nI.pid) live in DIR; a restart reuses
# the data. Only PIDs from DIR's pid files are ever signalled, and only if
# that process is still an onceqd started with this DIR's cluster file.
# Environment:
#   ONCEQ_CLUSTER_DIR  DIR (default /tmp/onceq-cluster)
#   BUILD_DIR          build directory (default build); onceqd is built with
#                      scripts/build.sh onceqd only if BUILD_DIR/cmd/onceqd is missing
#   ONCEQD             the onceqd binary (default BUILD_DIR/cmd/onceqd)
#   NODES              number of nodes (default 3)
#   REPLICAS           the cluster file's replicas: nodes holding each shard
#                      (default: not written, onceqd's 3)
#   HTTP_PORT          first API port (default 8081)
#   RAFT_PORT          first Raft port (default 7081)
#   HOST               address every node listens on (default 127.0.0.1)
#   SHARDS             onceqd --shards (default: onceqd's own)
#   ONCEQD_ARGS        more onceqd flags for every node (word-split)
#   START_TIMEOUT      seconds to wait for the nodes and the leaders (default 60)
#   STOP_GRACE         seconds between SIGTERM and SIGKILL (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${ONCEQ_CLUSTER_DIR:-/tmp/onceq-cluster}"
build_dir="${BUILD_DIR:-build}"
onceqd="${ONCEQD:-$build_dir/cmd/onceqd}"
nodes="${NODES:-3}"
replicas="${REPLICAS:-}"
http_port="${HTTP_PORT:-8081}"
raft_port="${RAFT_PORT:-7081}"
host="${HOST:-127.0.0.1}"
start_timeout="${START_TIMEOUT:-60}"
stop_grace="${STOP_GRACE:-10}"

usage() {
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

node_id() { echo "n$1"; }
node_http() { echo "$host:$((http_port + $1 - 1))"; }
node_raft() { echo "$host:$((raft_port + 10 * ($1 - 1)))"; }

# The pid in DIR/nI.pid if that process is alive and is an onceqd of this
# cluster file; nothing otherwise.
live_pid() {
  local pid_file pid cmdline
  pid_file="$dir/$(node_id "$1").pid"
  [ -f "$pid_file" ] || return 0
  pid="$(cat "$pid_file")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  case "$cmdline" in
    *onceqd*"--cluster $dir/cluster.toml"*) echo "$pid" ;;
  esac
}

# GET /v1/cluster of node i (body on stdout), or fail.
cluster_json() {
  curl -sf --max-time 2 "http://$(node_http "$1")/v1/cluster"
}

# Whether node i's /v1/cluster names a leader for every shard.
has_leaders() {
  cluster_json "$1" 2>/dev/null |
    jq -e '(.shards | length) > 0 and all(.shards[]; (.leader // "") != "")' >/dev/null 2>&1
}

any_has_leaders() {
  local i
  for i in $(seq 1 "$nodes"); do
    if has_leaders "$i"; then return 0; fi
  done
  return 1
}

start() {
  local i pid running=0
  for i in $(seq 1 "$nodes"); do
    if [ -n "$(live_pid "$i")" ]; then running=1; fi
  done
  if [ "$running" = 1 ]; then
    echo "cluster.sh: already running (scripts/cluster.sh status; stop first)" >&2
    exit 1
  fi
  if [ ! -x "$onceqd" ]; then
    if [ -n "${ONCEQD:-}" ]; then
      echo "cluster.sh: $onceqd is not an executable" >&2
      exit 1
    fi
    echo "cluster.sh: building onceqd in $build_dir" >&2
    BUILD_DIR="$build_dir" ./scripts/build.sh onceqd >/dev/null
  fi
  onceqd="$(realpath "$onceqd")"
  mkdir -p "$dir"
  : >"$dir/cluster.toml"
  if [ -n "$replicas" ]; then printf 'replicas = %s\n\n' "$replicas" >>"$dir/cluster.toml"; fi
  for i in $(seq 1 "$nodes"); do
    printf '[[node]]\nid = "%s"\nhttp = "%s"\nraft = "%s"\n\n' \
      "$(node_id "$i")" "$(node_http "$i")" "$(node_raft "$i")" >>"$dir/cluster.toml"
  done
  local shard_args=()
  if [ -n "${SHARDS:-}" ]; then shard_args=(--shards "$SHARDS"); fi
  for i in $(seq 1 "$nodes"); do
    local id
    id="$(node_id "$i")"
    mkdir -p "$dir/$id"
    # shellcheck disable=SC2086  # ONCEQD_ARGS is a list of flags
    nohup "$onceqd" --cluster "$dir/cluster.toml" --node-id "$id" --data-dir "$dir/$id" \
      "${shard_args[@]}" ${ONCEQD_ARGS:-} >>"$dir/$id.log" 2>&1 </dev/null &
    echo $! >"$dir/$id.pid"
  done

  local deadline=$((SECONDS + start_timeout))
  for i in $(seq 1 "$nodes"); do
    until cluster_json "$i" >/dev/null 2>&1; do
      if [ -z "$(live_pid "$i")" ]; then
        echo "cluster.sh: $(node_id "$i") exited; tail of $dir/$(node_id "$i").log:" >&2
        tail -n 20 "$dir/$(node_id "$i").log" >&2
        exit 1
      fi
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "cluster.sh: $(node_id "$i") does not answer /v1/cluster after ${start_timeout}s" >&2
        exit 1
      fi
      sleep 0.2
    done
  done
  until any_has_leaders; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "cluster.sh: no leader for every shard after ${start_timeout}s" >&2
      cluster_json 1 >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  echo "cluster.sh: $nodes nodes up in $dir (API on $(node_http 1) .. $(node_http "$nodes"))"
  for i in $(seq 1 "$nodes"); do
    echo "  $(node_id "$i") pid $(cat "$dir/$(node_id "$i").pid") http $(node_http "$i") raft $(node_raft "$i")"
  done
}

stop() {
  local i pid pids=()
  for i in $(seq 1 "$nodes"); do
    pid="$(live_pid "$i")"
    if [ -n "$pid" ]; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  local deadline=$((SECONDS + stop_grace))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "cluster.sh: pid $pid still up after ${stop_grace}s: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.1
    done
  done
  for i in $(seq 1 "$nodes"); do rm -f "$dir/$(node_id "$i").pid"; done
  echo "cluster.sh: stopped ${#pids[@]} node(s)"
}

status() {
  local i pid answered=0
  for i in $(seq 1 "$nodes"); do
    pid="$(live_pid "$i")"
    if [ -n "$pid" ]; then
      echo "$(node_id "$i") pid $pid alive http $(node_http "$i")"
    else
      echo "$(node_id "$i") down http $(node_http "$i")"
    fi
  done
  local cli=""
  for c in "$build_dir/cmd/cli/onceq" "$build_dir/cmd/onceq"; do
    if [ -x "$c" ]; then cli="$c"; break; fi
  done
  for i in $(seq 1 "$nodes"); do
    [ -n "$(live_pid "$i")" ] || continue
    if [ -n "$cli" ] && "$cli" --url "http://$(node_http "$i")" cluster status 2>/dev/null; then
      answered=1
    elif cluster_json "$i" | jq . 2>/dev/null; then
      answered=1
    fi
    [ "$answered" = 1 ] && break
  done
  if [ "$answered" = 0 ]; then
    echo "no node answered GET /v1/cluster"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  clean)
    stop
    rm -rf "$dir"
    echo "cluster.sh: removed $dir"
    ;;
  *) usage ;;
esac
