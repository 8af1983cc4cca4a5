#!/usr/bin/env bash
# CI: the .deb that `cpack -G DEB` builds, installed on a brand-new minimal Debian 12 root
# (../shared/tools/fresh-debian.sh: a chroot, no systemd as PID 1). Inside the root:
#   1. build the package as a user would (scripts/deps.sh, cmake, cpack -G DEB);
#   2. purge the build tools and everything they pulled in, so that no runtime library is
#      left (checked) and the package's Depends must bring them back;
#   3. install systemd and man-db (systemd-analyze, systemd-sysusers and man, as on a real
#      machine), then the .deb with apt-get: user leasegate, keys.txt root:leasegate 0640;
#   4. systemd-analyze verify leasegate.service (which also runs `man leasegate(1)`, the
#      unit's Documentation=: the installed man page must be found);
#   5. run the unit's ExecStart as its user, with its Environment= and EnvironmentFile=,
#      until /healthz answers; add a key, reload the way ExecReload does (SIGHUP), take a
#      lock with it; stop with SIGTERM and expect exit status 0 and the one line an orderly
#      stop logs;
#   6. an upgrade while the service runs: with a stand-in for systemctl that does what systemd
#      would (the root has no systemd as PID 1), a newer .deb (the same files, a higher
#      version) is installed: its scripts must not stop the service for good but try-restart
#      it (Debian's restart-after-upgrade), so the server answers again, as a new process,
#      after the old one stopped in order; removing the package stops it.
# Every wait is bounded; the whole check too (DEB_CHECK_TIMEOUT, default 1500 s).
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/tools.sh
tools=$(find_shared_tools) || { echo "deb-check: shared tools not found (set LEASEGATE_SHARED_TOOLS)" >&2; exit 1; }

inner=$(cat <<'INNER'
set -euo pipefail
say() { echo "deb-check: $*"; }
export DEBIAN_FRONTEND=noninteractive
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed'; }
# What a bare Debian 12 has anyway (libuuid1, libgnutls30 for apt...): those need no Depends.
base_pkgs=$(dpkg-query -W -f='${Package}\n')
scripts/deps.sh
cmake -B build -DLEASEGATE_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
(cd build && cpack -G DEB >/dev/null)
deb=$(ls build/leasegate_*.deb)
say "built $deb"

build_pkgs=$(sed -n 's/^BUILD="\(.*\)"$/\1/p' scripts/deps.sh)
runtime_pkgs=$(sed -n 's/^RUNTIME="\(.*\)"$/\1/p' scripts/deps.sh)
[ -n "$build_pkgs" ] && [ -n "$runtime_pkgs" ] || { say "cannot read BUILD and RUNTIME from scripts/deps.sh"; exit 1; }
apt-get purge -y -qq $build_pkgs >/dev/null
apt-get autoremove --purge -y -qq >/dev/null
# Every runtime library the base root did not have goes, whatever still pulls it in.
added=""
for p in $runtime_pkgs; do
  printf '%s\n' "$base_pkgs" | grep -qx "$p" || added="$added $p"
done
[ -n "$added" ] || { say "every runtime package is in the base root: nothing to test"; exit 1; }
apt-get purge -y -qq $added >/dev/null
apt-get autoremove --purge -y -qq >/dev/null
for p in $added; do
  ! installed "$p" || { say "$p is still installed: the Depends would go untested"; exit 1; }
done
say "build tools purged, and the runtime packages a bare Debian 12 lacks:$added"

apt-get install -y -qq --no-install-recommends systemd man-db >/dev/null
apt-get install -y -qq --no-install-recommends "./$deb" >/dev/null
for p in $runtime_pkgs; do
  installed "$p" || { say "Depends did not bring $p"; exit 1; }
done
unit=/usr/lib/systemd/system/leasegate.service
[ -x /usr/bin/leasegate ] && [ -f "$unit" ] && [ -f /usr/share/man/man1/leasegate.1 ] && [ -f /etc/default/leasegate ] ||
  { say "the package lacks a file"; dpkg -L leasegate; exit 1; }
getent passwd leasegate >/dev/null || { say "no user leasegate"; exit 1; }
[ "$(stat -c '%U:%G %a' /etc/leasegate/keys.txt)" = "root:leasegate 640" ] ||
  { say "keys.txt is $(stat -c '%U:%G %a' /etc/leasegate/keys.txt), not root:leasegate 640"; exit 1; }
say "installed: $(leasegate --version), user $(id leasegate)"

systemd-analyze verify "$unit"
say "systemd-analyze verify: ok"

# An operator's option (the root shares the host's network: not the default port, which
# another server may hold), then what systemd does before ExecStart: the state directory
# and the environment.
# Below the kernel's ephemeral range, and no socket of the host on it yet.
while :; do
  port=$(shuf -i 20000-32000 -n 1)
  grep -qi "$(printf ':%04X ' "$port")" /proc/net/tcp /proc/net/tcp6 2>/dev/null || break
done
echo "LEASEGATE_OPTS=\"--listen 127.0.0.1:$port\"" >> /etc/default/leasegate
export LEASEGATE_SERVER=http://127.0.0.1:$port
install -d -m 0750 -o leasegate -g leasegate /var/lib/leasegate
env_default=$(sed -n 's/^Environment="\(.*\)"$/\1/p' "$unit")
export "${env_default?}"
set -a; . /etc/default/leasegate; set +a
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
eval "set -- $exec_start"
say "ExecStart as leasegate: $*"
setpriv --reuid=leasegate --regid=leasegate --init-groups -- "$@" >/tmp/serve.log 2>&1 &
pid=$!
ok=1
for _ in $(seq 1 100); do
  if grep -q "listening on http://127.0.0.1:$port" /tmp/serve.log && leasegate healthcheck >/dev/null 2>&1; then
    ok=0; break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
[ $ok = 0 ] || { say "the service never answered /healthz"; cat /tmp/serve.log; kill -KILL "$pid" 2>/dev/null; exit 1; }
say "/healthz answers"

out=$(leasegate keygen ci client ci/)
key=$(printf '%s\n' "$out" | sed -n 1p)
printf '%s\n' "$out" | sed -n 2p >> /etc/leasegate/keys.txt
if LEASEGATE_KEY=$key leasegate acquire --lock ci/deb >/dev/null 2>&1; then
  say "a key not yet loaded was accepted"; kill -KILL "$pid"; exit 1
fi
# ExecReload, as systemd runs it (MAINPID in its environment, $$ for $).
reload=$(sed -n 's/^ExecReload=//p' "$unit" | sed 's/\$\$/$/g')
eval "MAINPID=$pid $reload"
granted=1
for _ in $(seq 1 50); do
  if LEASEGATE_KEY=$key leasegate acquire --lock ci/deb >/tmp/grant.json 2>/tmp/grant.err; then granted=0; break; fi
  sleep 0.1
done
[ $granted = 0 ] || { say "no grant with the reloaded key"; cat /tmp/grant.err /tmp/serve.log; kill -KILL "$pid"; exit 1; }
say "reloaded keys; granted: $(cat /tmp/grant.json)"

kill -TERM "$pid"
status=0
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then say "no exit within 10 s of SIGTERM"; kill -KILL "$pid"; exit 1; fi
wait "$pid" || status=$?
[ "$status" = 0 ] || { say "exit status $status after SIGTERM"; cat /tmp/serve.log; exit 1; }
[ "$(stat -c %U /var/lib/leasegate/leasegate.db)" = leasegate ] || { say "the database is not the user's"; exit 1; }
[ "$(grep -c 'leasegate: stopped on SIGTERM: ' /tmp/serve.log)" = 1 ] ||
  { say "an orderly stop did not log its one line"; cat /tmp/serve.log; exit 1; }
say "stopped cleanly: $(grep 'leasegate: stopped' /tmp/serve.log)"

# 6. The upgrade. The stand-in: systemctl as the maintainer scripts call it, the unit run
# the way systemd runs it (its user, Environment=, EnvironmentFile=, ExecStart, SIGTERM).
cat > /usr/local/sbin/leasegate-unit <<'UNIT'
#!/bin/bash
set -u
unit=/usr/lib/systemd/system/leasegate.service
pidfile=/run/leasegate-unit.pid
running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
stop() {
  running || return 0
  local pid; pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$pid" 2>/dev/null || { echo "leasegate-unit: no exit within 10 s of SIGTERM" >&2; exit 1; }
  rm -f "$pidfile"
}
start() {
  (
    # A daemon systemd starts inherits none of its caller's descriptors (apt's pipes).
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      [ "$n" -gt 2 ] && eval "exec $n>&-" 2>/dev/null
    done
    env_default=$(sed -n 's/^Environment="\(.*\)"$/\1/p' "$unit")
    export "${env_default?}"
    set -a; . /etc/default/leasegate; set +a
    eval "set -- $(sed -n 's/^ExecStart=//p' "$unit")"
    setpriv --reuid=leasegate --regid=leasegate --init-groups -- "$@" </dev/null >>/tmp/unit.log 2>&1 &
    echo $! > "$pidfile"
  )
}
case "$1" in
  start) running || start ;;
  stop) stop ;;
  try-restart) if running; then stop; start; fi ;;
  *) echo "leasegate-unit: $1?" >&2; exit 1 ;;
esac
UNIT
# apt runs maintainer scripts with PATH=/usr/sbin:/usr/bin:/sbin:/bin: systemd's own
# systemctl is set aside (dpkg-divert) for the stand-in, and put back at the end.
dpkg-divert --quiet --local --rename --add /usr/bin/systemctl
cat > /usr/bin/systemctl <<'CTL'
#!/bin/sh
# What the maintainer scripts ask of systemd, recorded, and done to leasegate.service.
echo "$*" >> /tmp/systemctl.log
case "$1" in
  daemon-reload) exit 0 ;;
  stop|start|try-restart) [ "$2" = leasegate.service ] && exec /usr/local/sbin/leasegate-unit "$1" ;;
esac
echo "systemctl stand-in: $* is not expected here" >&2
exit 1
CTL
chmod 0755 /usr/local/sbin/leasegate-unit /usr/bin/systemctl
mkdir -p /run/systemd/system
serving() {
  for _ in $(seq 1 100); do
    leasegate healthcheck >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}
leasegate-unit start
serving || { say "the unit never answered"; cat /tmp/unit.log; exit 1; }
old_pid=$(cat /run/leasegate-unit.pid)
rm -rf /tmp/next && dpkg-deb -R "$deb" /tmp/next
sed -i 's/^Version: .*/&+next1/' /tmp/next/DEBIAN/control
dpkg-deb -b /tmp/next /tmp/leasegate-next.deb >/dev/null
apt-get install -y -qq --no-install-recommends /tmp/leasegate-next.deb >/dev/null
case "$(dpkg-query -W -f='${Version}' leasegate)" in *+next1) ;; *) say "the upgrade did not install"; exit 1 ;; esac
grep -qx 'try-restart leasegate.service' /tmp/systemctl.log ||
  { say "the upgrade did not try-restart the service:"; cat /tmp/systemctl.log; exit 1; }
! grep -q '^stop ' /tmp/systemctl.log || { say "the upgrade stopped the service:"; cat /tmp/systemctl.log; exit 1; }
serving || { say "the service does not answer after the upgrade"; cat /tmp/systemctl.log /tmp/unit.log; exit 1; }
new_pid=$(cat /run/leasegate-unit.pid)
[ "$new_pid" != "$old_pid" ] || { say "the service was not restarted (still pid $old_pid)"; exit 1; }
[ "$(grep -c 'leasegate: stopped on SIGTERM: ' /tmp/unit.log)" = 1 ] ||
  { say "the old process did not stop in order"; cat /tmp/unit.log; exit 1; }
say "upgraded to $(dpkg-query -W -f='${Version}' leasegate): try-restart, pid $old_pid -> $new_pid, answering"
apt-get remove -y -qq leasegate >/dev/null
grep -qx 'stop leasegate.service' /tmp/systemctl.log || { say "removing did not stop the service"; exit 1; }
! kill -0 "$new_pid" 2>/dev/null || { say "the service still runs after removal"; exit 1; }
rm -rf /run/systemd/system /usr/bin/systemctl /usr/local/sbin/leasegate-unit
dpkg-divert --quiet --local --rename --remove /usr/bin/systemctl
say "ok: the package installs, its unit verifies, its ExecStart serves as leasegate and stops cleanly; an upgrade restarts it, a removal stops it"
INNER
)
timeout "${DEB_CHECK_TIMEOUT:-1500}" "$tools/fresh-debian.sh" "$inner"
