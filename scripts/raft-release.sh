#!/usr/bin/env bash
# Builds onceq's raft: Debian 12's own raft 0.15.0-1 (libraft-dev, amd64)
# with upstream's commit rule backported (third_party/raft/: an entry of an
# earlier term is never committed by counting replicas; canonical/raft#220,
# fixed upstream in 0.17 by PR #336), installed as a static library to
# /opt/onceq-raft (include/, lib/libraft.a, lib/pkgconfig/raft.pc).
# cluster/CMakeLists.txt requires it (configure fails without it, unless
# -DONCEQ_CLUSTER=OFF), and onceqd --cluster checks that the raft it linked
# carries the rule's stamp. See third_party/raft/README.md.
#
# How: Debian's archive does not serve raft's source tarball to these
# machines (`apt-get source raft` gets the .dsc, then 404), so the fix is
# linked into Debian's compiled libraft.a instead of compiled from a patched
# source: in its replication.o, raft's internal replicationQuorum() becomes
# weak and gets a second name, onceq_raft015_replication_quorum, and
# third_party/raft/commit_rule.c (the current-term check, then the original)
# is linked into that same object under the name replicationQuorum, so
# raft's two call sites reach the check first. Everything else is Debian's
# build, byte for byte. The recipe is for that one build: the script checks
# the sha256 of Debian's libraft.a and refuses any other.
#
# Idempotent: does nothing when $RAFT_PREFIX/onceq-build-id matches (the
# sha256 of commit_rule.c, Debian's libraft.a and this recipe's version).
# Seconds, not minutes. Environment: RAFT_PREFIX (default /opt/onceq-raft),
# RAFT_WORK (scratch dir, default /tmp/onceq-raft-build).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../third_party/raft/commit_rule.c"
prefix="${RAFT_PREFIX:-/opt/onceq-raft}"
work="${RAFT_WORK:-/tmp/onceq-raft-build}"

# Debian 12's libraft-dev 0.15.0-1, amd64: the build this recipe was checked
# against (symbols, relocations, and the Figure 8 test).
debian_version="0.15.0-1"
debian_sha256="d94449a2497f066fca1856c3c92e07bbf12c1621ffd9f72cfff8e0b6be0736b3"
# Bump when the steps below change, so that existing installs rebuild.
recipe="link-commit-rule-2"

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

packages=(libraft-dev libuv1-dev liblz4-dev gcc binutils)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "raft-release: installing ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

version="$(dpkg-query -W -f='${Version}' libraft-dev)"
if [ "$version" != "$debian_version" ]; then
  echo "raft-release: libraft-dev is $version, this recipe is for $debian_version" >&2
  exit 1
fi
debian_lib="/usr/lib/$(gcc -print-multiarch)/libraft.a"
if [ "$(sha256sum "$debian_lib" | cut -d' ' -f1)" != "$debian_sha256" ]; then
  echo "raft-release: $debian_lib is not the build this recipe was checked against" \
       "(Debian's $debian_version amd64, sha256 $debian_sha256)" >&2
  exit 1
fi

build_id="$recipe $( (cat "$src"; echo "$debian_sha256") | sha256sum | cut -d' ' -f1)"
stamp="$prefix/onceq-build-id"
if [ -f "$prefix/lib/libraft.a" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$build_id" ]; then
  echo "raft-release: $prefix/lib/libraft.a ($build_id) already exists, nothing to do"
  exit 0
fi

rm -rf "$work"
mkdir -p "$work/objects"
cd "$work/objects"
ar x "$debian_lib"
members=()
while IFS= read -r m; do members+=("$m"); done < <(ar t "$debian_lib")

# replicationQuorum: a global function in .text of replication.o, called
# from two places there through relocations against its symbol.
obj=libraft_la-replication.o
read -r value type bind section < <(readelf -sW "$obj" |
  awk '$8 == "replicationQuorum" { print $2, $4, $5, $7 }')
text_index="$(readelf -SW "$obj" | sed -n 's/^ *\[ *\([0-9]*\)\] \.text .*/\1/p')"
if [ "$type $bind $section" != "FUNC GLOBAL $text_index" ]; then
  echo "raft-release: replicationQuorum is not a global function in .text of $obj" >&2
  exit 1
fi
calls="$(readelf -rW "$obj" | grep -c ' replicationQuorum - 4$' || true)"
if [ "$calls" -ne 2 ]; then
  echo "raft-release: expected 2 calls to replicationQuorum in $obj, found $calls" >&2
  exit 1
fi

objcopy --add-symbol "onceq_raft015_replication_quorum=.text:0x$value,global,function" \
  --weaken-symbol=replicationQuorum "$obj" "$work/replication-weak.o"
gcc -O2 -fPIC -fvisibility=hidden -Wall -Wextra -Werror -c "$src" -o "$work/commit_rule.o"
ld -r -o "$obj" "$work/replication-weak.o" "$work/commit_rule.o"

# Check the result: one strong replicationQuorum (ours), the original under
# its new name, and both call sites bound to ours.
ours="$(nm "$obj" | awk '$2 == "T" && $3 == "replicationQuorum" { print $1 }')"
orig="$(nm "$obj" | awk '$2 == "T" && $3 == "onceq_raft015_replication_quorum" { print $1 }')"
if [ -z "$ours" ] || [ "$orig" != "$value" ] || [ "$ours" = "$value" ]; then
  echo "raft-release: linking the commit rule into $obj failed" >&2
  exit 1
fi
if [ "$(readelf -rW "$obj" | grep -c " $ours replicationQuorum - 4$")" -ne "$calls" ]; then
  echo "raft-release: raft's calls to replicationQuorum do not reach the commit rule" >&2
  exit 1
fi
# The stamp onceqd checks for (cluster/raft_check.hpp) is in the same object.
if ! nm "$obj" | awk '$2 == "R" && $3 == "onceq_raft_commit_rule_stamp" { found = 1 } END { exit !found }'; then
  echo "raft-release: onceq_raft_commit_rule_stamp is not in $obj" >&2
  exit 1
fi

# The archive, members in Debian's order.
ar rcs "$work/libraft.a" "${members[@]}"

# It links (and nothing else defines replicationQuorum twice), and a
# program that uses raft gets the stamp with it.
cat > "$work/smoke.c" <<'EOF'
#include <raft.h>
#include <raft/fixture.h>
extern const char onceq_raft_commit_rule_stamp[] __attribute__((weak));
int main(void)
{
    struct raft_fixture f;
    if (onceq_raft_commit_rule_stamp == 0) return 2;
    if (raft_fixture_initialize(&f) != 0) return 1;
    raft_fixture_close(&f);
    return 0;
}
EOF
gcc -o "$work/smoke" "$work/smoke.c" "$work/libraft.a" -luv -llz4
"$work/smoke"

"${sudo[@]}" rm -rf "$prefix"
"${sudo[@]}" install -d "$prefix/include/raft" "$prefix/lib/pkgconfig"
"${sudo[@]}" install -m 644 /usr/include/raft.h "$prefix/include/"
"${sudo[@]}" install -m 644 /usr/include/raft/uv.h /usr/include/raft/fixture.h "$prefix/include/raft/"
"${sudo[@]}" install -m 644 "$work/libraft.a" "$prefix/lib/"
# shellcheck disable=SC2016  # ${...} are pkg-config's variables
printf '%s\n' \
  "prefix=$prefix" \
  'includedir=${prefix}/include' \
  'libdir=${prefix}/lib' \
  '' \
  'Name: raft' \
  "Description: Debian's raft $debian_version with upstream's commit rule (canonical/raft#336), static" \
  "Version: ${debian_version%-*}" \
  'Requires: libuv' \
  'Libs: ${libdir}/libraft.a -llz4' \
  'Cflags: -I${includedir}' \
  | "${sudo[@]}" tee "$prefix/lib/pkgconfig/raft.pc" >/dev/null
echo "$build_id" | "${sudo[@]}" tee "$stamp" >/dev/null

echo "raft-release: installed $prefix/lib/libraft.a (raft $debian_version + current-term commit rule)"
echo "raft-release: link it with: -luv -llz4"
