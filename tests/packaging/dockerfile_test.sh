#!/usr/bin/env bash
# The Dockerfile cannot be built here; check instead that it builds the way
# the scripts do: packages only through scripts/deps.sh, the build through
# scripts/build.sh, the same ONCEQ_ROCKSDB default as scripts/deps.sh, and a
# runtime stage that installs only the .deb (whose Depends list comes from
# dpkg-shlibdeps), running as a non-root user with a data volume.
set -euo pipefail
src="${1:?usage: dockerfile_test.sh SOURCE_DIR}"
df="$src/Dockerfile"
fail=0
check() {  # check DESCRIPTION COMMAND...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

check "the build stage runs scripts/deps.sh" grep -Eq '^RUN .*bash scripts/deps.sh' "$df"
check "the build stage runs scripts/build.sh" grep -Eq 'bash scripts/build.sh' "$df"
check "the Dockerfile copies the scripts deps.sh needs" \
  grep -Eq '^COPY scripts/deps.sh scripts/rocksdb-release.sh scripts/' "$df"

deps_default=$(sed -nE 's/.*\$\{ONCEQ_ROCKSDB:-([a-z]+)\}.*/\1/p' "$src/scripts/deps.sh" | head -1)
docker_default=$(sed -nE 's/^ARG ONCEQ_ROCKSDB=([a-z]+)$/\1/p' "$df")
check "ONCEQ_ROCKSDB defaults to '$deps_default' in both (Dockerfile: '$docker_default')" \
  test -n "$deps_default" -a "$deps_default" = "$docker_default"
check "deps.sh and build.sh see ONCEQ_ROCKSDB" \
  test "$(grep -c 'ONCEQ_ROCKSDB=\$ONCEQ_ROCKSDB' "$df")" -ge 2

# Every apt-get install in the Dockerfile installs the .deb and nothing
# else: any other package belongs in scripts/deps.sh.
installs=$(grep -oE 'apt-get install [^&\\]*' "$df" || true)
bad=$(echo "$installs" | tr ' ' '\n' | grep -vE '^(apt-get|install|-y|--no-install-recommends|/tmp/onceq\.deb|)$' || true)
check "apt-get install in the Dockerfile installs only the .deb (extra: ${bad:-none})" test -z "$bad"

# Every package deps.sh lists is a real line of its list (sanity: the list parses).
pkgs=$(sed -n '/^packages=(/,/^)/p' "$src/scripts/deps.sh" | sed '1d;$d' | tr -s ' \n' '\n' | sed '/^$/d')
for p in libtomlplusplus-dev libcli11-dev dpkg-dev libsimdjson-dev; do
  check "scripts/deps.sh installs $p" grep -qx "$p" <<<"$pkgs"
done

check "runs as a non-root user" grep -Eq '^USER onceq$' "$df"
check "has a data volume" grep -Eq '^VOLUME /var/lib/onceq$' "$df"
check "the entrypoint uses the volume" grep -Eq '"--data-dir", "/var/lib/onceq"' "$df"
exit "$fail"
