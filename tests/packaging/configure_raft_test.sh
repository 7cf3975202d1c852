#!/usr/bin/env bash
# A build that has cluster/ but not the fixed raft fails at configure time,
# naming the command that builds it (cluster/CMakeLists.txt): once with no
# raft at the prefix, once with Debian's own libraft.a there (it lacks the
# commit rule's stamp). A third configure with -DONCEQ_CLUSTER=OFF and the
# same missing prefix succeeds: building without clustering is explicit.
#   configure_raft_test.sh SOURCE_DIR
set -euo pipefail
src="${1:?usage: configure_raft_test.sh SOURCE_DIR}"
tmp=$(mktemp -d /tmp/onceq-configure-raft.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

configure() {  # build-dir extra-args...
  local dir=$1
  shift
  cmake -S "$src" -B "$tmp/$dir" -G Ninja -DONCEQ_BUILD_TESTS=OFF -DONCEQ_BUILD_BENCH=OFF \
    -DROCKSDB_INCLUDE_DIR=/usr/include \
    -DROCKSDB_LIBRARY="/usr/lib/$(gcc -print-multiarch)/librocksdb.so" "$@" >"$tmp/$dir.log" 2>&1
}

expect_refusal() {  # build-dir what
  if configure "$1" "-DONCEQ_RAFT_PREFIX=$tmp/$1-prefix"; then
    cat "$tmp/$1.log"
    fail "configure succeeded with $2"
  fi
  grep -q 'scripts/raft-release.sh' "$tmp/$1.log" || {
    cat "$tmp/$1.log"
    fail "the refusal with $2 does not name scripts/raft-release.sh"
  }
  echo "ok: refused with $2"
}

mkdir -p "$tmp/missing-prefix"
expect_refusal missing "no raft at the prefix"

debian_lib="/usr/lib/$(gcc -print-multiarch)/libraft.a"
if [ -f "$debian_lib" ] && [ -f /usr/include/raft.h ]; then
  mkdir -p "$tmp/debian-prefix/lib" "$tmp/debian-prefix/include"
  cp "$debian_lib" "$tmp/debian-prefix/lib/"
  cp -r /usr/include/raft.h /usr/include/raft "$tmp/debian-prefix/include/"
  expect_refusal debian "Debian's unpatched libraft.a"
else
  echo "skip: Debian's libraft.a is not installed (libraft-dev)"
fi

configure off -DONCEQ_CLUSTER=OFF "-DONCEQ_RAFT_PREFIX=$tmp/missing-prefix" || {
  cat "$tmp/off.log"
  fail "configure with -DONCEQ_CLUSTER=OFF failed"
}
echo "ok: -DONCEQ_CLUSTER=OFF configures without raft"
