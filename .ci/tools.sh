# Sourced by the CI checks: finds the workplace's shared tools (fresh-debian.sh,
# container.sh). They live next to the checkout (../shared/tools); a clean clone
# elsewhere finds them through $LEASEGATE_SHARED_TOOLS or the workplace's path.
find_shared_tools() {
  local d
  for d in "${LEASEGATE_SHARED_TOOLS:-}" "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/tools" \
           /work/shared/tools; do
    if [ -n "$d" ] && [ -x "$d/fresh-debian.sh" ] && [ -x "$d/container.sh" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}
