#!/usr/bin/env bash
# bench/syscalls.sh — system calls per acquire+release pair, counted with strace.
#
#   bash bench/syscalls.sh              # 64 clients, 3 s of pairs
#   CLIENTS=1 SECONDS=2 bash bench/syscalls.sh
#
# Starts build/leasegate (LEASEGATE_BIN) under `strace -f` on a free 127.0.0.1 port with a
# temporary database, runs lgbench's pairs mode against it (no warm-up, so that every
# pair is counted), stops the server by PID, and prints the calls of the loop thread per
# pair by name, and those of the commit writer per pair and per commit (per fdatasync). strace
# slows the server down a lot: the figures are counts, not speeds (the time a commit takes is
# leasegate_commit_seconds in /metrics, read without strace).
_env_seconds=$(printenv SECONDS || true)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SECS=${BENCH_SECONDS:-${_env_seconds:-3}}
CLIENTS=${CLIENTS:-64}
LEASEGATE_BIN=${LEASEGATE_BIN:-$ROOT/build/leasegate}
[[ -x $LEASEGATE_BIN ]] || { echo "syscalls: no leasegate binary at $LEASEGATE_BIN" >&2; exit 1; }
command -v strace >/dev/null 2>&1 || { echo "syscalls: needs strace (apt-get install strace)" >&2; exit 1; }

TMP=$(mktemp -d /tmp/lgbench-syscalls.XXXXXX)
SPID=
cleanup() {
    if [[ -n $SPID ]]; then
        kill -TERM $(pgrep -P "$SPID") 2>/dev/null || true
        wait "$SPID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
cc -std=c11 -O2 -o "$TMP/lgbench" "$HERE/lgbench.c"

strace -f -qq -o "$TMP/trace" "$LEASEGATE_BIN" serve --listen 127.0.0.1:0 --data "$TMP/db" >"$TMP/out" 2>"$TMP/err" &
SPID=$!
for _ in $(seq 100); do
    grep -q "listening on" "$TMP/out" 2>/dev/null && break
    sleep 0.1
done
URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$TMP/out")
[[ -n $URL ]] || { echo "syscalls: the server did not start" >&2; cat "$TMP/err" >&2; exit 1; }
LPID=$(pgrep -P "$SPID")
"$TMP/lgbench" --target leasegate --mode pairs --clients "$CLIENTS" --seconds "$SECS" --warmup 0 --url "$URL" \
    >"$TMP/bench"
kill -TERM "$LPID"
wait "$SPID" || true
SPID=
PAIRS=$(sed -n 's/.* pairs=\([0-9]*\).*/\1/p' "$TMP/bench")
python3 - "$TMP/trace" "$LPID" "$PAIRS" "$CLIENTS" <<'PY'
import collections, re, sys
trace, loop_pid, pairs, clients = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
calls = {"loop": collections.Counter(), "writer": collections.Counter()}
for line in open(trace, errors="replace"):
    m = re.match(r"(\d+)\s+(\w+)\(", line)
    if m:
        calls["loop" if m.group(1) == loop_pid else "writer"][m.group(2)] += 1
print("pairs: %d with %s clients (under strace)" % (pairs, clients))
for who in ("loop", "writer"):
    total = sum(calls[who].values())
    print("%s thread: %.2f calls per pair" % (who, total / pairs))
    for name, n in calls[who].most_common(12):
        print("  %-16s %.2f" % (name, n / pairs))
# The writer per commit (one fdatasync each); its waiting for the next batch
# (sched_yield while it polls, futex when it sleeps) apart.
commits = calls["writer"]["fdatasync"]
if commits:
    wait = calls["writer"]["sched_yield"] + calls["writer"]["futex"]
    print("writer per commit (%d commits): %.2f calls, %.2f of them waiting for the next batch"
          % (commits, sum(calls["writer"].values()) / commits, wait / commits))
    for name, n in calls["writer"].most_common(12):
        print("  %-16s %.2f" % (name, n / commits))
PY
