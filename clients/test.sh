#!/usr/bin/env bash
# Runs the client suites against a real onceqd: clients/python (unittest),
# clients/typescript (npm ci, tsc, node --test), then clients/go (go vet,
# go test; standard library only, so offline: GOPROXY=off). Each test starts
# its own servers on ephemeral ports with fresh temp data dirs.
#
# usage: clients/test.sh [ONCEQD_BINARY]     (default: build/cmd/onceqd)
# Exits non-zero if any test failed. Needs what clients/deps.sh installs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/cmd/onceqd}
if [ ! -x "$bin" ]; then
  echo "clients/test.sh: no onceqd binary at '$bin'" >&2
  exit 2
fi
export ONCEQD=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
log=$(mktemp -d -t onceq-clients-XXXXXX)
trap 'rm -rf "$log"' EXIT
passed=0 failed=0 skipped=0 status=0
t0=$SECONDS

echo "== clients/python: python3 -m unittest (onceqd: $ONCEQD)"
(cd "$here/python" && timeout 600 python3 tests/run.py) 2>&1 | tee "$log/python"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if line=$(grep -E '^python: [0-9]+ passed, [0-9]+ failed' "$log/python" | tail -1); then
  read -r p f s <<<"$(sed -E 's/^python: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped.*/\1 \2 \3/' <<<"$line")"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
else
  failed=$((failed + 1))
fi
echo "== clients/python: $((SECONDS - t0)) s"

t1=$SECONDS
echo "== clients/typescript: npm ci, tsc, node --test"
(
  cd "$here/typescript" &&
    npm ci --no-audit --no-fund --loglevel=error &&
    npx tsc -p tsconfig.json &&
    timeout 600 node --test --test-concurrency=1 --test-reporter=spec dist/test/*.test.js
) 2>&1 | tee "$log/typescript"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
p=$(grep -E '^ℹ pass [0-9]+' "$log/typescript" | tail -1 | grep -oE '[0-9]+' || echo 0)
f=$(grep -E '^ℹ fail [0-9]+' "$log/typescript" | tail -1 | grep -oE '[0-9]+' || echo 1)
s=$(grep -E '^ℹ skipped [0-9]+' "$log/typescript" | tail -1 | grep -oE '[0-9]+' || echo 0)
passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
echo "== clients/typescript: $((SECONDS - t1)) s"

t2=$SECONDS
echo "== clients/go: go vet, go test"
# GOCACHE: go's default lives under $HOME, which CI (root, or no HOME) may
# not have or may not let it write; fall back to a private one.
gocache=$(go env GOCACHE 2>/dev/null || true)
if [ -z "$gocache" ] || [ "$gocache" = off ] || ! mkdir -p "$gocache" 2>/dev/null || [ ! -w "$gocache" ]; then
  export GOCACHE=${TMPDIR:-/tmp}/onceq-go-cache-$(id -u)
fi
(
  cd "$here/go" &&
    export GOPROXY=off GOFLAGS= GO111MODULE=on &&
    go vet ./... &&
    timeout 600 go test -count=1 -timeout 9m -v ./...
) 2>&1 | tee "$log/go"
gostatus=${PIPESTATUS[0]}
p=$(grep -cE '^--- PASS' "$log/go" || true)
f=$(grep -cE '^--- FAIL' "$log/go" || true)
s=$(grep -cE '^--- SKIP' "$log/go" || true)
if [ "$gostatus" -ne 0 ]; then
  status=1
  [ "$f" -gt 0 ] || f=1 # go vet, the build or a panic failed outside a test
fi
passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
echo "== clients/go: $((SECONDS - t2)) s"

[ "$failed" -eq 0 ] || status=1
echo "== clients: $((SECONDS - t0)) s"
echo "clients: $passed passed, $failed failed, $skipped skipped"
exit $status
