#!/usr/bin/env bash
# onceqd --cluster checks the raft it linked before it opens anything
# (cluster/raft_check.hpp, cmd/onceqd.cpp). MODE built-in: the check passes
# and onceqd logs the commit rule's stamp, then fails on the cluster file
# this test does not provide (exit 2, a usage error). MODE off (a build with
# -DONCEQ_CLUSTER=OFF): onceqd refuses --cluster as not built in (exit 1).
set -euo pipefail
onceqd="${1:?usage: onceqd_raft_check.sh ONCEQD built-in|off}"
mode="${2:?usage: onceqd_raft_check.sh ONCEQD built-in|off}"
tmp=$(mktemp -d /tmp/onceq-raft-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

rc=0
timeout 60 "$onceqd" --listen 127.0.0.1:0 --data-dir "$tmp/data" \
  --cluster "$tmp/missing-cluster.toml" --node-id n1 >"$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
fail() { echo "FAIL: $*"; exit 1; }
case "$mode" in
  built-in)
    grep -q 'raft commit rule checked.*onceq-raft-commit-rule' "$tmp/out" \
      || fail "onceqd did not log the raft commit rule's stamp"
    if grep -q 'refusing to start' "$tmp/out"; then fail "onceqd refused its own raft"; fi
    grep -q 'missing-cluster.toml' "$tmp/out" || fail "onceqd did not go on to the cluster file"
    [ "$rc" -ne 0 ] || fail "onceqd started without a cluster file"
    ;;
  off)
    grep -q 'refusing to start: clustering is not built into this onceqd' "$tmp/out" \
      || fail "onceqd did not say that clustering is not built in"
    [ "$rc" -eq 1 ] || fail "exit status $rc, expected 1"
    ;;
  *) fail "unknown mode $mode" ;;
esac
echo "ok: onceqd --cluster ($mode)"
