#!/bin/sh
# Runs the OpenResty example from a checkout, in the foreground: nginx with
# examples/openresty/nginx.conf, its address and runtime directory settable.
#
#   SANDBOX_API_URL=http://127.0.0.1:8080 SANDBOX_API_KEY=... examples/openresty/run.sh
#   AIRLOCK_OPENRESTY_LISTEN=127.0.0.1:9090 AIRLOCK_OPENRESTY_DIR=$HOME/.cache/airlock-nginx ...
#
#   AIRLOCK_OPENRESTY_LISTEN  the address nginx listens on (default 127.0.0.1:8088)
#   AIRLOCK_OPENRESTY_DIR     its pid file and temporary files (default /tmp/airlock-openresty)
#   --conf                    print the configuration it would run instead of running nginx
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
listen=${AIRLOCK_OPENRESTY_LISTEN:-127.0.0.1:8088}
dir=${AIRLOCK_OPENRESTY_DIR:-/tmp/airlock-openresty}
case $listen in *[!0-9A-Za-z.:\[\]-]*) echo "run.sh: AIRLOCK_OPENRESTY_LISTEN: not an address: $listen" >&2; exit 2 ;; esac
case $dir in /*) ;; *) echo "run.sh: AIRLOCK_OPENRESTY_DIR must be an absolute path" >&2; exit 2 ;; esac
case $dir in *[\;\{\}\ \|\&]*) echo "run.sh: AIRLOCK_OPENRESTY_DIR: no spaces or ; { } | &" >&2; exit 2 ;; esac

# nginx.conf with the two settings put in (and its include made absolute)
conf() {
  sed -e "s|/tmp/airlock-openresty|$dir|g" -e "s|listen 127.0.0.1:8088;|listen $listen;|" \
    -e "s|include locations.conf;|include $here/locations.conf;|" "$here/nginx.conf"
}

if [ "${1:-}" = --conf ]; then conf; exit 0; fi
mkdir -p "$dir"
conf > "$dir/nginx.conf"
exec nginx -p "$top/" -c "$dir/nginx.conf" -g 'daemon off;'
