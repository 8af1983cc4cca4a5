#!/usr/bin/env bash
# bench/compare.sh — leasegate against Redis 7, etcd 3.4 and ZooKeeper 3.8, against the ceiling
# of its own stack (bench/ceiling.c) and against the durable hand-off limit of the disk (a bare
# pwrite+fdatasync, bench/fdatasync.py), same machine, one run; and leasegate with its state in
# etcd (--store etcd://) on the same single etcd member as the etcd column.
#
#   bash bench/compare.sh                    # 5 s per run, median of 3 runs
#   RUNS=1 SECONDS=2 bash bench/compare.sh   # quick look
#   KINDS_ONLY=1 RUNS=5 bash bench/compare.sh   # only leasegate's exclusive, read and semaphore pairs
#   RUNS=1 SECONDS=0.5 STARTUP_LOCKS=10000 WAITERS=200 ETCD_WAITERS=50 ZK_WAITERS=50 bash bench/compare.sh
#                                            # CI's smoke (.ci/run): every column, about a minute
#
# Environment:
#   RUNS (3)  SECONDS (5; BENCH_SECONDS also works)  WARMUP (0.5)
#   LEASEGATE_BIN (build/leasegate of this checkout)   LGBENCH (path of a built lgbench; else built here)
#   CLIENTS (64)  WAITERS (10000, leasegate; past 10000 the server's waiter limits are raised and the
#   waiters come from several 127.0.0.x addresses; each needs a descriptor in lgbench and in the server)
#   ETCD_WAITERS (1000: etcd needs ~170 KB and ~8 ms each)
#   ZK_WAITERS (1000: each is a ZooKeeper session, two client threads here)
#   STARTUP_LOCKS (1000000)  RAW_OUT (file to keep every raw lgbench line)  KEEP_TMP (1: keep temp dir)
#   NO_INSTALL (1: never apt-get)   FSYNC_N (500: pwrite+fdatasync rounds of the limit's probe, per run)
#   KINDS_ONLY (1: only the three pairs workloads of leasegate, exclusive on distinct locks, read
#               on one lock, permits of one semaphore, each run on one server, and their table)
#
# Private server instances only: every server is started here on a free 127.0.0.1 port with a
# temporary data directory and stopped by PID on exit. System redis/etcd services are never
# touched or used. Prints one markdown table on stdout; progress and raw lines on stderr.
# Exits 1 (after the table) when any cell failed: a change that breaks a workload breaks the bench.
# Packages: what is missing of redis-server, etcd-server, zookeeper, libzookeeper-mt-dev and
# default-jdk-headless (jcmd) is installed with apt-get (scripts/deps.sh --bench installs them all).

# SECONDS is bash's own timer: read the caller's value before anything else runs.
_env_seconds=$(printenv SECONDS || true)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
RUNS=${RUNS:-3}
SECS=${BENCH_SECONDS:-${_env_seconds:-5}}
WARMUP=${WARMUP:-0.5}
CLIENTS=${CLIENTS:-64}
WAITERS=${WAITERS:-10000}
ETCD_WAITERS=${ETCD_WAITERS:-1000}
ZK_WAITERS=${ZK_WAITERS:-1000}
STARTUP_LOCKS=${STARTUP_LOCKS:-1000000}
FSYNC_N=${FSYNC_N:-500}
LEASEGATE_BIN=${LEASEGATE_BIN:-$ROOT/build/leasegate}

log() { printf 'compare: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $RUNS =~ ^[1-9][0-9]?$ ]] || die "RUNS must be 1..99"
[[ $SECS =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SECONDS must be a number"
for v in WAITERS ETCD_WAITERS ZK_WAITERS STARTUP_LOCKS FSYNC_N CLIENTS; do
    [[ ${!v} =~ ^[1-9][0-9]{0,7}$ ]] || die "$v must be a whole number >= 1"
done
[[ -x $LEASEGATE_BIN ]] || die "no leasegate binary at $LEASEGATE_BIN (set LEASEGATE_BIN)"

# ---------------------------------------------------------------- packages
KINDS_ONLY=${KINDS_ONLY:-0}
need_pkgs=()
if [[ $KINDS_ONLY != 1 ]]; then
    command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
    command -v etcd >/dev/null 2>&1 || need_pkgs+=(etcd-server)
fi
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
command -v cc >/dev/null 2>&1 || need_pkgs+=(gcc)
[[ -x /usr/share/zookeeper/bin/zkServer.sh ]] || need_pkgs+=(zookeeper)
[[ -r /usr/include/zookeeper/zookeeper.h ]] || need_pkgs+=(libzookeeper-mt-dev)
command -v jcmd >/dev/null 2>&1 || need_pkgs+=(default-jdk-headless)
pkg-config --exists libmicrohttpd jansson 2>/dev/null || need_pkgs+=(libmicrohttpd-dev libjansson-dev pkg-config)
if ((${#need_pkgs[@]})); then
    [[ ${NO_INSTALL:-0} == 1 ]] && die "missing: ${need_pkgs[*]} (NO_INSTALL=1)"
    SUDO=
    if [[ $(id -u) != 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "missing ${need_pkgs[*]}; run as root or install sudo"
        SUDO=sudo
    fi
    log "installing ${need_pkgs[*]}"
    # policy-rc.d-less machines may start the system services; we never use them.
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >&2 ||
        { $SUDO apt-get update -q >&2 && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >&2; }
fi

# ---------------------------------------------------------------- temp dir and cleanup
TMP=$(mktemp -d /tmp/lgbench-compare.XXXXXX)
PIDS=()
stop_pid() { # stop one PID we started: TERM, bounded wait, then KILL
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local pid
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do stop_pid "$pid"; done
    if [[ ${KEEP_TMP:-0} == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- lgbench
if [[ -z ${LGBENCH:-} ]]; then
    LGBENCH=$TMP/lgbench
    cc -std=c11 -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -o "$LGBENCH" "$HERE/lgbench.c" || die "cannot build lgbench"
fi
[[ -x $LGBENCH ]] || die "no lgbench at $LGBENCH"
CEILING=$TMP/ceiling
# shellcheck disable=SC2046
cc -std=c11 -O2 -Wall -Wextra -Werror -o "$CEILING" "$HERE/ceiling.c" $(pkg-config --cflags --libs libmicrohttpd jansson) ||
    die "cannot build the ceiling server"
ZKBENCH=$TMP/zkbench
cc -std=c11 -O2 -Wall -Wextra -Werror -o "$ZKBENCH" "$HERE/zkbench.c" -lzookeeper_mt -lpthread || die "cannot build zkbench"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if ((NOFILE < WAITERS + 200)); then
    log "ulimit -n is $NOFILE: waiters lowered from $WAITERS"
    WAITERS=$((NOFILE - 200))
fi

free_port() { "$LGBENCH" --free-port; }

# The waiters' server takes them all from one client address: its connection limits
# (--max-connections, and a peer's share of it) are raised to WAITERS, and past 10,000 its
# waiter limits too; past 25,000 the waiters connect from several 127.0.0.x addresses (one
# address has about 28,000 ephemeral ports).
LG_WAITER_FLAGS=(--max-connections "$((WAITERS + 1000))" --peer-max-connections "$((WAITERS + 100))"
    --peer-max-half-sent "$((WAITERS + 100))") # lgbench opens 200 connections before their requests
SOURCE_IPS=$((WAITERS / 25000 + 1))
if ((WAITERS > 10000)); then
    LG_WAITER_FLAGS+=(--max-waiters-per-lock "$((WAITERS + 100))" --max-waiters "$((WAITERS + 100))"
        --key-max-waiters "$((WAITERS + 100))")
fi

# ---------------------------------------------------------------- servers
LG_PID='' LG_PORT=''
LG_STORE=() # empty: SQLite in the run's directory; else the flags that name the store
start_leasegate() { # $1 = data dir name, rest = more serve flags
    local dir=$TMP/$1 i store
    shift
    mkdir -p "$dir"
    store=(--data "$dir/leasegate.db")
    ((${#LG_STORE[@]})) && store=("${LG_STORE[@]}")
    "$LEASEGATE_BIN" serve --listen 127.0.0.1:0 "${store[@]}" "$@" >"$dir/stdout" 2>"$dir/stderr" &
    LG_PID=$!
    PIDS+=("$LG_PID")
    for ((i = 0; i < 200; i++)); do
        LG_PORT=$(sed -n 's/^leasegate: listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$dir/stdout" 2>/dev/null || true) # the file appears once the shell started it
        [[ -n $LG_PORT ]] && return 0
        kill -0 "$LG_PID" 2>/dev/null || die "leasegate exited: $(cat "$dir/stderr")"
        sleep 0.05
    done
    die "leasegate did not report its port"
}
wait_leader() { # a gateway on etcd serves once it leads
    local i
    for ((i = 0; i < 300; i++)); do
        curl -fsS -m 1 "http://127.0.0.1:$LG_PORT/healthz" 2>/dev/null | grep -Eq '"role": *"leader"' && return 0
        kill -0 "$LG_PID" 2>/dev/null || die "leasegate on etcd exited: $(tail -3 "$TMP/$1/stderr")"
        sleep 0.1
    done
    die "leasegate on etcd did not lead within 30 s: $(tail -3 "$TMP/$1/stderr")"
}

REDIS_PID='' REDIS_PORT=''
start_redis() { # $1 = name, rest = durability flags
    local name=$1 dir=$TMP/$1 i
    shift
    mkdir -p "$dir"
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$dir" --save '' --daemonize no \
        --protected-mode yes --logfile "$dir/redis.log" "$@" >/dev/null 2>&1 &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    for ((i = 0; i < 100; i++)); do
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && return 0
        kill -0 "$REDIS_PID" 2>/dev/null || die "redis-server ($name) exited: $(tail -3 "$dir/redis.log")"
        sleep 0.05
    done
    die "redis-server ($name) did not answer PING"
}

ETCD_PID='' ETCD_PORT=''
start_etcd() { # $1 = name
    local dir=$TMP/$1 i peer
    mkdir -p "$dir"
    ETCD_PORT=$(free_port)
    peer=$(free_port)
    [[ $peer != "$ETCD_PORT" ]] || peer=$(free_port)
    etcd --name lgbench --data-dir "$dir/data" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "lgbench=http://127.0.0.1:$peer" --initial-cluster-state new \
        >"$dir/etcd.log" 2>&1 &
    ETCD_PID=$!
    PIDS+=("$ETCD_PID")
    for ((i = 0; i < 200; i++)); do
        curl -fsS -m 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"true"' && return 0
        kill -0 "$ETCD_PID" 2>/dev/null || die "etcd exited: $(tail -3 "$dir/etcd.log")"
        sleep 0.1
    done
    die "etcd did not become healthy"
}

CEIL_PID='' CEIL_PORT=''
start_ceiling() { # $1 = name
    local dir=$TMP/$1 i
    mkdir -p "$dir"
    "$CEILING" --listen 127.0.0.1:0 >"$dir/stdout" 2>"$dir/stderr" &
    CEIL_PID=$!
    PIDS+=("$CEIL_PID")
    for ((i = 0; i < 200; i++)); do
        CEIL_PORT=$(sed -n 's/^ceiling: listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$dir/stdout" 2>/dev/null || true)
        [[ -n $CEIL_PORT ]] && return 0
        kill -0 "$CEIL_PID" 2>/dev/null || die "ceiling exited: $(cat "$dir/stderr")"
        sleep 0.05
    done
    die "ceiling did not report its port"
}

# ZooKeeper as Debian ships it, its defaults kept (the transaction log fsynced before an
# answer: forceSync=yes); only the port, the data directory, no limit on connections per
# address (64 clients from 127.0.0.1) and no admin HTTP server.
ZK_PID='' ZK_PORT=''
start_zookeeper() { # $1 = name
    local dir=$TMP/$1 i
    mkdir -p "$dir/data"
    ZK_PORT=$(free_port)
    printf 'tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n' \
        "$dir/data" "$ZK_PORT" >"$dir/zoo.cfg"
    java -Dzookeeper.log.dir="$dir" -Dzookeeper.root.logger=WARN,CONSOLE \
        -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar" org.apache.zookeeper.server.quorum.QuorumPeerMain \
        "$dir/zoo.cfg" >"$dir/zk.log" 2>&1 &
    ZK_PID=$!
    PIDS+=("$ZK_PID")
    for ((i = 0; i < 300; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT") 2>/dev/null && { sleep 0.5; return 0; }
        kill -0 "$ZK_PID" 2>/dev/null || die "zookeeper exited: $(tail -3 "$dir/zk.log")"
        sleep 0.1
    done
    die "zookeeper did not listen"
}

zk() { # cell id, zkbench args: the same bookkeeping as bench()
    local id=$1 line
    shift
    if ! line=$(timeout 900 "$ZKBENCH" "$@" 2>>"$TMP/lgbench.stderr"); then
        FAILED+=("$id")
        log "FAILED: $id: zkbench $* (see below)"
        tail -5 "$TMP/lgbench.stderr" >&2
        return 0
    fi
    log "$id: $line"
    printf '%s %s\n' "$id" "$line" >>"$RESULTS"
    [[ -n ${RAW_OUT:-} ]] && printf 'run=%s id=%s %s\n' "$RUN" "$id" "$line" >>"$RAW_OUT"
    return 0
}

stop_server() { # stop and forget (so the exit trap never signals a recycled PID)
    local pid=$1 keep=() p
    stop_pid "$pid"
    for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# ---------------------------------------------------------------- running and collecting
RESULTS=$TMP/results.txt
: >"$RESULTS"
FAILED=()
bench() { # $1 = cell id, rest = lgbench args
    local id=$1 line
    shift
    if ! line=$(timeout 900 "$LGBENCH" "$@" 2>>"$TMP/lgbench.stderr"); then
        FAILED+=("$id")
        log "FAILED: $id: lgbench $* (see below)"
        tail -5 "$TMP/lgbench.stderr" >&2
        return 0
    fi
    log "$id: $line"
    printf '%s %s\n' "$id" "$line" >>"$RESULTS"
    [[ -n ${RAW_OUT:-} ]] && printf 'run=%s id=%s %s\n' "$RUN" "$id" "$line" >>"$RAW_OUT"
    return 0
}

# median over runs of KEY for cell ID; "-" when missing
med() {
    awk -v id="$1" -v key="$2" '
        $1 == id { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key && kv[2] != "-") v[n++] = kv[2] } }
        END {
            if (!n) { print "-"; exit }
            for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
            print (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2
        }' "$RESULTS"
}
# all values of KEY for ID, joined (for flags such as fifo_ok)
allv() { awk -v id="$1" -v key="$2" '$1 == id { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) s = s (s ? "," : "") kv[2] } } END { print (s ? s : "-") }' "$RESULTS"; }
fmt() { awk -v a="$1" 'BEGIN { if (a == "-") print "-"; else if (a + 0 >= 100 || a == int(a)) printf "%.0f", a; else if (a + 0 >= 10) printf "%.1f", a; else printf "%.3g", a }'; }

# A private copy: the binary under test cannot change under us if the tree is rebuilt meanwhile.
cp "$LEASEGATE_BIN" "$TMP/leasegate"
LG_REV="$(sha256sum "$LEASEGATE_BIN" | cut -c1-12), built $(date -u -r "$LEASEGATE_BIN" +%Y-%m-%dT%H:%MZ)"
LEASEGATE_BIN=$TMP/leasegate

COMMON=(--seconds "$SECS" --warmup "$WARMUP")
cpu_stat() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $9, $5 + $6 }' /proc/stat; } # total steal idle+iowait
psi() { [[ -r /proc/pressure/$1 ]] && awk '/^some/ { sub("avg60=", "", $3); print $3 "%" }' "/proc/pressure/$1" || echo n/a; }
CPU_START=$(cpu_stat)
PSI_START="cpu $(psi cpu), io $(psi io)"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)

# The exclusive lock's pairs, then a read lock's and a semaphore's, on one server in one run, so
# that what the machine is doing meanwhile weighs on the three alike. Read: every client takes
# the ONE lock NAME in read mode. Semaphore: every client takes a permit of the ONE semaphore
# NAME, whose limit is the number of clients (no acquire waits; every grant and release
# goes through one name's holder list).
kinds() {
    bench pairs64.lg "${L[@]}" --mode pairs --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs64read.lg "${L[@]}" --mode pairs --variant readlock --name "bench-read-$RUN" --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs64sem.lg "${L[@]}" --mode pairs --variant semaphore --name "bench-sem-$RUN" --clients "$CLIENTS" \
        "${COMMON[@]}"
}

if [[ $KINDS_ONLY == 1 ]]; then
    for ((RUN = 1; RUN <= RUNS; RUN++)); do
        log "---- run $RUN of $RUNS (${SECS}s per workload)"
        start_leasegate "lg-$RUN"
        L=(--target leasegate --port "$LG_PORT" --pid "$LG_PID")
        kinds
        stop_server "$LG_PID"
    done
    LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
    T_END=$(date +%s)
    echo "### leasegate: exclusive, read and semaphore pairs — ${RUNS} run(s) × ${SECS} s (+${WARMUP} s warm-up); $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "| $CLIENTS clients | pairs/s, median | pairs/s, each run | p50 ms | p99 ms | server CPU % |"
    echo "|---|---|---|---|---|---|"
    for k in "pairs64.lg:exclusive, distinct locks" "pairs64read.lg:read mode, all on one lock" \
        "pairs64sem.lg:permits of one semaphore (limit $CLIENTS)"; do
        id=${k%%:*}
        printf '| %s | %s | %s | %s | %s | %s |\n' "${k#*:}" "$(fmt "$(med "$id" pairs_per_s)")" \
            "$(allv "$id" pairs_per_s | sed 's/,/, /g')" "$(fmt "$(med "$id" p50_ms)")" "$(fmt "$(med "$id" p99_ms)")" \
            "$(med "$id" server_cpu_pct)"
    done
    echo
    echo "Errors per cell: $(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^errors=/ && $i != "errors=0") s = s " " $1 ":" substr($i, 8) } END { print (s ? s : " none") }' "$RESULTS")."
    echo "leasegate binary: sha256 $LG_REV. Load average before/after $LOAD_START / $LOAD_END; wall time $((T_END - T_START)) s; nproc $(nproc)."
    ((${#FAILED[@]} == 0)) || { echo "FAILED cells: ${FAILED[*]}"; exit 1; }
    exit 0
fi

# 1M-lock database for the start-up test (generated once, copied per run), made by the binary
# under test: it creates its schema on an empty file, then gen_db fills the tables it made.
log "generating a $STARTUP_LOCKS-lock database"
python3 "$HERE/gen_db.py" "$TMP/startup-template.db" --locks "$STARTUP_LOCKS" --binary "$LEASEGATE_BIN" 2>&1 | sed 's/^/compare: /' >&2


# The durable limit's floor: pwrite+fdatasync on the data directory's file system ($TMP), one
# line per run (cell fsync), taken just before the one-lock cell that it bounds.
fsync_probe() {
    local line
    if ! line=$(python3 "$HERE/fdatasync.py" "$TMP" --n "$FSYNC_N" 2>>"$TMP/lgbench.stderr"); then
        FAILED+=(fsync)
        log "FAILED: fdatasync probe"
        return 0
    fi
    log "fsync: $line"
    printf 'fsync %s\n' "$line" >>"$RESULTS"
    [[ -n ${RAW_OUT:-} ]] && printf 'run=%s id=fsync %s\n' "$RUN" "$line" >>"$RAW_OUT"
    return 0
}

for ((RUN = 1; RUN <= RUNS; RUN++)); do
    log "---- run $RUN of $RUNS (${SECS}s per workload)"

    # leasegate
    start_leasegate "lg-$RUN"
    L=(--target leasegate --port "$LG_PORT" --pid "$LG_PID")
    kinds
    bench pairs1.lg "${L[@]}" --mode pairs --clients 1 "${COMMON[@]}"
    fsync_probe
    bench contend.lg "${L[@]}" --mode contend --clients "$CLIENTS" "${COMMON[@]}"
    stop_server "$LG_PID"
    start_leasegate "lgw-$RUN" "${LG_WAITER_FLAGS[@]}" # fresh process for the memory measurement
    bench waiters.lg --target leasegate --port "$LG_PORT" --pid "$LG_PID" --mode waiters --clients "$WAITERS" \
        --source-ips "$SOURCE_IPS"
    stop_server "$LG_PID"
    cp "$TMP/startup-template.db" "$TMP/startup-$RUN.db"
    bench startup.lg --target leasegate --mode startup --bin "$LEASEGATE_BIN" --data "$TMP/startup-$RUN.db"
    rm -f "$TMP/startup-$RUN.db"*

    # the ceiling: the same requests through the same libraries and answer path, no lock table, no commit
    start_ceiling "ceiling-$RUN"
    C=(--target leasegate --port "$CEIL_PORT" --pid "$CEIL_PID")
    bench pairs64.ceil "${C[@]}" --mode pairs --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs1.ceil "${C[@]}" --mode pairs --clients 1 "${COMMON[@]}"
    stop_server "$CEIL_PID"

    # Redis, no fsync per write (appendonly no, no RDB snapshots)
    start_redis "redis-nofsync-$RUN" --appendonly no
    R=(--target redis --port "$REDIS_PORT" --pid "$REDIS_PID")
    bench pairs64.redis "${R[@]}" --mode pairs --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs1.redis "${R[@]}" --mode pairs --clients 1 "${COMMON[@]}"
    bench contend.redis "${R[@]}" --mode contend --clients "$CLIENTS" "${COMMON[@]}"
    stop_server "$REDIS_PID"

    # Redis, fsync per write (AOF, appendfsync always)
    start_redis "redis-fsync-$RUN" --appendonly yes --appendfsync always
    R=(--target redis --port "$REDIS_PORT" --pid "$REDIS_PID")
    bench pairs64.redisfs "${R[@]}" --mode pairs --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs1.redisfs "${R[@]}" --mode pairs --clients 1 "${COMMON[@]}"
    bench contend.redisfs "${R[@]}" --mode contend --clients "$CLIENTS" "${COMMON[@]}"
    stop_server "$REDIS_PID"

    # etcd (single member, default: WAL fsync before every commit is acknowledged)
    start_etcd "etcd-$RUN"
    E=(--target etcd --port "$ETCD_PORT" --pid "$ETCD_PID")
    bench pairs64.etcd "${E[@]}" --mode pairs --variant txn --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs1.etcd "${E[@]}" --mode pairs --variant txn --clients 1 "${COMMON[@]}"
    bench pairs64.etcdlock "${E[@]}" --mode pairs --variant lock --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs1.etcdlock "${E[@]}" --mode pairs --variant lock --clients 1 "${COMMON[@]}"
    bench contend.etcd "${E[@]}" --mode contend --clients "$CLIENTS" "${COMMON[@]}"
    # leasegate with its state in the same etcd member, a lock space of its own per run
    # (--new-lock-space: the prefix is fresh); one gateway: it leads, and commits each batch as
    # one transaction fenced on its leader key
    LG_STORE=(--store "etcd://127.0.0.1:$ETCD_PORT/lgbench-$RUN" --new-lock-space)
    start_leasegate "lgetcd-$RUN"
    LG_STORE=()
    wait_leader "lgetcd-$RUN"
    LE=(--target leasegate --port "$LG_PORT" --pid "$LG_PID")
    bench pairs64.lgetcd "${LE[@]}" --mode pairs --clients "$CLIENTS" "${COMMON[@]}"
    bench pairs1.lgetcd "${LE[@]}" --mode pairs --clients 1 "${COMMON[@]}"
    bench contend.lgetcd "${LE[@]}" --mode contend --clients "$CLIENTS" "${COMMON[@]}"
    stop_server "$LG_PID"
    stop_server "$ETCD_PID"
    start_etcd "etcdw-$RUN" # fresh process for the memory measurement
    bench waiters.etcd --target etcd --port "$ETCD_PORT" --pid "$ETCD_PID" --mode waiters --clients "$ETCD_WAITERS"
    stop_server "$ETCD_PID"

    # ZooKeeper (standalone, default durability), its lock recipe from libzookeeper-mt
    start_zookeeper "zk-$RUN"
    Z=(--hosts "127.0.0.1:$ZK_PORT" --pid "$ZK_PID" --seconds "$SECS" --warmup "$WARMUP")
    zk pairs64.zk "${Z[@]}" --mode pairs --clients "$CLIENTS"
    zk pairs1.zk "${Z[@]}" --mode pairs --clients 1
    zk contend.zk "${Z[@]}" --mode contend --clients "$CLIENTS"
    stop_server "$ZK_PID"
    start_zookeeper "zkw-$RUN" # fresh process for the memory measurement
    zk waiters.zk --hosts "127.0.0.1:$ZK_PORT" --pid "$ZK_PID" --mode waiters --clients "$ZK_WAITERS"
    stop_server "$ZK_PID"
done

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
PSI_END="cpu $(psi cpu), io $(psi io)"
STEAL=$(awk -v a="$CPU_START" -v b="$(cpu_stat)" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[1] - x[1]; if (t > 0) printf "%.1f%% steal, %.0f%% idle", 100 * (y[2] - x[2]) / t, 100 * (y[3] - x[3]) / t; else print "n/a" }')
T_END=$(date +%s)

# ---------------------------------------------------------------- table
ratio() { # leasegate / peer
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}
# The durable hand-off limit: one grant after another, each committed (one fdatasync) before its
# answer and each answer one request's round trip of the ceiling away from the next commit, so
# grants/s <= 1 / (fdatasync + round trip). A 1-client pair is two such commits, one after the other.
FSYNC_US=$(med fsync fdatasync_mean_us)
RTT_US=$(awk -v p="$(med pairs1.ceil pairs_per_s)" 'BEGIN { if (p == "-" || p + 0 == 0) print "-"; else printf "%.1f", 1e6 / (2 * p) }')
LIMIT_GRANTS=$(awk -v f="$FSYNC_US" -v r="$RTT_US" 'BEGIN { if (f == "-" || r == "-") print "-"; else printf "%.0f", 1e6 / (f + r) }')
LIMIT_PAIRS1=$(awk -v g="$LIMIT_GRANTS" 'BEGIN { if (g == "-") print "-"; else printf "%.0f", g / 2 }')
# A row: label, key, then the cells: leasegate, ceiling, limit, Redis A, Redis B, etcd, ZooKeeper,
# leasegate on etcd; a cell is a cell id, "-" for none, or =VALUE for a figure computed here.
# Ratios are leasegate ÷ each peer, and leasegate on etcd ÷ etcd.
cell_value() { if [[ $1 == =* ]]; then echo "${1#=}"; elif [[ $1 == - ]]; then echo -; else med "$1" "$2"; fi; }
row() {
    local label=$1 key=$2 v=() r=() i
    shift 2
    for i in "$@"; do v+=("$(cell_value "$i" "$key")"); done
    for i in 1 2 3 4 5 6; do r+=("$(ratio "${v[0]}" "${v[$i]}")"); done
    r+=("$(ratio "${v[7]}" "${v[5]}")")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$label" \
        "$(fmt "${v[0]}")" "$(fmt "${v[1]}")" "$(fmt "${v[2]}")" "$(fmt "${v[3]}")" "$(fmt "${v[4]}")" "$(fmt "${v[5]}")" \
        "$(fmt "${v[6]}")" "$(fmt "${v[7]}")" "${r[0]}" "${r[1]}" "${r[2]}" "${r[3]}" "${r[4]}" "${r[5]}" "${r[6]}"
}
kb_per() { awk -v a="$1" 'BEGIN { if (a == "-") print "-"; else printf "%.1f", a / 1024 }'; }

echo "### leasegate vs its ceiling, the durable limit, Redis, etcd and ZooKeeper — ${RUNS} run(s) × ${SECS} s (+${WARMUP} s warm-up), median; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "Durability: **leasegate** SQLite WAL synchronous=FULL, group commit (fsync before every answer that reveals a change)."
echo "**ceiling** bench/ceiling.c: libmicrohttpd and jansson answering the same requests through the same suspend/resume path, no lock table, nothing stored."
echo "**limit** the durable hand-off limit: 1 / (a bare pwrite+fdatasync on the data directory's file system, mean $(fmt "$FSYNC_US") µs (p50 $(fmt "$(med fsync fdatasync_p50_us)"), p99 $(fmt "$(med fsync fdatasync_p99_us)")) + the ceiling's one-request round trip, $(fmt "$RTT_US") µs); a 1-client pair is two of them."
echo "**Redis A** \`--appendonly no --save ''\` (nothing fsynced; a crash loses every lock). **Redis B** \`--appendonly yes --appendfsync always\` (AOF fsync per write)."
echo "**etcd** single member, default config (WAL fsync per raft batch before the answer). Redis has no waiting: contenders spin on \`SET NX\`."
echo "**ZooKeeper** standalone, Debian's defaults (transaction log fsynced before an answer), its lock recipe (ephemeral sequential node, watch on the predecessor) from libzookeeper-mt, one session and thread per client."
echo "**leasegate on etcd** one gateway, \`--store etcd://\` on the etcd column's member: it leads, and commits each batch as one transaction fenced on its leader key before any answer (docs/high-availability.md)."
echo
echo "| workload | leasegate | ceiling | limit | Redis A (no fsync) | Redis B (fsync always) | etcd | ZooKeeper | leasegate on etcd | lg/ceiling | lg/limit | lg/Redis A | lg/Redis B | lg/etcd | lg/ZK | lg on etcd / etcd |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
row "pairs/s, $CLIENTS clients, distinct locks (etcd: txn put-if-absent + delete)" pairs_per_s pairs64.lg pairs64.ceil - pairs64.redis pairs64.redisfs pairs64.etcd pairs64.zk pairs64.lgetcd
row "pair p50 ms, $CLIENTS clients" p50_ms pairs64.lg pairs64.ceil - pairs64.redis pairs64.redisfs pairs64.etcd pairs64.zk pairs64.lgetcd
row "pair p99 ms, $CLIENTS clients" p99_ms pairs64.lg pairs64.ceil - pairs64.redis pairs64.redisfs pairs64.etcd pairs64.zk pairs64.lgetcd
cpu_row() { # server CPU microseconds per pair (median CPU % / median pairs/s); "-" for a missing cell
    local ids=("$@") v=() c=() i p cp r=()
    for i in "${ids[@]}"; do
        if [[ $i == - ]]; then cp=-; p=-; else cp=$(med "$i" server_cpu_pct); p=$(med "$i" pairs_per_s); fi
        c+=("$cp")
        v+=("$(awk -v c="$cp" -v p="$p" 'BEGIN { if (c == "-" || p == "-" || p + 0 == 0) print "-"; else printf "%.1f", c / 100 / p * 1e6 }')")
    done
    for i in 1 2 3 4 5 6; do r+=("$(ratio "${v[0]}" "${v[$i]}")"); done
    r+=("$(ratio "${v[7]}" "${v[5]}")")
    printf '| server CPU µs per pair, %s clients (CPU %% %s / %s / %s / %s / %s / %s; on etcd: the gateway %s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$CLIENTS" \
        "${c[0]}" "${c[1]}" "${c[3]}" "${c[4]}" "${c[5]}" "${c[6]}" "${c[7]}" \
        "${v[0]}" "${v[1]}" "${v[2]}" "${v[3]}" "${v[4]}" "${v[5]}" "${v[6]}" "${v[7]}" "${r[0]}" "${r[1]}" "${r[2]}" "${r[3]}" "${r[4]}" "${r[5]}" "${r[6]}"
}
cpu_row pairs64.lg pairs64.ceil - pairs64.redis pairs64.redisfs pairs64.etcd pairs64.zk pairs64.lgetcd
row "pairs/s, $CLIENTS clients, read mode, all on ONE lock (leasegate only)" pairs_per_s pairs64read.lg - - - - - - -
row "pairs/s, $CLIENTS clients, permits of ONE semaphore, limit $CLIENTS (leasegate only)" pairs_per_s pairs64sem.lg - - - - - - -
row "pairs/s, 1 client (limit: two durable commits per pair)" pairs_per_s pairs1.lg pairs1.ceil "=$LIMIT_PAIRS1" pairs1.redis pairs1.redisfs pairs1.etcd pairs1.zk pairs1.lgetcd
row "pair p50 ms, 1 client" p50_ms pairs1.lg pairs1.ceil - pairs1.redis pairs1.redisfs pairs1.etcd pairs1.zk pairs1.lgetcd
row "pairs/s, $CLIENTS clients, etcd lock API (lease grant+lock+unlock+revoke)" pairs_per_s pairs64.lg - - - - pairs64.etcdlock - pairs64.lgetcd
row "pair p99 ms, $CLIENTS clients, etcd lock API" p99_ms pairs64.lg - - - - pairs64.etcdlock - pairs64.lgetcd
row "pairs/s, 1 client, etcd lock API" pairs_per_s pairs1.lg - - - - pairs1.etcdlock - pairs1.lgetcd
row "grants/s, $CLIENTS clients on ONE lock (lg: long-poll; Redis: spin; etcd: lock API; ZK: recipe; limit: 1 / (fdatasync + round trip))" grants_per_s contend.lg - "=$LIMIT_GRANTS" contend.redis contend.redisfs contend.etcd contend.zk contend.lgetcd
row "handoff p50 ms (release sent → next grant received)" handoff_p50_ms contend.lg - - contend.redis contend.redisfs contend.etcd contend.zk contend.lgetcd
row "handoff p99 ms" handoff_p99_ms contend.lg - - contend.redis contend.redisfs contend.etcd contend.zk contend.lgetcd
mm() { local a b; a=$(med "$1" grants_min); b=$(med "$1" grants_max); [[ $a == - ]] && echo - || echo "$(fmt "$a") / $(fmt "$b")"; }
printf '| fairness: fewest / most grants to one client | %s | - | - | %s | %s | %s | %s | %s | - | - | - | - | - | - | - |\n' "$(mm contend.lg)" "$(mm contend.redis)" "$(mm contend.redisfs)" "$(mm contend.etcd)" "$(mm contend.zk)" "$(mm contend.lgetcd)"
row "Redis SET attempts per grant (spinning)" attempts_per_grant - - - contend.redis contend.redisfs - - -
lgw=$(med waiters.lg bytes_per_waiter); ew=$(med waiters.etcd bytes_per_waiter); zw=$(med waiters.zk bytes_per_waiter)
printf '| server KB per waiter (lg: %s waiters; etcd: %s lock-API waiters; ZK: %s sessions, RSS after a forced GC) | %s | - | - | n/a | n/a | %s | %s | - | - | - | - | - | %s | %s | - |\n' \
    "$WAITERS" "$ETCD_WAITERS" "$ZK_WAITERS" "$(kb_per "$lgw")" "$(kb_per "$ew")" "$(kb_per "$zw")" "$(ratio "$lgw" "$ew")" "$(ratio "$lgw" "$zw")"
row "wake one waiter, ms (holder releases → first waiter granted)" wake_ms waiters.lg - - - - waiters.etcd - -
printf '| start-up with %s locks, ms (exec → /healthz 200) | %s | - | - | n/a | n/a | n/a | n/a | - | - | - | - | - | - | - | - |\n' "$STARTUP_LOCKS" "$(fmt "$(med startup.lg startup_ms)")"
printf '| RSS after start-up with %s locks, MB | %s | - | - | n/a | n/a | n/a | n/a | - | - | - | - | - | - | - | - |\n' "$STARTUP_LOCKS" \
    "$(awk -v a="$(med startup.lg server_rss_kb)" 'BEGIN { if (a == "-") print "-"; else printf "%.0f", a / 1024 }')"
echo
echo "Checks: leasegate FIFO order kept in every contend run (each grant to the head of the server's queue as its events build it, and the grants the clients saw in the same order): $(allv contend.lg fifo_ok) (violations: $(allv contend.lg fifo_violations); grants checked: $(allv contend.lg fifo_checked); grants out of send order, which two connections' near-simultaneous acquires allow: $(allv contend.lg send_order_inversions)); tokens increasing: $(allv contend.lg token_ok). On etcd: FIFO $(allv contend.lgetcd fifo_ok) (violations: $(allv contend.lgetcd fifo_violations)); tokens increasing: $(allv contend.lgetcd token_ok)."
echo "ZooKeeper grants in sequence-number order: $(allv contend.zk fifo_ok) (violations: $(allv contend.zk fifo_violations))."
echo "etcd lock-API grant order = send order: $(allv contend.etcd fifo_ok) (violations: $(allv contend.etcd fifo_violations); the gRPC gateway may reorder near-simultaneous requests)."
echo "Errors (unexpected answers, dropped connections) per cell: $(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^errors=/ && $i != "errors=0") s = s " " $1 ":" substr($i, 8) } END { print (s ? s : " none") }' "$RESULTS")."
echo "Start-up check: locks loaded $(allv startup.lg locks), held $(allv startup.lg locks_held)."
echo "Ratios are leasegate ÷ peer: above 1 is better for leasegate in rates, worse in latencies and memory."
echo "The runs of each cell (leasegate): 64-client pairs/s $(allv pairs64.lg pairs_per_s); 1-client $(allv pairs1.lg pairs_per_s); grants/s $(allv contend.lg grants_per_s). Redis B: $(allv pairs64.redisfs pairs_per_s); $(allv pairs1.redisfs pairs_per_s); $(allv contend.redisfs grants_per_s). fdatasync mean µs: $(allv fsync fdatasync_mean_us). leasegate on etcd: $(allv pairs64.lgetcd pairs_per_s); $(allv pairs1.lgetcd pairs_per_s); etcd txn: $(allv pairs64.etcd pairs_per_s); $(allv pairs1.etcd pairs_per_s)."
echo "leasegate binary: sha256 $LG_REV. Machine during the run: load average before/after $LOAD_START / $LOAD_END; CPU over the run $STEAL; pressure (PSI some, avg60) before: $PSI_START, after: $PSI_END; wall time $((T_END - T_START)) s; nproc $(nproc)."
# leasegate's own cells must have no unexpected answer nor dropped connection
for id in $(awk '$1 ~ /\.lg(etcd)?$/ { for (i = 2; i <= NF; i++) if ($i ~ /^errors=/ && $i != "errors=0") print $1 }' "$RESULTS"); do
    FAILED+=("$id(errors)")
done
if ((${#FAILED[@]})); then
    echo "FAILED cells: ${FAILED[*]}"
    log "FAILED cells: ${FAILED[*]} (lgbench's errors in the lines above)"
    exit 1
fi
