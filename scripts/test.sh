#!/usr/bin/env bash
# The whole suite, each spec file run once for every place its result can differ, as jobs
# spread over the CPUs (TEST_JOBS, default nproc + 3: much of the time the jobs wait on
# sandboxes booting and servers answering; with nproc + 2 the jobs' CPU was ~86% of the
# machine's; specs use ephemeral ports and temp dirs).
#
#   scripts/test.sh              make test: plain builds (build/, build/luajit, build/lua51, build/lua53)
#   scripts/test.sh --asan --valgrind
#                                CI: the same, but the Lua 5.4 run of every spec that can load
#                                the ASan core goes through the ASan/UBSan build instead
#                                (build/asan: the core in spec/c/lua_host.c, an ASan airlockd),
#                                plus the core under valgrind
#
# Where each spec runs (the C core's ABI is what differs between interpreters; airlockd is the
# same whoever calls it):
#   spec/unit         Lua 5.4, LuaJIT, Lua 5.1, Lua 5.3 (one job each: they take seconds)
#   spec/integration  Lua 5.4, LuaJIT; Lua 5.1 for LUA51_SPECS (what differs there: tasks and
#                     pcall, the host-loop hooks, the libuv transport, ...; not the HTTP failure
#                     paths LuaJIT already runs on the same 5.1 API); a test tagged #build (a
#                     real template build: its time is airlockd's) on Lua 5.4 alone
#   spec/lua54        Lua 5.4 only (<close>)
#   spec/server       once (airlockd itself): Lua 5.4; under --asan against the ASan airlockd,
#                     and COMMAND_MODE_SPECS again with SANDBOX_EXEC_MODE=command (CI)
#   spec/hosts        once, from Lua 5.4 (nginx, nvim, LÖVE load the LuaJIT build of the core)
#   spec/integration/sdk_spec.lua also through a fleet's router (spec/support/fleet_as_airlockd.lua)
#   any other folder  once, Lua 5.4 (spec/c and spec/support hold no specs)
# Under --asan, the 5.4 run is the ASan one for what ASAN_SPECS lists (below: files
# or whole folders); a file whose text holds the tag #noasan (a plain lua5.4 child, memory figures)
# stays plain. --only=KIND keeps the jobs of one kind (make asan-test, make valgrind-test).
# Every job's output is printed whole when it ends, after a line `== N of M: ...` (N jobs ended
# of all M so far). Ends with one line
# `N passed, N failed, N skipped` over all jobs; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
top=$PWD

asan=0 valgrind=0 only=
for a in "$@"; do
  case $a in
    --asan) asan=1 ;;
    --valgrind) valgrind=1 ;;
    --only=*) only=${a#--only=} ;;
    *) echo "usage: $0 [--asan] [--valgrind] [--only=asan|valgrind|plain|command|luajit|lua51|lua53]" >&2; exit 2 ;;
  esac
done

# the integration specs that differ under Lua 5.1 (PUC) from what LuaJIT already runs
LUA51_SPECS=${LUA51_SPECS:-"sdk leaks close_queue tools agents mcp exec_queue driver_hooks uv_transport examples keys http stream files_binary snapshots"}
# the files and folders whose Lua 5.4 run is the ASan one under --asan: the unit specs, every
# airlockd spec (spec/server, but a file tagged #noasan: a plain lua5.4 child, or memory
# figures) and the integration specs that start no plain lua5.4 child loading the core
ASAN_SPECS=${ASAN_SPECS:-"spec/unit spec/server $(printf 'spec/integration/%s_spec.lua ' sdk badserver \
  driver_hooks uv_transport keys tls leaks import files_binary stream)"}
# the airlockd specs whose checks differ between SANDBOX_EXEC_MODE=session (the default: a
# session's commands in its own sandbox) and command (a sandbox per command), run again in command
COMMAND_MODE_SPECS=${COMMAND_MODE_SPECS:-"warm redteam fairness egress_cleanup"}
# the core under valgrind: its unit spec, the failure paths against the misbehaving server,
# the host-loop hooks and the libuv transport on them
VALGRIND_SPECS="spec/unit/core_spec.lua spec/integration/badserver_spec.lua spec/integration/driver_hooks_spec.lua spec/integration/uv_transport_spec.lua"
TEST_JOBS=${TEST_JOBS:-$(( $(nproc) + 3 ))}
# the spec files whose jobs take a minute or more (the closing "slowest" list of a run), longest
# first: each of their jobs (every interpreter, ASan or not) starts before all others, so none of
# them starts late and runs on alone at the end (a job's order does not change what it checks)
LONG_SPECS=${LONG_SPECS:-"spec/server/templates_matplotlib_spec.lua spec/fleet/templates_fleet_spec.lua spec/server/templates_spec.lua spec/server/persistence_spec.lua spec/fleet/fleet_spec.lua
  spec/integration/templates_spec.lua spec/fleet/drain_spec.lua"}

export LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua;$top/spec/?.lua;;"
export AIRLOCK_RUNSC=${AIRLOCK_RUNSC:-$top/.deps/runsc/usr/bin/runsc}
# the cached base of template builds, shared by the run's servers (made once a day, not per server)
export AIRLOCK_TEST_TEMPLATE_BASES=${AIRLOCK_TEST_TEMPLATE_BASES:-$top/build/template-bases}
(umask 077; mkdir -p "$AIRLOCK_TEST_TEMPLATE_BASES")
plain_airlockd=${AIRLOCKD_BIN:-$top/build/airlockd}
busted=(/usr/bin/busted -o spec/support/summary_handler.lua)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/jobs"
asan_reports=$top/build/asan/reports
if [ $asan = 1 ]; then rm -rf "$asan_reports" && mkdir -p "$asan_reports"; fi

jobs=()
# job KIND ARGS...: KIND is the interpreter's build (plain, luajit, lua51, lua53, asan,
# valgrind); ARGS are busted's. The longest jobs are listed first.
job() { [ -z "$only" ] || [ "$only" = "$1" ] && jobs+=("$*"); }

has_core() { [ -f "$1/airlock/core.so" ]; }
# whether spec file or folder $1 is in ASAN_SPECS (itself or its folder) and not tagged #noasan
asan_ok() {
  local s
  for s in $ASAN_SPECS; do
    if [ "$1" = "$s" ] || [ "$(dirname "$1")" = "$s" ]; then
      ! { [ -f "$1" ] && grep -q '#noasan' "$1"; }
      return
    fi
  done
  return 1
}
lua54_job() { if [ $asan = 1 ] && asan_ok "$1"; then job asan "$1"; else job plain "$1"; fi; }

# shellcheck disable=SC2086 # one spec a word
if [ $valgrind = 1 ]; then job valgrind --exclude-tags=timing $VALGRIND_SPECS; fi
# Lua 5.4, each file once: spec/fleet (the longest file: a whole fleet), spec/server and
# spec/hosts first, then every other folder of specs (spec/lua54, any new one); then
# spec/integration and spec/unit (the longest jobs first, so none starts last)
once=(spec/fleet spec/server spec/hosts)
for d in spec/*/; do
  d=${d%/}
  case $d in spec/c|spec/support|spec/unit|spec/integration|spec/server|spec/hosts|spec/fleet) ;; *) once+=("$d") ;; esac
done
for d in "${once[@]}" spec/integration; do
  for f in "$d"/*_spec.lua; do [ -f "$f" ] && lua54_job "$f"; done
done
lua54_job spec/unit
# (CI's run, or --only=command: they keep make test for a new user within 8 minutes)
if [ $asan = 1 ] || [ "$only" = command ]; then
  for name in $COMMAND_MODE_SPECS; do job command "spec/server/${name}_spec.lua"; done
fi
# the Lua SDK's suite again, through the router of a 3-node fleet (docs/fleet.md)
job plain --helper=spec/support/fleet_as_airlockd.lua spec/integration/sdk_spec.lua
if has_core build/luajit && command -v luajit >/dev/null; then
  # (a test tagged #build: a real template build in airlockd, run from Lua 5.4 alone)
  for f in spec/integration/*_spec.lua; do job luajit --exclude-tags=build "$f"; done
  job luajit spec/unit
fi
if has_core build/lua51 && command -v lua5.1 >/dev/null; then
  for name in $LUA51_SPECS; do job lua51 "spec/integration/${name}_spec.lua"; done
  job lua51 spec/unit
fi
if has_core build/lua53 && command -v lua5.3 >/dev/null; then job lua53 spec/unit; fi
# the jobs of LONG_SPECS first (in its order), then the others in the order above (valgrind's
# first: 50 s at load average 8)
long=() rest=()
for s in $LONG_SPECS; do
  for j in "${jobs[@]}"; do [ "${j##* }" = "$s" ] && long+=("$j"); done
done
for j in "${jobs[@]}"; do
  case " ${LONG_SPECS//$'\n'/ } " in *" ${j##* } "*) ;; *) rest+=("$j") ;; esac
done
jobs=("${long[@]}" "${rest[@]}")

# Each job's CPU seconds (all it starts, sandboxes included) when the host has a cgroup v2
# hierarchy beside its v1 ones (/sys/fs/cgroup/unified): a group per job there, which airlockd
# and runsc never move anything out of (they use the v1 hierarchies); printed with its time.
cpu_root=
if [ -f /sys/fs/cgroup/unified/cgroup.procs ] && [ -f /sys/fs/cgroup/unified/cpu.stat ] &&
   mkdir "/sys/fs/cgroup/unified/airlock-test-$$" 2>/dev/null; then
  cpu_root=/sys/fs/cgroup/unified/airlock-test-$$
fi
job_cpu() { [ -f "$1/cpu.stat" ] && awk '$1 == "usage_usec" { printf "%.1f", $2 / 1e6 }' "$1/cpu.stat"; }

# Runs job number $1 ("KIND ARGS..."), output to its log, counts to its summary file.
run_job() {
  local n=$1 kind=${2%% *} args=${2#* } rc start cg='' cpu=''
  local log=$work/jobs/$n.log sum=$work/jobs/$n.sum
  if [ -n "$cpu_root" ] && mkdir "$cpu_root/$n" 2>/dev/null && echo "$BASHPID" > "$cpu_root/$n/cgroup.procs"; then cg=$cpu_root/$n; fi
  local -a cmd
  case $kind in
    plain)    cmd=(env LUA_CPATH="$top/build/?.so;;" AIRLOCKD_BIN="$plain_airlockd" "${LUA:-lua5.4}") ;;
    command)  cmd=(env LUA_CPATH="$top/build/?.so;;" AIRLOCKD_BIN="$plain_airlockd" SANDBOX_EXEC_MODE=command lua5.4) ;;
    luajit)   cmd=(env LUA_CPATH="$top/build/luajit/?.so;;" AIRLOCKD_BIN="$plain_airlockd" luajit) ;;
    lua51)    cmd=(env LUA_CPATH="$top/build/lua51/?.so;;" AIRLOCKD_BIN="$plain_airlockd" lua5.1) ;;
    lua53)    cmd=(env LUA_CPATH="$top/build/lua53/?.so;;" AIRLOCKD_BIN="$plain_airlockd" lua5.3) ;;
    asan)     cmd=(env LUA_CPATH="$top/build/asan/?.so;;" AIRLOCKD_BIN="$top/build/asan/airlockd"
                   ASAN_OPTIONS="detect_leaks=1:log_path=$asan_reports/asan"
                   LSAN_OPTIONS="suppressions=$top/spec/c/lsan.supp:print_suppressions=0"
                   UBSAN_OPTIONS="print_stacktrace=1:log_path=$asan_reports/ubsan"
                   "$top/build/asan/lua-host") ;;
    valgrind) cmd=(env LUA_CPATH="$top/build/?.so;;" AIRLOCKD_BIN="$plain_airlockd" LD_PRELOAD=libcurl.so.4
                   valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 lua5.4) ;;
  esac
  start=$(date +%s%N)
  # shellcheck disable=SC2086 # ARGS are words
  AIRLOCK_SUMMARY_FILE=$sum AIRLOCK_FAILED_FILE=$work/jobs/$n.failed "${cmd[@]}" "${busted[@]}" $args > "$log" 2>&1
  rc=$?
  # a run that died before its summary (a crash, a syntax error), or that failed after it
  # (valgrind's exit 99), counts as one failure
  if [ ! -s "$sum" ]; then
    echo "0 1 0" >> "$sum"; echo "(died before its summary, exit status $rc)" >> "$work/jobs/$n.failed"
    tail -n 6 "$log" | cut -c1-200 | sed 's/^/    /' >> "$work/jobs/$n.failed"
  elif [ $rc -ne 0 ] && [ "$(awk '{ f += $2 } END { print f }' "$sum")" = 0 ]; then
    echo "0 1 0" >> "$sum"; echo "(exit status $rc after the specs)" >> "$log"
    echo "(exit status $rc after the specs)" >> "$work/jobs/$n.failed"
  fi
  # each failure line names its job, so the closing lines say what failed and where
  if [ -s "$work/jobs/$n.failed" ]; then
    sed -i "/^    /! s|^|$kind $args: |" "$work/jobs/$n.failed" # (indented: why, from the handler)
  fi
  local secs
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  [ -z "$cg" ] || cpu=$(job_cpu "$cg")
  printf '%6.1f s  %-8s %s\n' "$secs" "$kind" "$args" >> "$work/times"
  [ -z "$cpu" ] || printf '%6.1f CPU-s  %-8s %s\n' "$cpu" "$kind" "$args" >> "$work/cpu"
  {
    flock 9
    # progress: how many jobs have ended, of all, as each ends
    local ended
    ended=$(( $(cat "$work/ended" 2>/dev/null || echo 0) + 1 ))
    echo "$ended" > "$work/ended"
    printf '== %d of %d: %s: busted %s (%.1f s%s, exit %d)\n' "$ended" "${#jobs[@]}" "$kind" "$args" "$secs" \
      "${cpu:+, $cpu CPU-s}" "$rc"
    cat "$log"
  } 9> "$work/lock"
}

started=$(date +%s)
n=0
for j in "${jobs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$TEST_JOBS" ]; do wait -n; done
  n=$((n + 1))
  run_job "$n" "$j" &
done
wait

if [ $asan = 1 ] && ls "$asan_reports"/* >/dev/null 2>&1; then
  cat "$asan_reports"/*
  echo "sanitizer reports (above)"
  echo "0 1 0" >> "$work/jobs/asan-reports.sum"
  echo "sanitizer reports (printed above)" >> "$work/jobs/asan-reports.failed"
fi
echo
echo "== $n spec jobs in $(( $(date +%s) - started )) s, $TEST_JOBS at a time; the slowest:"
sort -rn "$work/times" | head -12
if [ -s "$work/cpu" ]; then
  echo "== CPU: $(awk '{ t += $1 } END { printf "%.0f", t }' "$work/cpu") s over all jobs (the machine's: $(nproc) CPUs); the most:"
  sort -rn "$work/cpu" | head -12
fi
if [ -n "$cpu_root" ]; then rmdir "$cpu_root"/* "$cpu_root" 2>/dev/null; fi
if ls "$work"/jobs/*.failed >/dev/null 2>&1; then
  echo "== failed:"
  cat "$work"/jobs/*.failed | cut -c1-300
fi
cat "$work"/jobs/*.sum |
  awk '{ p += $1; f += $2; s += $3 }
       END { printf "%d passed, %d failed, %d skipped\n", p, f, s; exit (f > 0 || p == 0) }'
