#!/usr/bin/env bash
# The Dockerfile builds the way the scripts do: packages only through
# scripts/deps.sh, with every file deps.sh runs copied in before it (the
# RocksDB build, and raft-release.sh with third_party/raft, the raft a
# cluster runs on), the build through scripts/build.sh, the same
# ONCEQ_ROCKSDB default as scripts/deps.sh, and a runtime stage that
# installs only the .deb (whose Depends list comes from dpkg-shlibdeps),
# running as a non-root user with a data volume.
#
# Then the image itself, where docker can run one: its onceqd must have
# raft's commit rule linked. It runs `onceqd --cluster` in the image, which
# checks the linked raft before anything else (cluster/raft_check.hpp) and
# logs the rule's stamp, and looks for the stamp's text in the binary.
# ONCEQ_DOCKER_IMAGE=name checks an image built beforehand;
# ONCEQ_DOCKER_BUILD=1 builds one (ONCEQ_ROCKSDB=debian, minutes). Without
# either, or without a docker daemon, the image part is skipped and says so;
# the checks of the Dockerfile's text still run.
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
# What deps.sh runs must be in the image before the RUN of deps.sh: the
# sources of the COPY lines above it, against the scripts deps.sh calls
# ($(dirname "$0")/NAME.sh) and the files those read from third_party/.
deps_line=$(grep -nE '^RUN .*bash scripts/deps.sh' "$df" | head -1 | cut -d: -f1)
copied=$(head -n "$((${deps_line:-1} - 1))" "$df" |
  awk '$1 == "COPY" && $2 !~ /^--/ { for (i = 2; i < NF; i++) print $i }')
copied_before() {  # copied_before PATH: a COPY source above deps.sh is PATH or a folder of it
  local p
  while IFS= read -r p; do
    p="${p%/}"
    [ -n "$p" ] || continue
    if [ "$1" = "$p" ] || [ "${1#"$p"/}" != "$1" ] || [ "$p" = . ]; then return 0; fi
  done <<<"$copied"
  return 1
}
needed=(scripts/deps.sh)
for name in $(grep -oE '\$\(dirname "\$0"\)/[a-z0-9_-]+\.sh' "$src/scripts/deps.sh" | sed 's|.*/||' | sort -u); do
  needed+=("scripts/$name")
  for f in $(grep -oE '\.\./third_party/[A-Za-z0-9_./-]*[A-Za-z0-9_]' "$src/scripts/$name" |
               sed 's|^\.\./||' | sort -u); do
    needed+=("$f")
  done
done
check "deps.sh runs raft-release.sh (the raft a cluster needs)" \
  grep -qx scripts/raft-release.sh < <(printf '%s\n' "${needed[@]}")
for f in "${needed[@]}"; do
  check "$f is copied in before deps.sh runs" copied_before "$f"
done

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

# The image: its onceqd has the commit rule linked.
image="${ONCEQ_DOCKER_IMAGE:-}"
if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
  echo "SKIP (image): no docker daemon here; the Dockerfile's text was checked, not its image"
  exit "$fail"
fi
if [ -z "$image" ] && [ "${ONCEQ_DOCKER_BUILD:-0}" = 1 ]; then
  image="onceq-dockerfile-test:$$"
  docker build --build-arg ONCEQ_ROCKSDB=debian -t "$image" "$src" ||
    { echo "FAIL: docker build"; exit 1; }
  trap 'docker rmi -f "$image" >/dev/null 2>&1 || true' EXIT
fi
if [ -z "$image" ]; then
  echo "SKIP (image): set ONCEQ_DOCKER_IMAGE=name (an image built from this Dockerfile) or" \
       "ONCEQ_DOCKER_BUILD=1 to check the image's onceqd"
  exit "$fail"
fi
out=$(docker run --rm --entrypoint /usr/bin/onceqd "$image" --listen 127.0.0.1:0 \
  --data-dir /tmp/onceq-check --cluster /tmp/missing-cluster.toml --node-id n1 2>&1 || true)
echo "$out"
check "the image's onceqd --cluster passes its raft check (the rule's stamp and probe)" \
  grep -q 'raft commit rule checked.*onceq-raft-commit-rule' <<<"$out"
check "the image's onceqd does not refuse its raft" \
  test -z "$(grep 'refusing to start' <<<"$out")"
check "the image's /usr/bin/onceqd holds the commit rule's stamp" \
  test "$(docker run --rm --entrypoint /bin/sh "$image" -c \
    'grep -c onceq-raft-commit-rule /usr/bin/onceqd' 2>/dev/null || echo 0)" != 0
exit "$fail"
