#!/usr/bin/env bash
# bench/instructions.sh — the server's instructions per acquire+release pair, counted by callgrind:
# a figure that does not move with whatever else the machine runs (wall-clock throughput on a
# shared machine does), and where they go, function by function.
#
#   bash bench/instructions.sh                        # leasegate, 64 clients, 8 s counted
#   TARGET=ceiling CLIENTS=1 bash bench/instructions.sh
#
# Environment: TARGET (leasegate | ceiling)  CLIENTS (64)  SECONDS (8; BENCH_SECONDS also works)
#   LEASEGATE_BIN (build/leasegate)  CEILING_BIN (build/bench/ceiling)  LGBENCH (build/bench/lgbench)
#   SERVE_ARGS (more serve flags)  TOP (25 functions shown)  OUT (keep callgrind's file there)
# The server runs under valgrind --tool=callgrind (every thread counted, the commit writer's
# included); counting starts after a warm-up (callgrind_control --zero) and stops with a dump; the
# pairs are the server's own count over the same span (leasegate_releases_total; the ceiling's
# from lgbench). Under valgrind the threads take turns, so a group commit gathers more requests
# than it would natively: the commit's share per pair is lower than outside valgrind, the rest
# (HTTP, JSON, the lock table, hand-offs between threads) is what it is.
# Prints "instructions_per_pair=N pairs=N" then callgrind_annotate's top functions (self cost).

_env_seconds=$(printenv SECONDS || true)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TARGET=${TARGET:-leasegate}
CLIENTS=${CLIENTS:-64}
SECS=${BENCH_SECONDS:-${_env_seconds:-8}}
TOP=${TOP:-25}
LEASEGATE_BIN=${LEASEGATE_BIN:-$ROOT/build/leasegate}
CEILING_BIN=${CEILING_BIN:-$ROOT/build/bench/ceiling}
LGBENCH=${LGBENCH:-$ROOT/build/bench/lgbench}
log() { printf 'instructions: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
command -v valgrind >/dev/null || die "needs valgrind (apt-get install valgrind)"
[[ $CLIENTS =~ ^[1-9][0-9]{0,4}$ ]] || die "CLIENTS must be 1..99999"
[[ $SECS =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SECONDS must be a number"
[[ -x $LGBENCH ]] || die "no lgbench at $LGBENCH (cmake --build build)"

TMP=$(mktemp -d /tmp/lg-instructions.XXXXXX)
VG_PID=''
cleanup() {
    if [[ -n $VG_PID ]] && kill -0 "$VG_PID" 2>/dev/null; then
        kill -TERM "$VG_PID" 2>/dev/null || true
        for ((i = 0; i < 300; i++)); do kill -0 "$VG_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$VG_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

case $TARGET in
leasegate)
    [[ -x $LEASEGATE_BIN ]] || die "no leasegate at $LEASEGATE_BIN"
    # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
    valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" "$LEASEGATE_BIN" serve --listen 127.0.0.1:0 \
        --data "$TMP/db" ${SERVE_ARGS:-} >"$TMP/stdout" 2>"$TMP/stderr" &
    re='s/^leasegate: listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' ;;
ceiling)
    [[ -x $CEILING_BIN ]] || die "no ceiling at $CEILING_BIN"
    valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" "$CEILING_BIN" --listen 127.0.0.1:0 \
        >"$TMP/stdout" 2>"$TMP/stderr" &
    re='s/^ceiling: listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' ;;
*) die "TARGET is leasegate or ceiling" ;;
esac
VG_PID=$!
PORT=''
for ((i = 0; i < 600; i++)); do
    PORT=$(sed -n "$re" "$TMP/stdout" 2>/dev/null)
    [[ -n $PORT ]] && break
    kill -0 "$VG_PID" 2>/dev/null || die "the server exited: $(tail -5 "$TMP/stderr")"
    sleep 0.1
done
[[ -n $PORT ]] || die "the server did not report its port"
releases() { curl -fsS -m 30 "http://127.0.0.1:$PORT/metrics" | awk '$1 == "leasegate_releases_total" { print $2 }'; }

# lgbench's warm-up is the uncounted part: counting is zeroed once it is over, and dumped
# when lgbench ends (its last pairs may straddle the dump: a few in 10,000 at 64 clients)
WARM=3
"$LGBENCH" --target leasegate --port "$PORT" --mode pairs --clients "$CLIENTS" --warmup "$WARM" --seconds "$SECS" \
    --timeout 300 >"$TMP/lgbench.out" 2>"$TMP/lgbench.err" &
LGB=$!
sleep "$WARM"
[[ $TARGET == leasegate ]] && r0=$(releases)
callgrind_control --zero "$VG_PID" >/dev/null
wait "$LGB" || die "lgbench failed: $(tail -3 "$TMP/lgbench.err")"
callgrind_control --dump "$VG_PID" >/dev/null
if [[ $TARGET == leasegate ]]; then
    r1=$(releases)
    PAIRS=$((${r1%.*} - ${r0%.*}))
else
    PAIRS=$(sed -n 's/.* pairs=\([0-9]*\) .*/\1/p' "$TMP/lgbench.out")
fi
DUMP=$(ls -t "$TMP"/cg.out.* 2>/dev/null | head -1)
[[ -n $DUMP ]] || die "no callgrind dump"
IR=$(callgrind_annotate "$DUMP" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
((PAIRS > 0)) || die "no pairs counted"
echo "target=$TARGET clients=$CLIENTS instructions_per_pair=$((IR / PAIRS)) pairs=$PAIRS instructions=$IR lgbench: $(cat "$TMP/lgbench.out")"
callgrind_annotate --inclusive=no --threshold=100 "$DUMP" >"$TMP/self.txt" 2>/dev/null || true
sed -n '/^Ir  *file:function/,$p' "$TMP/self.txt" | sed -n "1,$((TOP + 2))p"
[[ -n ${OUT:-} ]] && cp "$DUMP" "$OUT" && log "callgrind's file: $OUT"
exit 0
