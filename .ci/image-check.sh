#!/usr/bin/env bash
# CI: the container image, built the way a user builds it from a checkout that already
# has a build/ folder and a database (the README's first command ran there), then run
# with a data volume: acquire, `stop` the container (SIGTERM: it must exit 0), start a
# new one on the same volume; the held lease still renews and the next token is larger.
# Then its default start: it needs keys (401 without one), made one admin key at its
# first start (0600, only its path logged), which `exec ... leasegate acquire` uses.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/tools.sh
tools=$(find_shared_tools) || { echo "image-check: shared tools not found (set LEASEGATE_SHARED_TOOLS)" >&2; exit 1; }
tag=leasegate:ci
pm() { "$tools/container.sh" podman "$@"; }

# What a user's checkout has after the README's first command: a foreign CMake cache and
# a database. The image must build anyway and must contain neither.
mkdir -p build
[ -f build/CMakeCache.txt ] || echo "# host cache" > build/CMakeCache.txt
planted=0
[ -e leasegate.db ] || { echo "host database" > leasegate.db; planted=1; }
# docker format keeps the HEALTHCHECK (podman's default OCI format drops it).
BUILDAH_FORMAT=docker "$tools/container.sh" build "$tag"
[ $planted = 1 ] && rm -f leasegate.db

data=$(mktemp -d /tmp/lg-image-data.XXXXXX)
chown 7400:7400 "$data"
secure=$(mktemp -d /tmp/lg-image-secure.XXXXXX)
chown 7400:7400 "$secure"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
names=()
cleanup() {
  for n in "${names[@]}"; do pm rm -f -t 0 "$n" >/dev/null 2>&1 || true; done
  rm -rf "$data" "$secure"
}
trap cleanup EXIT

start() {
  local name=lg-ci-$$-$1
  shift
  names+=("$name")
  # --health-interval disable: no systemd timers here; the check is run by hand below.
  pm run -d --name "$name" --network host --health-interval disable "$@" -v "$data:/data" -e "LEASEGATE_SERVER=$url" \
    "$tag" leasegate serve --listen "127.0.0.1:$port" --data /data/leasegate.db >/dev/null
  for _ in $(seq 1 100); do
    curl -sf "$url/healthz" >/dev/null && { echo "$name"; return 0; }
    sleep 0.1
  done
  pm logs "$name" >&2
  echo "image-check: container $name never answered /healthz" >&2
  return 1
}
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

[ "$(pm run --rm "$tag" id -u)" = 7400 ] || { echo "image-check: the server does not run as uid 7400" >&2; exit 1; }
[ "$(pm run --rm "$tag" sh -c 'command -v leasegate')" = /usr/local/bin/leasegate ]
if pm run --rm "$tag" sh -c 'command -v cc || command -v cmake || test -e /src' >/dev/null 2>&1; then
  echo "image-check: the final image holds build tools or sources" >&2; exit 1
fi

one=$(start one)
# The image's own HEALTHCHECK, run by podman (LEASEGATE_SERVER points it at this port).
pm image inspect --format '{{json .Config.Healthcheck}}' "$tag" | grep -q '"leasegate","healthcheck"' ||
  { echo "image-check: the image has no HEALTHCHECK running leasegate healthcheck" >&2; exit 1; }
pm healthcheck run "$one" || { echo "image-check: the container's health check failed" >&2; exit 1; }
grant=$(curl -sf "$url/v1/locks/image/held/acquire" --json '{"owner":"ci","ttl_ms":300000}')
lease=$(echo "$grant" | field lease)
token=$(echo "$grant" | field token)
[ -n "$lease" ] && [ -n "$token" ] || { echo "image-check: acquire failed: $grant" >&2; exit 1; }
pm stop -t 20 "$one" >/dev/null
status=$(pm wait "$one")
[ "$status" = 0 ] || { pm logs "$one" >&2; echo "image-check: the server exited $status on stop (SIGTERM)" >&2; exit 1; }

# The second one with the check given at run time, as docs/operations.md tells podman users
# whose image format (OCI) dropped the HEALTHCHECK.
two=$(start two --health-cmd 'leasegate healthcheck' --health-timeout 6s --health-retries 3)
pm healthcheck run "$two" || { echo "image-check: --health-cmd 'leasegate healthcheck' failed" >&2; exit 1; }
renew=$(curl -s -o /dev/stderr -w '%{http_code}' "$url/v1/locks/image/held/renew" --json "{\"lease\":\"$lease\"}" 2>/dev/null)
[ "$renew" = 200 ] || { echo "image-check: the held lease did not survive the restart (HTTP $renew)" >&2; exit 1; }
next=$(curl -sf "$url/v1/locks/image/other/acquire" --json '{"owner":"ci"}' | field token)
[ "$next" -gt "$token" ] || { echo "image-check: token $next after a restart is not above $token" >&2; exit 1; }
pm stop -t 20 "$two" >/dev/null
[ "$(pm wait "$two")" = 0 ]
# The default start: keys on the data volume, made at the first start.
sname=lg-ci-$$-secure
names+=("$sname")
sport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
surl=http://127.0.0.1:$sport
pm run -d --name "$sname" --network host --health-interval disable -v "$secure:/data" -e "LEASEGATE_SERVER=$surl" \
  "$tag" --listen "127.0.0.1:$sport" >/dev/null
for _ in $(seq 1 100); do curl -sf "$surl/healthz" >/dev/null && break; sleep 0.1; done
code=$(curl -s -o /dev/null -w '%{http_code}' "$surl/v1/locks/image/secure/acquire" --json '{"owner":"ci"}')
[ "$code" = 401 ] || { pm logs "$sname" >&2; echo "image-check: the default start served without a key ($code)" >&2; exit 1; }
[ "$(stat -c '%a %u' "$secure/admin.key")" = "600 7400" ] ||
  { echo "image-check: /data/admin.key is $(stat -c '%a %u' "$secure/admin.key"), not 600 7400" >&2; exit 1; }
[ "$(stat -c '%a' "$secure/keys")" = 600 ] || { echo "image-check: /data/keys is not 0600" >&2; exit 1; }
key=$(cat "$secure/admin.key")
logs=$(pm logs "$sname" 2>&1)
echo "$logs" | grep -q '/data/admin.key' || { echo "image-check: the log does not say where the key is" >&2; exit 1; }
if echo "$logs" | grep -qF "$key"; then echo "image-check: the log shows the admin key" >&2; exit 1; fi
out=$(pm exec "$sname" leasegate acquire --lock image/secure --owner ci) ||
  { echo "image-check: docker exec ... leasegate acquire failed with the image's key" >&2; exit 1; }
echo "$out" | grep -q '"token"' || { echo "image-check: acquire answered $out" >&2; exit 1; }
pm stop -t 20 "$sname" >/dev/null
[ "$(pm wait "$sname")" = 0 ]
[ "$(cat "$secure/admin.key")" = "$key" ] || { echo "image-check: the admin key changed" >&2; exit 1; }
size=$(pm image inspect --format '{{.Size}}' "$tag")
echo "image-check: ok (lease renewed after restart, token $token -> $next, clean stops; keys needed by default,"\
     "admin key made at the first start; image $((size / 1000000)) MB)"
