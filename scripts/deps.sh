#!/bin/sh
# Installs what leasegate needs on Debian 12 (bookworm). Used by the README, the
# Dockerfile and .ci/run, so the three stay identical.
#   scripts/deps.sh          build and run dependencies
#   scripts/deps.sh --test   also what the tests use: python3, curl, iproute2 (ss), nginx (the guard's
#                            real upstream) and Node.js (the examples), unless present
set -eu
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
PKGS="build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev libsqlite3-dev uuid-dev libcurl4-openssl-dev"
if [ "${1:-}" = "--test" ]; then
  PKGS="$PKGS python3 curl nginx-light iproute2"
  command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
