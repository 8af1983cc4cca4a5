#!/usr/bin/env bash
# bench/scaleout.sh — issue 13's figures: leasegate on a 3-member etcd cluster behind 3 gateways,
# against etcd's own lock API on the same cluster and against the SQLite store, in one run.
#
#   bash bench/scaleout.sh                  # about 2.5 minutes on a 2-core VM
#   SECONDS=2 FAILOVERS=1 ETCD_KILLS=1 bash bench/scaleout.sh    # quick look, about 1 minute
#   SECONDS=0.5 FAILOVERS=1 ETCD_KILLS=1 ETCD_FOLLOWER_KILLS=0 FLOOR_N=10 bash bench/scaleout.sh
#                                           # CI's smoke (.ci/run): every step once
#
# What it does (everything on 127.0.0.1, temporary directories, every process stopped by PID):
#  1. SQLite store: one gateway (--data), acquire+release pairs/s with CLIENTS and 1 client(s),
#     and reads/s (GET /v1/locks/NAME, lgbench --variant read) with CLIENTS.
#  2. Starts 3 etcd members and 3 gateways (--store etcd://m0,m1,m2/PREFIX --leader-ttl LEADER_TTL).
#  3. pairs/s with CLIENTS and 1 client(s) through the leader gateway and through a follower
#     gateway (lgbench --target leasegate), and with etcd's lock API on the same cluster through
#     the Raft leader member and a follower member (lgbench --target etcd --variant lockkeep:
#     one lease per client granted before timing, then /v3/lock/lock + /v3/lock/unlock per pair),
#     and the same lock API spoken as gRPC through the Raft leader member (bench/etcd_grpc_lock.c:
#     as etcd's Go clients call it; the gateways commit as gRPC too, so this is the fair pair).
#     Distinct lock names per client everywhere. CPU of the gateways, of the etcd members, of the
#     client and of the whole machine over each cell; the leader's commit batch size and latency.
#     Reads/s through the leader gateway with CLIENTS and 1 client(s): a read changes nothing, so
#     on etcd it waits for a barrier (issue 27: a transaction fenced on the leader key that changes
#     nothing, one per batch; src/store/commit.h), the cost of no answer from memory.
#  4. FAILOVERS times: kill -9 the leader gateway while a client loops acquire+release through a
#     follower gateway (bench/scaleout_failover.py): kill -> first grant of an acquire sent after
#     the kill; the kill comes at a random point of the keepalive period (LEADER_TTL/3). The
#     killed gateway is started again (as a supervisor would) before the next one.
#  5. ETCD_KILLS times: kill -9 the etcd Raft leader member while a client loops through the
#     leader gateway (moving on to the next gateway on a connection error or 503, as leasegate's
#     clients do): kill -> grants again. The member is started again before the next one.
#  6. ETCD_FOLLOWER_KILLS times: the same with a member that does not lead the Raft group.
#
# Environment:
#   SECONDS (5; BENCH_SECONDS also works) per throughput cell   WARMUP (0.5)   CLIENTS (64)
#   LEADER_TTL (3, the gateway's default)   FAILOVERS (3)   ETCD_KILLS (3, the Raft leader)   ETCD_FOLLOWER_KILLS (1, another member)
#   GATEWAY_ARGS (extra serve flags for every gateway, the SQLite one too; e.g. "--audit-keep 0")
#   LEASEGATE_BIN (build/leasegate of this checkout; copied first)   LGBENCH (a built lgbench; else built here)
#   FLOOR_N (100: transactions per size in the etcd-alone step, see bench/etcd_floor.py)
#   KEEP_TMP (1: keep the temp dir with every log)
# Prints one markdown table (and notes) on stdout; progress and raw lines on stderr. Exits 1 (after
# the tables) when a cell, a failover or an etcd kill failed, or leasegate answered an error.

# SECONDS is bash's own timer: read the caller's value before anything else runs.
_env_seconds=$(printenv SECONDS || true)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SECS=${BENCH_SECONDS:-${_env_seconds:-5}}
WARMUP=${WARMUP:-0.5}
CLIENTS=${CLIENTS:-64}
LEADER_TTL=${LEADER_TTL:-3}
FAILOVERS=${FAILOVERS:-3}
ETCD_KILLS=${ETCD_KILLS:-3}
ETCD_FOLLOWER_KILLS=${ETCD_FOLLOWER_KILLS:-1}
FLOOR_N=${FLOOR_N:-100}
GATEWAY_ARGS=${GATEWAY_ARGS:-}
LEASEGATE_BIN=${LEASEGATE_BIN:-$ROOT/build/leasegate}
ETCD_BIN=${ETCD_BIN:-/usr/bin/etcd}
PREFIX=scaleout
WAIT_S=30 # bound of every wait for a role change or a member to answer

log() { printf 'scaleout: %(%T)T %s\n' -1 "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $SECS =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SECONDS must be a number"
[[ $FAILOVERS =~ ^[0-9]$ && $ETCD_KILLS =~ ^[0-9]$ && $ETCD_FOLLOWER_KILLS =~ ^[0-9]$ ]] ||
    die "FAILOVERS, ETCD_KILLS and ETCD_FOLLOWER_KILLS must be 0..9"
[[ $LEADER_TTL =~ ^[0-9]+$ ]] || die "LEADER_TTL must be whole seconds (2..60)"
[[ -x $LEASEGATE_BIN ]] || die "no leasegate binary at $LEASEGATE_BIN (build it, or set LEASEGATE_BIN)"
[[ -x $ETCD_BIN ]] || die "no etcd at $ETCD_BIN (Debian package etcd-server; or set ETCD_BIN)"
for c in curl python3 cc; do command -v "$c" >/dev/null 2>&1 || die "needs $c"; done

# ---------------------------------------------------------------- temp dir and cleanup
TMP=$(mktemp -d "${TMPDIR:-/tmp}/leasegate-scaleout.XXXXXX")
PIDS=() # every process started here, stopped by PID on exit
stop_pids() { # TERM every PID given, then a bounded wait, then KILL what is left
    local p i left
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for ((i = 0; i < 100; i++)); do
        left=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && left=1; done
        ((left)) || break
        sleep 0.1
    done
    for p in "$@"; do
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}
forget_pid() { # a PID that is gone (killed here, or exited): never signal it again
    local keep=() p
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]+"${keep[@]}"}")
}
cleanup() {
    # gateways first (they resign through etcd), then every etcd member at once (a member
    # stopped alone while the others are gone would wait for a quorum)
    local gateways=() p
    for p in "${GW_PID[@]+"${GW_PID[@]}"}" ${SQ_PID:-}; do [[ -n $p ]] && gateways+=("$p"); done
    ((${#gateways[@]})) && stop_pids "${gateways[@]}"
    ((${#PIDS[@]})) && stop_pids "${PIDS[@]}"
    if [[ ${KEEP_TMP:-0} == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- lgbench and the binary
if [[ -z ${LGBENCH:-} ]]; then
    LGBENCH=$TMP/lgbench
    cc -std=c11 -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -o "$LGBENCH" "$HERE/lgbench.c" || die "cannot build lgbench"
fi
[[ -x $LGBENCH ]] || die "no lgbench at $LGBENCH"
EGL=$TMP/etcd_grpc_lock
cc -std=c11 -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -I "$ROOT/include" -I "$ROOT/src" \
    -o "$EGL" "$HERE/etcd_grpc_lock.c" "$ROOT/src/store/pb.c" -lcurl -lpthread || die "cannot build etcd_grpc_lock"
grep -qa lockkeep "$LGBENCH" || die "$LGBENCH has no --variant lockkeep: rebuild it from bench/lgbench.c"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# N distinct free ports *below* the kernel's ephemeral range, so that no client socket of this
# run (lgbench's, curl's) can take one of them between the choice and a (re)start.
free_ports() {
    python3 - "$1" <<'PY'
import random, socket, sys
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
low = 10000 if lo > 12000 else 1024
ports = []
for _ in range(10000):
    if len(ports) == int(sys.argv[1]):
        break
    p = random.randrange(low, lo)
    if p in ports:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        ports.append(p)
    except OSError:
        pass
    finally:
        s.close()
print(" ".join(map(str, ports)))
PY
}
cp "$LEASEGATE_BIN" "$TMP/leasegate" # a rebuild during the run cannot change what is measured
LG_REV="$(sha256sum "$LEASEGATE_BIN" | cut -c1-12), built $(date -u -r "$LEASEGATE_BIN" +%Y-%m-%dT%H:%MZ)"
LEASEGATE_BIN=$TMP/leasegate

# ---------------------------------------------------------------- small helpers
json_get() { # the string or number of "KEY": in the (flat enough) JSON on stdin; "" when absent
    sed -n 's/.*"'"$1"'":"\{0,1\}\([^",}]*\).*/\1/p' | head -1
}
b64() { printf '%s' "$1" | base64 -w0; }
etcd_post() { curl -fsS -m 2 -XPOST "http://127.0.0.1:$1$2" -d "$3"; } # port, path, body
health() { curl -fsS -m 1 "http://127.0.0.1:$1/healthz" 2>/dev/null || true; }
role_of() { health "$1" | json_get role 2>/dev/null || true; }
now_ms() { date +%s%3N; }

# CPU ticks of a PID (0 when gone), and the machine's total and idle ticks
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
sum_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(ticks "$p"))); done; echo "$t"; }
machine() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6 }' /proc/stat; }
HZ=$(getconf CLK_TCK)

# ---------------------------------------------------------------- etcd cluster
read -r -a PORTS <<<"$(free_ports 10)" # 3 etcd client, 3 peer, 3 gateways, 1 SQLite gateway
((${#PORTS[@]} == 10)) || die "cannot find 10 free ports below the ephemeral range"
M_CLIENT=("${PORTS[@]:0:3}") M_PEER=("${PORTS[@]:3:3}") M_PID=() M_ID=()
CLUSTER="m0=http://127.0.0.1:${M_PEER[0]},m1=http://127.0.0.1:${M_PEER[1]},m2=http://127.0.0.1:${M_PEER[2]}"
start_member() { # $1 = index, $2 = new|existing
    local i=$1 dir=$TMP/etcd-m$1
    mkdir -p "$dir"
    "$ETCD_BIN" --name "m$i" --data-dir "$dir/data" \
        --listen-client-urls "http://127.0.0.1:${M_CLIENT[$i]}" --advertise-client-urls "http://127.0.0.1:${M_CLIENT[$i]}" \
        --listen-peer-urls "http://127.0.0.1:${M_PEER[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${M_PEER[$i]}" \
        --initial-cluster "$CLUSTER" --initial-cluster-state "$2" --initial-cluster-token leasegate-scaleout \
        >>"$dir/etcd.log" 2>&1 &
    M_PID[i]=$!
    PIDS+=("$!")
}
member_id() { etcd_post "${M_CLIENT[$1]}" /v3/maintenance/status '{}' 2>/dev/null | json_get member_id; }
# the index of the member that leads the Raft group, as a running member sees it ("" if none)
raft_leader() {
    local i lead j
    for i in 0 1 2; do
        kill -0 "${M_PID[$i]}" 2>/dev/null || continue
        lead=$(etcd_post "${M_CLIENT[$i]}" /v3/maintenance/status '{}' 2>/dev/null | json_get leader) || continue
        [[ -n $lead ]] || continue
        for j in 0 1 2; do [[ ${M_ID[$j]:-} == "$lead" ]] && { echo "$j"; return 0; }; done
    done
    echo ""
}
wait_cluster() { # a Raft leader, and every running member answers a read
    local deadline=$((SECONDS + WAIT_S)) i ok
    while ((SECONDS < deadline)); do
        ok=1
        for i in 0 1 2; do
            kill -0 "${M_PID[$i]}" 2>/dev/null || die "etcd member m$i exited: $(tail -3 "$TMP/etcd-m$i/etcd.log")"
            etcd_post "${M_CLIENT[$i]}" /v3/kv/range "{\"key\":\"$(b64 x)\"}" >/dev/null 2>&1 || ok=0
        done
        for i in 0 1 2; do [[ -n ${M_ID[$i]:-} ]] || M_ID[i]=$(member_id "$i"); done
        ((ok)) && [[ -n $(raft_leader) ]] && return 0
        sleep 0.1
    done
    die "the etcd cluster did not get ready within ${WAIT_S}s (logs in $TMP/etcd-m*)"
}
etcd_count() { # keys under PREFIX/$1/
    etcd_post "${M_CLIENT[$(raft_leader)]}" /v3/kv/range \
        "{\"key\":\"$(b64 "$PREFIX/$1/")\",\"range_end\":\"$(b64 "$PREFIX/${1}0")\",\"count_only\":true}" |
        json_get count | sed 's/^$/0/'
}

# ---------------------------------------------------------------- gateways
G_PORT=("${PORTS[@]:6:3}") GW_PID=()
STORE="etcd://127.0.0.1:${M_CLIENT[0]},127.0.0.1:${M_CLIENT[1]},127.0.0.1:${M_CLIENT[2]}/$PREFIX"
start_gateway() { # $1 = index; same port every time, so the others and clients find it again
    local i=$1 dir=$TMP/gw$1
    mkdir -p "$dir"
    # shellcheck disable=SC2086 # GATEWAY_ARGS is a list of flags
    # --new-lock-space: the prefix is fresh (and the flag is harmless on restarts).
    "$LEASEGATE_BIN" serve --store "$STORE" --new-lock-space --leader-ttl "$LEADER_TTL" --listen "127.0.0.1:${G_PORT[$i]}" \
        $GATEWAY_ARGS >>"$dir/stdout" 2>>"$dir/stderr" &
    GW_PID[i]=$!
}
gw_index_with_role() { # $1 = leader|follower: the first running gateway with that role
    local i
    for i in 0 1 2; do
        kill -0 "${GW_PID[$i]}" 2>/dev/null || continue
        [[ $(role_of "${G_PORT[$i]}") == "$1" ]] && { echo "$i"; return 0; }
    done
    echo ""
}
UNEXPECTED=() # gateways that exited without being killed here
EXITED=""     # the ones reap_gateways found this time, "gI:STATUS ..."
reap_gateways() { # a gateway that exited by itself is recorded and started again (a supervisor's job)
    local i st
    EXITED=""
    for i in 0 1 2; do
        kill -0 "${GW_PID[$i]}" 2>/dev/null && continue
        wait "${GW_PID[$i]}" 2>/dev/null && st=0 || st=$?
        EXITED+="${EXITED:+,}g$i:$st"
        UNEXPECTED+=("gateway g$i exited by itself with status $st ($(grep -v 'forward of' "$TMP/gw$i/stderr" | tail -1 | sed 's/^leasegate: //'))")
        log "${UNEXPECTED[-1]}; starting it again"
        start_gateway "$i"
    done
}
LEAD=""
wait_gateways() { # sets LEAD once one gateway leads and both others follow it
    local deadline=$((SECONDS + WAIT_S)) i n h
    while ((SECONDS < deadline)); do
        reap_gateways
        LEAD=$(gw_index_with_role leader)
        n=0
        for i in 0 1 2; do
            h=$(health "${G_PORT[$i]}")
            [[ -n $LEAD && $(json_get role <<<"$h") == follower && $(json_get leader <<<"$h") == "http://127.0.0.1:${G_PORT[$LEAD]}" ]] && n=$((n + 1))
        done
        [[ -n $LEAD && $n == 2 ]] && return 0
        sleep 0.1
    done
    die "the gateways did not settle on one leader within ${WAIT_S}s (logs in $TMP/gw*)"
}

# ---------------------------------------------------------------- results
RESULTS=$TMP/results.txt
: >"$RESULTS"
FAILED=()
put() { printf '%s %s\n' "$1" "$2" >>"$RESULTS"; } # id, key=value...
get() { # id key -> value or "-"
    awk -v id="$1" -v key="$2" '$1 == id { for (i = 2; i <= NF; i++) { n = index($i, "="); if (substr($i, 1, n - 1) == key) v = substr($i, n + 1) } } END { print (v == "" ? "-" : v) }' "$RESULTS"
}
metric() { curl -fsS -m 2 "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v k="$2" '$1 == k { print $2 }'; }
# keys etcd has written (puts + deletes, as one member applied them; every member applies all)
etcd_writes() {
    local i
    for i in 0 1 2; do
        [[ -n ${M_PID[$i]:-} ]] && kill -0 "${M_PID[$i]}" 2>/dev/null || continue
        curl -fsS -m 2 "http://127.0.0.1:${M_CLIENT[$i]}/metrics" 2>/dev/null |
            awk '$1 == "etcd_mvcc_put_total" || $1 == "etcd_mvcc_delete_total" { s += $2 } END { printf "%.0f\n", s }'
        return 0
    done
    echo ""
}

# cell ID PORT_FOR_METRICS GW_PIDS ETCD_PIDS -- lgbench args   (or -- --grpc-lock etcd_grpc_lock args)
# Runs lgbench (or etcd_grpc_lock) once; records its line plus the CPU % of the gateways, of etcd, and of the
# machine over lgbench's whole life (warm-up included), and the leader's commit figures.
cell() {
    local id=$1 mport=$2 gws=$3 et=$4 line m0 m1 e0 e1 g0 g1 t0 t1 k0 k1 r0 r1 s0 s1
    shift 5
    local bin=$LGBENCH
    if [[ ${1:-} == --grpc-lock ]]; then bin=$EGL; shift; fi
    # shellcheck disable=SC2086
    { g0=$(sum_ticks $gws); e0=$(sum_ticks $et); }
    local w0="" w1=""
    [[ -n $et ]] && w0=$(etcd_writes)
    m0=$(machine); t0=$(now_ms)
    if [[ -n $mport ]]; then k0=$(metric "$mport" leasegate_commits_total); r0=$(metric "$mport" leasegate_commit_rows_total); s0=$(metric "$mport" leasegate_commit_seconds_sum); fi
    if ! line=$(timeout 300 "$bin" "$@" 2>>"$TMP/lgbench.stderr"); then
        FAILED+=("$id")
        log "FAILED: $id: lgbench $*"
        tail -5 "$TMP/lgbench.stderr" >&2
        return 0
    fi
    t1=$(now_ms); m1=$(machine)
    [[ -n $w0 ]] && w1=$(etcd_writes)
    # shellcheck disable=SC2086
    { g1=$(sum_ticks $gws); e1=$(sum_ticks $et); }
    local extra
    extra=$(awk -v g0="$g0" -v g1="$g1" -v e0="$e0" -v e1="$e1" -v t0="$t0" -v t1="$t1" -v hz="$HZ" -v m0="$m0" -v m1="$m1" 'BEGIN {
        w = (t1 - t0) / 1000; split(m0, a, " "); split(m1, b, " ")
        printf "gw_cpu_pct=%.0f etcd_cpu_pct=%.0f machine_busy_pct=%.0f", 100 * (g1 - g0) / hz / w, 100 * (e1 - e0) / hz / w, 100 * (1 - (b[2] - a[2]) / (b[1] - a[1])) }')
    if [[ -n $mport ]]; then
        k1=$(metric "$mport" leasegate_commits_total); r1=$(metric "$mport" leasegate_commit_rows_total); s1=$(metric "$mport" leasegate_commit_seconds_sum)
        extra+=" $(awk -v k0="$k0" -v k1="$k1" -v r0="$r0" -v r1="$r1" -v s0="$s0" -v s1="$s1" -v t0="$t0" -v t1="$t1" 'BEGIN {
            n = k1 - k0; w = (t1 - t0) / 1000
            if (n > 0) printf "rows_per_commit=%.1f ms_per_commit=%.2f rows_per_s=%.0f writer_busy_pct=%.0f", (r1 - r0) / n, 1000 * (s1 - s0) / n, (r1 - r0) / w, 100 * (s1 - s0) / w
            else print "rows_per_commit=- ms_per_commit=- rows_per_s=- writer_busy_pct=-" }')"
    fi
    if [[ -n $w0 && -n $w1 ]]; then # etcd keys written per pair (warm-up pairs included, so a little high)
        extra+=" $(awk -v w0="$w0" -v w1="$w1" -v t0="$t0" -v t1="$t1" -v l="$line" 'BEGIN {
            n = split(l, f, " "); for (i = 1; i <= n; i++) if (f[i] ~ /^pairs_per_s=/) p = substr(f[i], 13)
            w = (t1 - t0) / 1000; if (p > 0) printf "etcd_keys_per_pair=%.2f", (w1 - w0) / w / p; else print "etcd_keys_per_pair=-" }')"
    fi
    log "$id: $line $extra"
    put "$id" "$line $extra"
}

CPU_START=$(machine)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
COMMON=(--seconds "$SECS" --warmup "$WARMUP")

# ---------------------------------------------------------------- 1. SQLite store, one gateway
log "SQLite store: one gateway"
mkdir -p "$TMP/sqlite"
SQ_PORT=${PORTS[9]}
# shellcheck disable=SC2086 # GATEWAY_ARGS is a list of flags
"$LEASEGATE_BIN" serve --listen "127.0.0.1:$SQ_PORT" --data "$TMP/sqlite/leasegate.db" $GATEWAY_ARGS \
    >"$TMP/sqlite/stdout" 2>"$TMP/sqlite/stderr" &
SQ_PID=$!
for ((i = 0; i < 100; i++)); do [[ -n $(health "$SQ_PORT") ]] && break; sleep 0.05; done
[[ -n $(health "$SQ_PORT") ]] || die "the SQLite gateway did not answer: $(tail -3 "$TMP/sqlite/stderr")"
cell sqlite.64 "$SQ_PORT" "$SQ_PID" "" -- --target leasegate --mode pairs --clients "$CLIENTS" --port "$SQ_PORT" "${COMMON[@]}"
cell sqlite.1 "$SQ_PORT" "$SQ_PID" "" -- --target leasegate --mode pairs --clients 1 --port "$SQ_PORT" "${COMMON[@]}"
cell sqlite_read.64 "$SQ_PORT" "$SQ_PID" "" -- --target leasegate --mode pairs --variant read --clients "$CLIENTS" --port "$SQ_PORT" "${COMMON[@]}"
stop_pids "$SQ_PID"
SQ_PID=

# ---------------------------------------------------------------- 2. etcd cluster and gateways
log "starting 3 etcd members"
for i in 0 1 2; do start_member "$i" new; done
wait_cluster
log "etcd ready; Raft leader m$(raft_leader)"
for i in 0 1 2; do
    start_gateway "$i"
    # one after the other: g0 leads, then g1 and g2 queue in that order
    for ((k = 0; k < 100; k++)); do [[ -n $(role_of "${G_PORT[$i]}") ]] && break; sleep 0.05; done
done
wait_gateways
FOLL=$(( (LEAD + 1) % 3 ))
log "gateways ready: leader g$LEAD (port ${G_PORT[$LEAD]}), follower used: g$FOLL (port ${G_PORT[$FOLL]})"

# ---------------------------------------------------------------- 3. throughput
ALL_GW="${GW_PID[*]}"
ALL_ETCD="${M_PID[*]}"
LP=${G_PORT[$LEAD]}
cell lg_leader.64 "$LP" "$ALL_GW" "$ALL_ETCD" -- --target leasegate --mode pairs --clients "$CLIENTS" --port "$LP" "${COMMON[@]}"
cell lg_leader.1 "$LP" "$ALL_GW" "$ALL_ETCD" -- --target leasegate --mode pairs --clients 1 --port "$LP" "${COMMON[@]}"
cell lg_read.64 "$LP" "$ALL_GW" "$ALL_ETCD" -- --target leasegate --mode pairs --variant read --clients "$CLIENTS" --port "$LP" "${COMMON[@]}"
cell lg_read.1 "$LP" "$ALL_GW" "$ALL_ETCD" -- --target leasegate --mode pairs --variant read --clients 1 --port "$LP" "${COMMON[@]}"
cell lg_follower.64 "$LP" "$ALL_GW" "$ALL_ETCD" -- --target leasegate --mode pairs --clients "$CLIENTS" --port "${G_PORT[$FOLL]}" "${COMMON[@]}"
cell lg_follower.1 "$LP" "$ALL_GW" "$ALL_ETCD" -- --target leasegate --mode pairs --clients 1 --port "${G_PORT[$FOLL]}" "${COMMON[@]}"
RL=$(raft_leader)
RF=$(( (RL + 1) % 3 ))
log "etcd lock API: Raft leader m$RL, follower member used: m$RF"
cell etcd_leader.64 "" "$ALL_GW" "$ALL_ETCD" -- --target etcd --mode pairs --variant lockkeep --clients "$CLIENTS" --port "${M_CLIENT[$RL]}" "${COMMON[@]}"
cell etcd_leader.1 "" "$ALL_GW" "$ALL_ETCD" -- --target etcd --mode pairs --variant lockkeep --clients 1 --port "${M_CLIENT[$RL]}" "${COMMON[@]}"
cell etcd_follower.64 "" "$ALL_GW" "$ALL_ETCD" -- --target etcd --mode pairs --variant lockkeep --clients "$CLIENTS" --port "${M_CLIENT[$RF]}" "${COMMON[@]}"
cell etcd_follower.1 "" "$ALL_GW" "$ALL_ETCD" -- --target etcd --mode pairs --variant lockkeep --clients 1 --port "${M_CLIENT[$RF]}" "${COMMON[@]}"
cell etcd_grpc.64 "" "$ALL_GW" "$ALL_ETCD" -- --grpc-lock --clients "$CLIENTS" --port "${M_CLIENT[$RL]}" "${COMMON[@]}"
cell etcd_grpc.1 "" "$ALL_GW" "$ALL_ETCD" -- --grpc-lock --clients 1 --port "${M_CLIENT[$RL]}" "${COMMON[@]}"
wait_gateways # a gateway that lost its lease under load would show up here
# etcd alone, one client, one transaction after the other: what one Raft write of K keys costs
for k in 1 8 64 128; do
    line=$(python3 "$HERE/etcd_floor.py" --url "http://127.0.0.1:${M_CLIENT[$RL]}" --n "$FLOOR_N" --keys "$k" --value-bytes 200) ||
        { FAILED+=("floor.$k"); log "FAILED: etcd_floor --keys $k"; continue; }
    log "etcd floor: $line"
    put "floor.$k" "$line"
done

# ---------------------------------------------------------------- 4. kill -9 of the leader gateway
gw_logs() { echo "$TMP/gw0/stderr,$TMP/gw1/stderr,$TMP/gw2/stderr"; }
ETCD_URLS="http://127.0.0.1:${M_CLIENT[0]},http://127.0.0.1:${M_CLIENT[1]},http://127.0.0.1:${M_CLIENT[2]}"
for ((n = 1; n <= FAILOVERS; n++)); do
    wait_gateways
    # odd runs: the client's gateway is next in line (the oldest campaign); even runs: the other
    # follower, which forwards to the new leader only once it has seen it
    FOLL=$(( (LEAD + 2 - n % 2) % 3 ))
    hist=$(etcd_count history); locks=$(etcd_count locks); audit=$(etcd_count audit)
    log "failover $n: kill -9 of leader g$LEAD; client on follower g$FOLL; store: $locks locks, $hist history records, $audit audit rows"
    line=$(python3 "$HERE/scaleout_failover.py" --urls "http://127.0.0.1:${G_PORT[$FOLL]}" --kill-pid "${GW_PID[$LEAD]}" \
        --logs "$(gw_logs)" --etcd "$ETCD_URLS" --election "$PREFIX/leader" --max-wait "$WAIT_S" --name "fo$n" \
        --jitter "$(awk -v t="$LEADER_TTL" 'BEGIN { print t / 3 }')") || FAILED+=("failover.$n")
    kill -KILL "${GW_PID[$LEAD]}" 2>/dev/null || true # already dead, unless the helper failed before its kill
    wait "${GW_PID[$LEAD]}" 2>/dev/null || true
    won=-
    for i in 0 1 2; do [[ $line == *"leader_after=http://127.0.0.1:${G_PORT[$i]}"* ]] && won=g$i; done
    log "failover $n: $line"
    put "failover.$n" "$line killed=g$LEAD client=g$FOLL won=$won history=$hist locks=$locks audit=$audit"
    start_gateway "$LEAD" # as a supervisor would: it comes back as a candidate
done

# ---------------------------------------------------------------- 5./6. kill -9 of an etcd member
slow_commits() { # commits of gateway port $1 that took more than $2 s (a bucket bound), so far
    local m
    m=$(curl -fsS -m 2 "http://127.0.0.1:$1/metrics" 2>/dev/null) || { echo 0; return; }
    awk -v b="leasegate_commit_seconds_bucket{le=\"$2\"}" '$1 == "leasegate_commit_seconds_count" { c = $2 } $1 == b { v = $2 } END { print c - v }' <<<"$m"
}
etcd_kill() { # $1 = leader|follower, $2 = run number: kill -9 of that member, client on the leader gateway
    local kind=$1 n=$2 victim urls i line s1 s5 lp
    wait_gateways
    wait_cluster
    victim=$(raft_leader)
    [[ $kind == follower ]] && victim=$(( (victim + 1) % 3 ))
    lp=${G_PORT[$LEAD]}
    urls="http://127.0.0.1:$lp"
    for i in 1 2; do urls+=",http://127.0.0.1:${G_PORT[$(( (LEAD + i) % 3 ))]}"; done
    s1=$(slow_commits "$lp" 1); s5=$(slow_commits "$lp" 5)
    log "etcd $kind kill $n: kill -9 of m$victim; client on leader gateway g$LEAD (then the others)"
    line=$(python3 "$HERE/scaleout_failover.py" --rotate --urls "$urls" --kill-pid "${M_PID[$victim]}" \
        --max-wait "$WAIT_S" --after 1 --name "e$kind$n" --jitter 0.5) || FAILED+=("etcd$kind.$n")
    kill -KILL "${M_PID[$victim]}" 2>/dev/null || true # (as above)
    wait "${M_PID[$victim]}" 2>/dev/null || true
    forget_pid "${M_PID[$victim]}"
    line+=" commits_over_1s=$(( $(slow_commits "$lp" 1) - s1 )) commits_over_5s=$(( $(slow_commits "$lp" 5) - s5 ))"
    # a gateway that exited meanwhile (lost its lease, or a commit failed) is reported here
    reap_gateways
    [[ -n $EXITED ]] && line+=" gateway_exit=$EXITED"
    log "etcd $kind kill $n: $line (Raft leader now m$(raft_leader))"
    put "etcd$kind.$n" "$line killed=m$victim gw=g$LEAD"
    start_member "$victim" existing
    wait_cluster
}
for ((n = 1; n <= ETCD_KILLS; n++)); do etcd_kill leader "$n"; done
for ((n = 1; n <= ETCD_FOLLOWER_KILLS; n++)); do etcd_kill follower "$n"; done
wait_gateways

T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
STEAL=$(awk -v a="$CPU_START" -v b="$(machine)" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[1] - x[1]; if (t > 0) printf "%.0f%% idle", 100 * (y[2] - x[2]) / t; else print "n/a" }')

# ---------------------------------------------------------------- table
fmt() { awk -v a="$1" 'BEGIN { if (a == "-" || a == "") print "-"; else if (a + 0 >= 100 || a == int(a)) printf "%.0f", a; else if (a + 0 >= 10) printf "%.1f", a; else printf "%.3g", a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
cells_row() { # label key ids...
    local label=$1 key=$2 out id
    shift 2
    out="| $label |"
    for id in "$@"; do out+=" $(fmt "$(get "$id" "$key")") |"; done
    echo "$out"
}
cpus() { echo "$(get "$1" gw_cpu_pct) / $(get "$1" etcd_cpu_pct) / $(get "$1" client_cpu_pct) / $(get "$1" machine_busy_pct)"; }
cpu_row() { local out="| CPU % gateways / etcd / client / machine busy, $1 |" id; shift; for id in "$@"; do out+=" $(cpus "$id") |"; done; echo "$out"; }

echo "### leasegate on etcd (3 members, 3 gateways) vs etcd's lock API vs SQLite — $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "One run, ${SECS} s per cell (+${WARMUP} s warm-up), lgbench (one epoll thread) on the same machine; distinct lock"
echo "names per client; \`--leader-ttl $LEADER_TTL\`${GATEWAY_ARGS:+, gateway flags \`$GATEWAY_ARGS\`}. etcd: default config (3 members on 127.0.0.1, WAL fsync before every answer)."
echo "etcd lock API pair = \`/v3/lock/lock\` + \`/v3/lock/unlock\` with one lease per client granted before timing."
echo
echo "| acquire+release pairs | leasegate via leader gateway | via follower gateway | etcd lock API (JSON) via Raft leader member | via follower member | etcd lock API as gRPC via Raft leader member | leasegate SQLite (1 gateway) | leader gw / etcd lock JSON (leader member) | leader gw / etcd lock gRPC |"
echo "|---|---|---|---|---|---|---|---|---|"
# etcd's CPU per pair, µs: what the members spent over the cell for each pair
etcd_us() { awk -v c="$(get "$1" etcd_cpu_pct)" -v p="$(get "$1" pairs_per_s)" 'BEGIN { if (c == "" || c == "-" || p + 0 == 0) print "-"; else printf "%.0f", c * 1e4 / p }'; }
for c in "$CLIENTS" 1; do
    s=$([[ $c == 1 ]] && echo 1 || echo 64)
    echo "| pairs/s, $c client$([[ $c == 1 ]] || echo s) | $(fmt "$(get lg_leader.$s pairs_per_s)") | $(fmt "$(get lg_follower.$s pairs_per_s)") | $(fmt "$(get etcd_leader.$s pairs_per_s)") | $(fmt "$(get etcd_follower.$s pairs_per_s)") | $(fmt "$(get etcd_grpc.$s pairs_per_s)") | $(fmt "$(get sqlite.$s pairs_per_s)") | **$(ratio "$(get lg_leader.$s pairs_per_s)" "$(get etcd_leader.$s pairs_per_s)")** | **$(ratio "$(get lg_leader.$s pairs_per_s)" "$(get etcd_grpc.$s pairs_per_s)")** |"
    echo "| pair p50 / p99 ms, $c client$([[ $c == 1 ]] || echo s) | $(fmt "$(get lg_leader.$s p50_ms)") / $(fmt "$(get lg_leader.$s p99_ms)") | $(fmt "$(get lg_follower.$s p50_ms)") / $(fmt "$(get lg_follower.$s p99_ms)") | $(fmt "$(get etcd_leader.$s p50_ms)") / $(fmt "$(get etcd_leader.$s p99_ms)") | $(fmt "$(get etcd_follower.$s p50_ms)") / $(fmt "$(get etcd_follower.$s p99_ms)") | $(fmt "$(get etcd_grpc.$s p50_ms)") / $(fmt "$(get etcd_grpc.$s p99_ms)") | $(fmt "$(get sqlite.$s p50_ms)") / $(fmt "$(get sqlite.$s p99_ms)") | - | - |"
    echo "| CPU % gateways / etcd / client / machine busy, $c client$([[ $c == 1 ]] || echo s) | $(cpus lg_leader.$s) | $(cpus lg_follower.$s) | $(cpus etcd_leader.$s) | $(cpus etcd_follower.$s) | $(cpus etcd_grpc.$s) | $(get sqlite.$s gw_cpu_pct) / - / $(get sqlite.$s client_cpu_pct) / $(get sqlite.$s machine_busy_pct) | - | - |"
    echo "| etcd CPU µs per pair, $c client$([[ $c == 1 ]] || echo s) | $(etcd_us lg_leader.$s) | $(etcd_us lg_follower.$s) | $(etcd_us etcd_leader.$s) | $(etcd_us etcd_follower.$s) | $(etcd_us etcd_grpc.$s) | - | - | - |"
    commits() { echo "$(get "$1" rows_per_commit) / $(get "$1" ms_per_commit) / $(get "$1" writer_busy_pct)"; }
    echo "| leader's commits: rows per commit / ms per commit / % of the time committing, $c client$([[ $c == 1 ]] || echo s) | $(commits lg_leader.$s) | $(commits lg_follower.$s) | - | - | - | $(commits sqlite.$s) | - | - |"
done
echo
echo "etcd keys written per pair (puts + deletes, from etcd's own counters): leasegate via the leader gateway $(get lg_leader.64 etcd_keys_per_pair) at $CLIENTS clients, $(get lg_leader.1 etcd_keys_per_pair) at 1; etcd's lock API $(get etcd_leader.64 etcd_keys_per_pair) / $(get etcd_leader.1 etcd_keys_per_pair)."
echo
echo "| reads (GET /v1/locks/NAME), which change nothing: on etcd each batch of them waits for a barrier | leader gateway, $CLIENTS clients | leader gateway, 1 client | SQLite, $CLIENTS clients |"
echo "|---|---|---|---|"
echo "| reads/s | $(fmt "$(get lg_read.64 pairs_per_s)") | $(fmt "$(get lg_read.1 pairs_per_s)") | $(fmt "$(get sqlite_read.64 pairs_per_s)") |"
echo "| read p50 / p99 ms | $(fmt "$(get lg_read.64 p50_ms)") / $(fmt "$(get lg_read.64 p99_ms)") | $(fmt "$(get lg_read.1 p50_ms)") / $(fmt "$(get lg_read.1 p99_ms)") | $(fmt "$(get sqlite_read.64 p50_ms)") / $(fmt "$(get sqlite_read.64 p99_ms)") |"
echo "| CPU % gateways / etcd / client / machine busy | $(cpus lg_read.64) | $(cpus lg_read.1) | $(get sqlite_read.64 gw_cpu_pct) / - / $(get sqlite_read.64 client_cpu_pct) / $(get sqlite_read.64 machine_busy_pct) |"
echo "| etcd CPU µs per read | $(etcd_us lg_read.64) | $(etcd_us lg_read.1) | - |"
echo
echo "| etcd alone, one client, transactions one after the other | 1 key | 8 keys | 64 keys | 128 keys |"
echo "|---|---|---|---|---|"
echo "| ms per transaction (p50 / mean) | $(get floor.1 p50_ms) / $(get floor.1 mean_ms) | $(get floor.8 p50_ms) / $(get floor.8 mean_ms) | $(get floor.64 p50_ms) / $(get floor.64 mean_ms) | $(get floor.128 p50_ms) / $(get floor.128 mean_ms) |"
echo "| keys/s | $(get floor.1 keys_per_s) | $(get floor.8 keys_per_s) | $(get floor.64 keys_per_s) | $(get floor.128 keys_per_s) |"
echo
echo "Errors (unexpected answers, dropped connections) per cell:$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^errors=/ && $i != "errors=0") s = s " " $1 ":" substr($i, 8) } END { print (s ? s : " none") }' "$RESULTS")."
echo
if ((FAILOVERS)); then
    echo "| kill -9 of the leader gateway (client on a follower) | kill → first grant, ms | kill → its election key gone / new leader elected / loaded, ms | last grant before kill, ms | failed requests meanwhile | who won | store at the kill | tokens increasing |"
    echo "|---|---|---|---|---|---|---|---|"
    for ((n = 1; n <= FAILOVERS; n++)); do
        id=failover.$n
        cw=$([[ $(get $id won) == "$(get $id client)" ]] && echo "the client's gateway" || echo "the other follower")
        echo "| $n: killed $(get $id killed), client on $(get $id client) | **$(get $id kill_to_grant_ms)** | $(get $id key_gone_ms) / $(get $id elected_ms) / $(get $id loaded_ms) | $(get $id last_grant_before_ms) | $(get $id failed) | $(get $id won) ($cw) | $(get $id locks) locks, $(get $id history) history and $(get $id audit) audit records | $(get $id tokens_increasing) |"
    done
    med=$(for ((n = 1; n <= FAILOVERS; n++)); do get failover.$n kill_to_grant_ms; done | grep -v '^-$' | sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.0f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "-" }')
    echo "| **median** | **$med** | | | | | | |"
    echo
fi
gwname() { sed "s|http://127.0.0.1:${G_PORT[0]}|g0|;s|http://127.0.0.1:${G_PORT[1]}|g1|;s|http://127.0.0.1:${G_PORT[2]}|g2|"; }
if ((ETCD_KILLS + ETCD_FOLLOWER_KILLS)); then
    echo "| kill -9 of an etcd member (client on the leader gateway) | kill → first grant, ms | longest gap between grants, ms | failed requests meanwhile | answered by | leader's commits > 1 s / > 5 s | gateway exits | tokens increasing |"
    echo "|---|---|---|---|---|---|---|---|"
    for kind in leader follower; do
        max=$ETCD_KILLS
        [[ $kind == follower ]] && max=$ETCD_FOLLOWER_KILLS
        for ((n = 1; n <= max; n++)); do
            id=etcd$kind.$n
            echo "| $n: $([[ $kind == leader ]] && echo "the Raft leader" || echo "a follower member") ($(get $id killed)), client on $(get $id gw) | **$(get $id kill_to_grant_ms)** | $(get $id max_gap_ms) | $(get $id failed) | $(get $id via | gwname) | $(get $id commits_over_1s) / $(get $id commits_over_5s) | $(get $id gateway_exit | sed 's/^-$/none/') | $(get $id tokens_increasing) |"
        done
        if ((max > 1)); then
            med=$(for ((n = 1; n <= max; n++)); do get etcd$kind.$n kill_to_grant_ms; done | grep -v '^-$' | sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.0f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "-" }')
            echo "| **median, Raft $kind** | **$med** | | | | | | |"
        fi
    done
    echo
fi
((${#UNEXPECTED[@]})) && { echo "Unexpected: ${UNEXPECTED[*]}."; echo; }
echo "Failed requests: acquire_503 = the gateway answered 503 (no leader known, leader unreachable, or no longer leading); acquire_conn = connection refused, reset or 3 s without an answer."
echo "leasegate binary: sha256 $LG_REV. Machine: nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load average before/after $LOAD_START / $LOAD_END; CPU over the run $STEAL; wall time $((T_END - T_START)) s; etcd $("$ETCD_BIN" --version 2>/dev/null | awk '/etcd Version/ { print $3 }')."
# leasegate's own cells must have no unexpected answer nor dropped connection
for id in $(awk '$1 ~ /^(sqlite|lg_)/ { for (i = 2; i <= NF; i++) if ($i ~ /^errors=/ && $i != "errors=0") print $1 }' "$RESULTS"); do
    FAILED+=("$id(errors)")
done
for id in $(awk '/ tokens_increasing=(0|False)( |$)/ { print $1 }' "$RESULTS"); do FAILED+=("$id(tokens)"); done
if ((${#FAILED[@]})); then
    echo "FAILED: ${FAILED[*]}"
    log "FAILED: ${FAILED[*]}"
    exit 1
fi
