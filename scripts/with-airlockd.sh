#!/usr/bin/env bash
# Starts a fresh airlockd on 127.0.0.1 (ephemeral port, newly generated key), runs the given
# command with SANDBOX_API_URL and SANDBOX_API_KEY set, then stops airlockd. The command runs
# in the caller's directory (`scripts/with-airlockd.sh lua5.4 my_script.lua` from anywhere).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

dir=$(mktemp -d)
key="alk_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
SANDBOX_API_KEY=$key "${AIRLOCKD_BIN:-$top/build/airlockd}" --listen 127.0.0.1:0 \
  --state-dir "$dir/state" --port-file "$dir/port" 2> "$dir/log" &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

for _ in $(seq 100); do
  [ -s "$dir/port" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ ! -s "$dir/port" ]; then
  echo "airlockd did not start:" >&2
  cat "$dir/log" >&2
  exit 1
fi

export SANDBOX_API_URL="http://127.0.0.1:$(cat "$dir/port")" SANDBOX_API_KEY="$key"
export LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua;;" LUA_CPATH="$top/build/?.so;;"
"$@"
