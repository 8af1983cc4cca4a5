#!/bin/sh
# Installs what leasegate needs on Debian 12 (bookworm). Used by the README, the
# Dockerfile and .ci/run, so the three stay identical.
#   scripts/deps.sh            build and run dependencies (compiler, cmake, -dev packages)
#   scripts/deps.sh --test     also what the tests use: python3, python3-venv (the Python client's
#                              offline pip install test), python3-yaml and python3-jsonschema
#                              (test_contract.py checks the server against openapi.yaml), curl, iproute2 (ss), nginx (the guard's
#                              real upstream), faketime (wall-clock steps), etcd-server (the etcd
#                              store's tests), etcd-client (etcdctl: the authentication test runs the
#                              docs' commands), openssl (the TLS tests' certificates), Node.js and npm (the
#                              examples and client, unless present), chromium (the dashboard's browser
#                              test) and that test's npm packages (npm ci in tests/browser),
#                              prometheus (test_misc.py checks /metrics with its promtool;
#                              test_promql.py runs the docs' PromQL on a real Prometheus), and for
#                              test_fencing_sql.py PostgreSQL 15 (postgresql-15, installed without
#                              creating or starting a main cluster: the test starts its own server),
#                              python3-psycopg2 and the SQL example's npm packages (npm ci in
#                              examples/sql), golang-go (Go 1.19: the Go client's tests and its
#                              conformance driver, built offline), and for the Java client
#                              (clients/java, built offline with javac) default-jdk-headless,
#                              libjackson2-databind-java, libjakarta-servlet-api-java (its servlet
#                              filter), junit5, libtomcat10-embed-java and libjakarta-annotation-api-java
#                              (its tests: the filter in a real Tomcat); the S3 clients
#                              test_guard_s3_clients.py drives through the guard: awscli
#                              (/usr/bin/aws), rclone, s3cmd, the JavaScript SDK (npm ci in
#                              tests/s3clients) and golang-github-aws-aws-sdk-go-v2-dev (the Go SDK:
#                              docs/fencing.md's Go program, built offline); fuse3 with libfuse3-dev
#                              (cutfs, the file system whose power the power-loss tests cut:
#                              tests/powerloss)
#   scripts/deps.sh --bench    also the peers bench/compare.sh measures against: redis-server,
#                              etcd-server, zookeeper (the server; a JVM) with libzookeeper-mt-dev
#                              (bench/zkbench.c's client) and default-jdk-headless (jcmd, for the
#                              JVM's forced GC), strace (bench/syscalls.sh), curl, python3
#   scripts/deps.sh --runtime  only what the built binary needs to run (the container image's last stage)
set -eu
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
BUILD="build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev libsqlite3-dev uuid-dev libcurl4-openssl-dev libnghttp2-dev libgnutls28-dev nettle-dev libexpat1-dev zlib1g-dev"
RUNTIME="libmicrohttpd12 libjansson4 libsqlite3-0 libuuid1 libcurl4 libnghttp2-14 libgnutls30 libnettle8 libexpat1 zlib1g ca-certificates"
case "${1:-}" in
  "") PKGS="$BUILD" ;;
  --test)
    PKGS="$BUILD python3 python3-venv python3-yaml python3-jsonschema curl nginx-light iproute2 faketime etcd-server etcd-client openssl chromium prometheus postgresql-15 python3-psycopg2 default-jdk-headless libjackson2-databind-java libjakarta-servlet-api-java junit5 libtomcat10-embed-java libjakarta-annotation-api-java golang-go golang-github-aws-aws-sdk-go-v2-dev awscli rclone s3cmd fuse3 libfuse3-dev"
    command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
    command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm" ;;
  --bench) PKGS="$BUILD redis-server etcd-server zookeeper libzookeeper-mt-dev default-jdk-headless strace curl python3" ;;
  --runtime) PKGS="$RUNTIME" ;;
  *) echo "usage: scripts/deps.sh [--test | --bench | --runtime]" >&2; exit 2 ;;
esac
export DEBIAN_FRONTEND=noninteractive
# A first install of postgresql-15 creates and starts the cluster "15 main" unless
# postgresql-common's createcluster.conf says create_main_cluster = false. The tests start their
# own server, so say it, in a drop-in that file includes, for this install only.
NO_MAIN_CLUSTER=/etc/postgresql-common/createcluster.d/leasegate-deps-no-main-cluster.conf
if [ "${1:-}" = "--test" ] && ! dpkg -s postgresql-15 >/dev/null 2>&1; then
  trap '$SUDO rm -f "$NO_MAIN_CLUSTER"' EXIT
  $SUDO mkdir -p "$(dirname "$NO_MAIN_CLUSTER")"
  echo "create_main_cluster = false" | $SUDO tee "$NO_MAIN_CLUSTER" >/dev/null
fi
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
# The browser test's driver (playwright-core, pinned in tests/browser/package-lock.json). It
# uses Debian's chromium installed above and never downloads a browser of its own.
# The SQL example's driver for Node.js (pg, pinned in examples/sql/package-lock.json).
if [ "${1:-}" = "--test" ]; then
  (cd "$(dirname "$0")/../tests/browser" && npm ci --no-audit --no-fund --loglevel=error)
  (cd "$(dirname "$0")/../examples/sql" && npm ci --no-audit --no-fund --loglevel=error)
  (cd "$(dirname "$0")/../tests/s3clients" && npm ci --no-audit --no-fund --loglevel=error)
fi
