#!/usr/bin/env bash
# The .deb of cpack installs and starts: build it from BUILD_DIR, check its
# control fields, install it with `dpkg -i` into a private root (dpkg
# --root: its own file tree and package database, the database seeded
# with this machine's, so dpkg checks Depends against what is really
# installed here and the system itself is not touched), check dpkg lists
# it as installed with its files, run the unit's ExecStart command line
# with the installed binary, a temp data dir and an ephemeral port, check
# GET /v1/healthz answers 200, then `dpkg -r` it and check its files are
# gone.
# Exits 77 (skip) without cpack, dpkg-deb, dpkg-shlibdeps or curl.
set -euo pipefail
build="${1:?usage: deb_test.sh BUILD_DIR}"
for tool in cpack dpkg dpkg-deb dpkg-query dpkg-shlibdeps curl timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (scripts/deps.sh installs it)"
    exit 77
  fi
done

tmp=$(mktemp -d /tmp/onceq-deb-test.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Pack from the build tree, into our temp dir only.
timeout 240 cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pack" >"$tmp/cpack.log" 2>&1 \
  || { cat "$tmp/cpack.log"; echo "FAIL: cpack"; exit 1; }
deb=$(ls "$tmp"/pack/onceq_*.deb)
echo "built $(basename "$deb")"

dpkg-deb -f "$deb" Package Version Architecture Depends
[ "$(dpkg-deb -f "$deb" Package)" = onceq ] || { echo "FAIL: Package is not onceq"; exit 1; }
depends=$(dpkg-deb -f "$deb" Depends)
[ -n "$depends" ] || { echo "FAIL: no Depends (dpkg-shlibdeps did not run?)"; exit 1; }
# "libc6 (>= 2.34), libfmt9 (>= 9.1.0+ds1), ..." -> names; alternatives take the first.
for p in $(echo "$depends" | tr ',' '\n' | sed -E 's/\|.*//; s/\(.*\)//; s/ //g'); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || { echo "FAIL: Depends on $p, which is not installed"; exit 1; }
done

# dpkg -i into $root. --force-not-root: dpkg does not need root to write
# under $root; the package has no maintainer scripts to chroot into it.
root="$tmp/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
cp /var/lib/dpkg/status "$root/var/lib/dpkg/status"
: >"$root/var/lib/dpkg/available"
rootdpkg() { dpkg --root="$root" --force-not-root --log=/dev/null "$@"; }
rootdpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; echo "FAIL: dpkg -i"; exit 1; }
rootdpkg -s onceq | grep -qx "Status: install ok installed" \
  || { rootdpkg -s onceq; echo "FAIL: dpkg does not list onceq as installed"; exit 1; }
rootdpkg -L onceq | grep -qx /usr/bin/onceqd || { echo "FAIL: dpkg -L lacks /usr/bin/onceqd"; exit 1; }
echo "dpkg -i: $(rootdpkg -s onceq | sed -n 's/^Version: //p') installed into a private root"
for f in usr/bin/onceqd usr/bin/onceq lib/systemd/system/onceqd.service \
         usr/share/doc/onceq/OPERATIONS.md usr/share/doc/onceq/examples/onceqd.toml; do
  [ -e "$root/usr/$f" ] || [ -e "$root/$f" ] || { echo "FAIL: the .deb lacks $f"; exit 1; }
done
unit="$root/usr/lib/systemd/system/onceqd.service"
[ -e "$unit" ] || unit="$root/lib/systemd/system/onceqd.service"
for line in "StateDirectory=onceq" "Restart=on-failure" "LimitNOFILE=65536" "User=onceq"; do
  grep -qx "$line" "$unit" || { echo "FAIL: the unit lacks $line"; exit 1; }
done

# The unit's command line, with the installed binary, our data dir and port 0.
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
echo "ExecStart: $exec_start"
read -r -a argv <<<"$exec_start"
[ "${argv[0]}" = /usr/bin/onceqd ] || { echo "FAIL: ExecStart runs ${argv[0]}"; exit 1; }
argv[0]="$root/usr/bin/onceqd"
for i in "${!argv[@]}"; do
  case "${argv[$i]}" in
    --listen) argv[$((i + 1))]=127.0.0.1:0 ;;
    --data-dir) argv[$((i + 1))]="$tmp/data" ;;
  esac
done
"$root/usr/bin/onceqd" --version
# Created first: the background job opens them itself, maybe after the
# first sed below has looked.
: >"$tmp/stdout"
: >"$tmp/stderr"
"${argv[@]}" >"$tmp/stdout" 2>"$tmp/stderr" &
pid=$!
port=""
for _ in $(seq 1 200); do
  port=$(sed -nE 's/^onceqd listening on 127\.0\.0\.1:([0-9]+)$/\1/p' "$tmp/stdout")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
[ -n "$port" ] || { cat "$tmp/stderr"; echo "FAIL: onceqd did not start"; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/v1/healthz")
[ "$code" = 200 ] || { cat "$tmp/stderr"; echo "FAIL: /v1/healthz answered $code"; exit 1; }
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" = 0 ] || { cat "$tmp/stderr"; echo "FAIL: exit $status after SIGTERM"; exit 1; }

rootdpkg -r onceq >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; echo "FAIL: dpkg -r"; exit 1; }
[ ! -e "$root/usr/bin/onceqd" ] || { echo "FAIL: dpkg -r left /usr/bin/onceqd"; exit 1; }
echo "ok: dpkg -i installed the .deb, its onceqd answered /v1/healthz 200 on port $port and" \
  "stopped cleanly, and dpkg -r removed it"
