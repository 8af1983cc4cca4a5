#!/usr/bin/env bash
# leasegate example worker: bash + curl (no jq).
#
# ITERATIONS times, it does the classic fenced read-modify-write:
#   1. acquire LOCK, long-polling up to WAIT_MS for it     POST /v1/locks/LOCK/acquire
#   2. renew the lease once (what a long job does every TTL/3)  POST /v1/locks/LOCK/renew
#   3. read the counter through the guard (404 means 0)    GET  /store/KEY
#   4. write counter+1 through the guard, with the lease   PUT  /store/KEY
#        Fencing-Lease: <lease from acquire>
#   5. release the lock                                     POST /v1/locks/LOCK/release
#
# The guard (`leasegate serve --guard /store/=http://storage/`) binds /store/KEY to the
# lock named KEY, so LOCK defaults to KEY. It forwards the PUT only while our lease
# holds that lock, so a worker that stalled past its lease gets 409 stale_token instead
# of overwriting a newer value. (A LOCK other than KEY needs a guard with one lock for
# the whole prefix: --guard /store/=http://storage/,lock=LOCK.)
#
# Configuration (environment variables, all optional):
#   LEASEGATE_SERVER  base URL of leasegate          (default http://127.0.0.1:7400)
#   KEY               object name under the guard    (default counter)
#   LOCK              lock name                      (default: KEY)
#   ITERATIONS        how many increments            (default 1)
#   OWNER             owner label shown to others    (default shell-<host>-<pid>)
#   STORE_PREFIX      the guard's path prefix        (default /store/)
#   TTL_MS            lease time-to-live             (default 15000)
#   WAIT_MS           how long acquire may wait      (default 60000)
#
# Exit status: 0 on success; 1 with a message on stderr on any unexpected HTTP status
# (or a connection failure); 2 on a bad configuration value.

set -euo pipefail

SERVER="${LEASEGATE_SERVER:-http://127.0.0.1:7400}"
SERVER="${SERVER%/}"
KEY="${KEY:-counter}"
LOCK="${LOCK:-$KEY}"   # the guard binds /store/KEY to lock KEY
ITERATIONS="${ITERATIONS:-1}"
OWNER="${OWNER:-shell-$(hostname 2>/dev/null || echo host)-$$}"
STORE_PREFIX="${STORE_PREFIX:-/store/}"
TTL_MS="${TTL_MS:-15000}"
WAIT_MS="${WAIT_MS:-60000}"

die() { echo "worker.sh [$OWNER]: $*" >&2; exit 1; }

for var in ITERATIONS TTL_MS WAIT_MS; do
    [[ "${!var}" =~ ^[0-9]+$ ]] || { echo "worker.sh: $var must be a whole number, got '${!var}'" >&2; exit 2; }
done
# OWNER goes into a JSON string below; keep it to characters that need no escaping.
[[ "$OWNER" =~ ^[A-Za-z0-9._:@/-]{1,128}$ ]] || { echo "worker.sh: OWNER must match [A-Za-z0-9._:@/-]{1,128}" >&2; exit 2; }

STORE_URL="$SERVER/${STORE_PREFIX#/}"
STORE_URL="${STORE_URL%/}/$KEY"

# Response bodies go to a private temporary file. On exit it is removed, and if we
# are leaving while holding the lock (some step failed), the lease is released on a
# best-effort basis so waiters need not wait for the TTL to run out.
BODY="$(mktemp "${TMPDIR:-/tmp}/leasegate-worker.XXXXXX")"
HELD_LEASE=""
cleanup() {
    if [[ -n "$HELD_LEASE" ]]; then
        curl -s -o /dev/null --max-time 5 -X POST -H 'Content-Type: application/json' \
            --data-binary "{\"lease\":\"$HELD_LEASE\"}" "$SERVER/v1/locks/$LOCK/release" || true
    fi
    rm -f "$BODY"
}
trap cleanup EXIT
trap 'exit 130' INT   # make Ctrl-C and kill run the EXIT trap too
trap 'exit 143' TERM

# http METHOD URL [curl args...] -> prints the HTTP status; the body is in $BODY.
# curl's own failures (connection refused, timeout) end the script with a message.
http() {
    local method="$1" url="$2"; shift 2
    local status
    if ! status="$(curl -sS -o "$BODY" -w '%{http_code}' -X "$method" "$@" "$url")"; then
        die "$method $url: request failed (is leasegate running at $SERVER?)"
    fi
    echo "$status"
}

# post_json PATH JSON [max seconds] -> status; JSON body in $BODY.
post_json() {
    http POST "$SERVER$1" -H 'Content-Type: application/json' --data-binary "$2" --max-time "${3:-30}"
}

# json_str FIELD / json_int FIELD: the value of "FIELD" in $BODY. leasegate answers
# compact JSON and we only read fields that occur once in our own successful answers
# (our metadata uses other names), so one sed expression is enough; no jq needed.
json_str() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" "$BODY"; }
json_int() { sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p" "$BODY"; }

unexpected() { # unexpected STEP STATUS
    die "$1: unexpected HTTP $2: $(head -c 500 "$BODY")"
}

for ((i = 1; i <= ITERATIONS; i++)); do
    # 1. Acquire. The request stays open until we are granted the lock (waiters are
    #    served in arrival order) or WAIT_MS passes (409 lock_held).
    status="$(post_json "/v1/locks/$LOCK/acquire" \
        "{\"owner\":\"$OWNER\",\"ttl_ms\":$TTL_MS,\"wait_ms\":$WAIT_MS,\"metadata\":{\"example\":\"shell\",\"pid\":$$}}" \
        $((WAIT_MS / 1000 + 30)))"
    case "$status" in
        200) ;;
        409) die "acquire: lock '$LOCK' still held after waiting ${WAIT_MS} ms: $(head -c 500 "$BODY")" ;;
        *) unexpected acquire "$status" ;;
    esac
    LEASE="$(json_str lease)"
    TOKEN="$(json_int token)"
    [[ -n "$LEASE" && -n "$TOKEN" ]] || die "acquire: no lease/token in answer: $(head -c 500 "$BODY")"
    HELD_LEASE="$LEASE"

    # 2. Renew once. A real job that runs longer than a third of TTL_MS would repeat
    #    this every TTL_MS/3 (see the Python and Node workers for a background renewer).
    #    409 not_holder here means the lease already expired: stop, do not write.
    status="$(post_json "/v1/locks/$LOCK/renew" "{\"lease\":\"$LEASE\"}")"
    [[ "$status" == 200 ]] || unexpected renew "$status"

    # 3. Read the counter through the guard. Reads need no lease; a missing object is 0.
    status="$(http GET "$STORE_URL" --max-time 30)"
    case "$status" in
        200) VALUE="$(tr -d '[:space:]' < "$BODY")"
             [[ "$VALUE" =~ ^[0-9]+$ ]] || die "read: '$KEY' does not hold a number: $(head -c 100 "$BODY")" ;;
        404) VALUE=0 ;;
        *) unexpected read "$status" ;;
    esac

    # 4. Write counter+1 through the guard with our lease: it proves that we hold the
    #    lock /store/KEY is bound to. 409 stale_token: our lease no longer holds it
    #    (someone newer does); 428: no lease sent.
    NEW=$((10#$VALUE + 1))   # 10#: a stored "010" is ten, not octal
    status="$(http PUT "$STORE_URL" --max-time 30 \
        -H "Fencing-Lease: $LEASE" \
        -H 'Content-Type: text/plain' --data-binary "$NEW")"
    case "$status" in
        200|201|204) ;;
        *) unexpected write "$status" ;;
    esac

    # 5. Release, so the next waiter is woken at once (not when our TTL runs out).
    HELD_LEASE=""
    status="$(post_json "/v1/locks/$LOCK/release" "{\"lease\":\"$LEASE\"}")"
    [[ "$status" == 200 ]] || unexpected release "$status"

    echo "$OWNER: iteration $i/$ITERATIONS token $TOKEN: $KEY $VALUE -> $NEW"
done
