#!/usr/bin/env bash
# CI: the README's first command, exactly as written there, in a brand-new minimal
# Debian 12 root (nothing installed but git and ca-certificates). It must build and
# start the server; the check ends when the server answers /healthz, then stops it by
# its process group.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/tools.sh
tools=$(find_shared_tools) || { echo "fresh-debian-check: shared tools not found (set LEASEGATE_SHARED_TOOLS)" >&2; exit 1; }

# The line after "# 1." in the README's "Two commands" block.
first=$(awk '/^# 1\./{getline; print; exit}' README.md)
case "$first" in
  *"leasegate serve"*) ;;
  *) echo "fresh-debian-check: cannot find the README's first command (got: $first)" >&2; exit 1 ;;
esac
echo "fresh-debian-check: README command 1: $first"
# Inside the root: run it as a job in its own process group (set -m), wait (bounded) for
# /healthz with the binary it built, then stop the group by its id. The root has no curl
# or python3.
check=$(cat <<INNER
set -m
bash -c '$first' > /tmp/first.log 2>&1 &
pgid=\$!
set +m
ok=1
for i in \$(seq 1 1200); do
  if [ -x build/leasegate ] && build/leasegate healthcheck >/dev/null 2>&1; then ok=0; break; fi
  kill -0 \$pgid 2>/dev/null || break
  sleep 0.5
done
kill -TERM -- -\$pgid 2>/dev/null || true
for i in \$(seq 1 40); do kill -0 \$pgid 2>/dev/null || break; sleep 0.25; done
kill -KILL -- -\$pgid 2>/dev/null || true
tail -5 /tmp/first.log
[ \$ok = 0 ] && echo "fresh-debian-check: the server answered /healthz" || { echo "fresh-debian-check: no healthy server" >&2; tail -40 /tmp/first.log >&2; exit 1; }
INNER
)
"$tools/fresh-debian.sh" "$check"
