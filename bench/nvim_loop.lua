-- luacheck: max line length 140
-- The SDK in Neovim (`nvim --headless`, its libuv transport on vim.loop), side by side in one
-- editor (bench/hosts/nvim_loop.lua does the measuring):
--   timer lateness   a 10 ms vim.loop timer, re-armed each tick: how late each tick fires,
--                    in windows taken in turn: an idle editor; 8 requests in flight to a
--                    loopback server that never answers (the SDK's share alone); 8 long
--                    commands in flight
--                    (their sandboxes booted before the window: a quiet machine); 8 tasks
--                    running `sleep 0.3` back to back (sandboxes booting all the time: the
--                    2 cores are shared with runsc). Target: p99 with 8 commands in flight
--                    within 1 ms of idle. Also the loop's time spent in the SDK (transport
--                    callbacks and task resumes) per second of window, and its longest stretch
--   idle wakeups     context switches per second of nvim's threads over 5 s of doing
--                    nothing: the editor alone (SDK not loaded), then with the SDK loaded,
--                    the transport installed and 8 sessions open; and the transport's own
--                    callbacks per second; target 0 (the window's own closing timer is 1
--                    wakeup: 0.2/s)
-- No assertion.
--
--   make bench     (or: lua5.4 bench/nvim_loop.lua [rounds])        needs root (runsc)
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local common = require "support.hosts.common"
local badserver = require "support.badserver"
local nvim = require "support.hosts.nvim"
local stats = require "stats"

local ROUNDS = tonumber(arg and arg[1]) or 3

local srv = airlockd.start({ env = {
  SANDBOX_TENANT_LIMITS = '{"*":{"max_concurrent_exec":8,"max_sessions":20,"requests_per_minute":100000}}' } })
local stall = badserver.start()
local run = nvim.run({ script = common.top() .. "/bench/hosts/nvim_loop.lua", timeout = 120 + ROUNDS * 15, env = {
  SANDBOX_API_URL = srv.url, SANDBOX_API_KEY = srv.tenants.acme, AIRLOCK_BENCH_ROUNDS = tostring(ROUNDS),
  AIRLOCK_BENCH_STALL_URL = stall.url } })
airlockd.stop(srv)
badserver.stop(stall)
assert(run.code == 0 and run.result, "nvim failed (" .. tostring(run.code) .. "): " .. run.stderr .. run.stdout)
local r = cjson.decode(run.result)
assert(not r.error, r.error)

local summary, mean = stats.summary, stats.mean

local idle, stalled, long, busy = summary(r.idle), summary(r.stalled), summary(r.long), summary(r.busy)
print(string.format("nvim --headless, transport %s: 10 ms vim.loop timer lateness (ms), %d rounds of %.0f s windows",
  r.transport, r.rounds, r.window_ms / 1000))
local ROW = "%-36s %6d %7.3f %7.3f %7.3f %+8.3f %14.3f"
print(string.format("%-36s %6s %7s %7s %7s %8s %14s", "", "ticks", "p50", "p99", "max", "p99-idle", "SDK ms/s"))
print(string.format("%-36s %6d %7.3f %7.3f %7.3f", "idle editor", idle.n, idle.p50, idle.p99, idle.max))
print(string.format(ROW, string.format("%d requests in flight (stalled)", r.in_flight), stalled.n, stalled.p50, stalled.p99,
  stalled.max, stalled.p99 - idle.p99, mean(r.sdk_ms_per_s.stalled)))
print(string.format(ROW, string.format("%d long commands in flight", r.in_flight), long.n, long.p50, long.p99, long.max,
  long.p99 - idle.p99, mean(r.sdk_ms_per_s.long)))
print(string.format(ROW, string.format("%d tasks, short commands back to back", r.in_flight), busy.n, busy.p50, busy.p99,
  busy.max, busy.p99 - idle.p99, mean(r.sdk_ms_per_s.busy)))
print(string.format("(target: p99 within 1 ms of idle; %d short commands ran; all stalled requests / long commands in"
  .. " flight during their windows: %s / %s; longest SDK callback %.3f ms, longest task resume %.3f ms, wall time:"
  .. " includes waiting for a CPU)", r.commands or 0, tostring(r.stalled_all_in_flight), tostring(r.long_all_in_flight),
  r.idle_sdk_state.callback_max_ms, r.idle_sdk_state.resume_max_ms))
print()
print(string.format("idle wakeups over %.0f s (the window's own timer: %.1f/s)", r.idle_ms / 1000, 1000 / r.idle_ms))
print(string.format("%-40s %16s %18s", "", "ctx switches/s", "SDK callbacks/s"))
print(string.format("%-40s %16.1f %18s", "editor alone (SDK not loaded)", r.idle_editor.switches_per_s, "-"))
print(string.format("%-40s %16.1f %18.1f", string.format("SDK loaded, %d sessions open", r.idle_sdk_state.sessions_open),
  r.idle_sdk.switches_per_s, r.idle_sdk.callbacks_per_s or 0))
print(string.format("(while idle: %d sockets watched, libcurl timer %s)", r.idle_sdk_state.watched,
  r.idle_sdk_state.timer_armed and "armed" or "not armed"))
