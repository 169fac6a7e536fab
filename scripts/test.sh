#!/usr/bin/env bash
# The whole suite: every spec under Lua 5.4; then, when its core is built, the library's specs
# (spec/unit, spec/integration) again under LuaJIT; then, under PUC Lua 5.1, the unit specs
# and the integration specs of what differs there (tasks and pcall, with, the agent tools,
# the command line, the host-loop hooks, the libuv transport), not the HTTP failure paths that LuaJIT already runs
# on the same 5.1 API. spec/server tests airlockd itself and spec/lua54 uses <close>, so those
# run once. Integration specs start their own airlockd. spec/hosts then drives the SDK's real
# hosts from Lua 5.4 (nginx with the Lua module, nvim --headless, LÖVE headless;
# spec/support/hosts), which load the LuaJIT build of the core.
# Ends with one line `N passed, N failed, N skipped` over all runs; exits non-zero on failure.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD

summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
export AIRLOCK_SUMMARY_FILE=$summary
export LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua;$top/spec/?.lua;;"
export AIRLOCKD_BIN=${AIRLOCKD_BIN:-$top/build/airlockd}
export AIRLOCK_RUNSC=${AIRLOCK_RUNSC:-$top/.deps/runsc/usr/bin/runsc}

run_suite() {
  local lua=$1 cpath=$2
  shift 2
  local before after
  before=$(wc -l < "$summary")
  echo "== $lua: busted $*"
  LUA_CPATH="$cpath;;" "$lua" /usr/bin/busted -o spec/support/summary_handler.lua "$@"
  after=$(wc -l < "$summary")
  # A run that died before its summary (a crash, a syntax error) counts as one failure.
  [ "$after" -gt "$before" ] || echo "0 1 0" >> "$summary"
}

run_suite "${LUA:-lua5.4}" "$top/build/?.so" spec/unit spec/integration spec/lua54 spec/server
if [ -f build/luajit/airlock/core.so ] && command -v luajit >/dev/null; then
  run_suite luajit "$top/build/luajit/?.so" spec/unit spec/integration
fi
if [ -f build/lua51/airlock/core.so ] && command -v lua5.1 >/dev/null; then
  run_suite lua5.1 "$top/build/lua51/?.so" spec/unit \
    spec/integration/{sdk,leaks,close_queue,tools,agents,mcp,exec_queue,driver_hooks,uv_transport,examples,keys,http,stream,files_binary}_spec.lua
fi
run_suite lua5.4 "$top/build/?.so" spec/hosts

awk '{ p += $1; f += $2; s += $3 }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s; exit (f > 0 || p == 0) }' "$summary"
