#!/bin/sh
# The container image's entry point (installed as /usr/local/bin/leasegate-container):
# serve on every address of the container, with API keys.
#
#   leasegate-container [SERVE FLAGS...]     (docker run IMAGE [SERVE FLAGS...])
#   leasegate-container COMMAND [ARGS...]    runs COMMAND as given (docker run IMAGE sh, or
#                                            IMAGE leasegate serve ... with flags of your own)
#
# The keys are read from $LEASEGATE_AUTH_FILE (default /data/keys, on the data volume). On
# a first start without that file, one admin key is made: its line goes into the file and
# the key itself into $LEASEGATE_KEY_FILE (default /data/admin.key), both readable by this
# user only (0600); only their paths are logged, never the key. The client commands in the
# image read $LEASEGATE_KEY_FILE, so `docker exec CONTAINER leasegate acquire ...` works.
# Flags given are passed on to `leasegate serve` (later ones win: --listen, --allowed-host
# NAME for the name other containers use, ...). With --insecure-no-auth the server runs
# without keys, as that flag says.
set -eu
case "${1:-}" in
  '' | -*) ;;
  *) exec "$@" ;;
esac
auth=${LEASEGATE_AUTH_FILE:-/data/keys}
keyfile=${LEASEGATE_KEY_FILE:-/data/admin.key}
for arg in "$@"; do
  if [ "$arg" = --insecure-no-auth ]; then
    exec leasegate serve --listen 0.0.0.0:7400 --data /data/leasegate.db "$@"
  fi
done
if [ ! -e "$auth" ]; then
  umask 077
  out=$(leasegate keygen admin admin)
  key=$(printf '%s\n' "$out" | sed -n 1p)
  line=$(printf '%s\n' "$out" | sed -n 2p)
  printf '%s\n' "$key" > "$keyfile.new"
  mv "$keyfile.new" "$keyfile"
  printf '# made by leasegate-container at its first start; the key is in %s\n%s\n' "$keyfile" "$line" \
    > "$auth.new"
  mv "$auth.new" "$auth"
  echo "leasegate-container: no API keys in $auth: made one admin key there; the key is in $keyfile" \
       "(mode 0600). Add keys with leasegate keygen, then send the server SIGHUP." >&2
fi
exec leasegate serve --listen 0.0.0.0:7400 --data /data/leasegate.db --auth-file "$auth" "$@"
