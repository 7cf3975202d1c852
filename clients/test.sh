#!/usr/bin/env bash
# Runs the client suites against a real onceqd: clients/python (unittest),
# then clients/typescript (npm ci, tsc, node --test). Each test starts its
# own servers on ephemeral ports with fresh temp data dirs.
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

[ "$failed" -eq 0 ] || status=1
echo "== clients: $((SECONDS - t0)) s"
echo "clients: $passed passed, $failed failed, $skipped skipped"
exit $status
