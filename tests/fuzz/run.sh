#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan, UBSan) in build-fuzz/ and runs each
# for SECONDS_PER_TARGET seconds (default 60) on a copy of its seed corpus.
# Exits non-zero when a target finds a crash, a sanitizer report, a violated
# property, a leak or a timeout; the input is kept under build-fuzz/artifacts/.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET]
#   FUZZ_TARGETS="fuzz_locktab fuzz_fence" tests/fuzz/run.sh 300   # some targets only
#
# Installs clang, libclang-rt-14-dev (libFuzzer) and the build dependencies with
# apt-get when they are missing (Debian 12; root, or sudo).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
case "$SECS" in '' | *[!0-9]*) echo "usage: tests/fuzz/run.sh [SECONDS_PER_TARGET]" >&2; exit 2 ;; esac
ALL_TARGETS="fuzz_locktab fuzz_rwsem fuzz_fence fuzz_guardpath fuzz_formscan fuzz_rawjson fuzz_body fuzz_cli fuzz_etcdtxn"
TARGETS=${FUZZ_TARGETS:-$ALL_TARGETS}
BUILD=build-fuzz

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! command -v cmake >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1 ||
   ! pkg-config --exists libmicrohttpd jansson sqlite3 uuid libcurl libnghttp2; then
  echo "== fuzz: installing the build dependencies (scripts/deps.sh)"
  sh scripts/deps.sh
fi
if ! command -v clang >/dev/null 2>&1 || ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
  echo "== fuzz: installing clang and libclang-rt-14-dev (libFuzzer)"
  apt_install clang libclang-rt-14-dev
fi

echo "== fuzz: building $BUILD (clang, -fsanitize=fuzzer,address,undefined)"
CC=clang cmake -B "$BUILD" -DLEASEGATE_FUZZ=ON -DLEASEGATE_TESTS=OFF >/dev/null
cmake --build "$BUILD" --target fuzz -j"$(nproc)" >/dev/null

WORK=$(mktemp -d "${TMPDIR:-/tmp}/leasegate-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failed=0
summary=""
for t in $TARGETS; do
  bin="$BUILD/tests/fuzz/$t"
  [ -x "$bin" ] || { echo "== fuzz: no such target: $t" >&2; exit 2; }
  # A copy of the seeds: what the run learns stays out of the committed corpus.
  mkdir -p "$WORK/$t"
  cp tests/fuzz/corpus/"$t"/* "$WORK/$t"/
  artifacts="$BUILD/artifacts/$t"
  rm -rf "$artifacts"
  mkdir -p "$artifacts"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  echo "== fuzz: $t for ${SECS}s"
  set +e
  "$bin" "${dict[@]}" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$WORK/$t" >"$WORK/$t.log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$t.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$WORK/$t.log")
  cov=$(grep -o 'cov: [0-9]*' "$WORK/$t.log" | tail -1 | cut -d' ' -f2 || true) # none when it failed at once
  line="$t: ${execs:-?} executions, ${rate:-?}/s, ${cov:-?} coverage points"
  if [ "$rc" -ne 0 ]; then
    failed=1
    line="$line: FAILED (exit $rc)"
    echo "-- $t: the end of its log:"
    grep -v '^#[0-9]' "$WORK/$t.log" | tail -40
    for a in "$artifacts"/*; do
      [ -e "$a" ] && echo "-- reproduce: $bin $a   (LEASEGATE_FUZZ_TRACE=1 prints the steps)"
    done
  fi
  echo "$line"
  summary="$summary$line"$'\n'
done
echo "== fuzz: summary (${SECS}s per target)"
printf '%s' "$summary"
if [ "$failed" -ne 0 ]; then
  echo "== fuzz: FAILED: see the inputs under $BUILD/artifacts/"
  exit 1
fi
echo "== fuzz: no crash, no violated property"
