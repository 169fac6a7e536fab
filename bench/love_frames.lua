-- luacheck: max line length 140
-- airlock.poll(0) in a real game host: LÖVE 11 (headless, LuaJIT, the curl transport), one
-- poll(0) per love.update, side by side in one run (bench/hosts/love_frames.lua measures):
--   idle            no task
--   50 in flight    50 tasks waiting for answers that do not come (a stalled loopback server)
--   50 commands     50 `sleep 1` commands on airlockd through 5 sandboxes, 8 at once
-- Prints p50/p99/max of poll(0) in microseconds and p99 against idle. Target: p99 <= 0.2 ms
-- with 50 requests in flight. bench/poll_frames.lua measures the same under plain Lua 5.4.
-- No assertion.
--
--   make bench     (or: lua5.4 bench/love_frames.lua [frames])     needs root (runsc)
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local common = require "support.hosts.common"
local love = require "support.hosts.love"
local stats = require "stats"

local FRAMES = tonumber(arg and arg[1]) or 500

local stall = badserver.start()
local srv = airlockd.start({ env = {
  SANDBOX_TENANT_LIMITS = '{"*":{"max_concurrent_exec":8,"max_sessions":20,"requests_per_minute":100000}}' } })
local run = love.run({ script = common.top() .. "/bench/hosts/love_frames.lua", timeout = 120, env = {
  SANDBOX_API_URL = srv.url, SANDBOX_API_KEY = srv.tenants.acme, AIRLOCK_BENCH_STALL_URL = stall.url,
  AIRLOCK_BENCH_FRAMES = tostring(FRAMES) } })
airlockd.stop(srv)
badserver.stop(stall)
assert(run.code == 0 and run.result, "LÖVE failed (" .. tostring(run.code) .. "): " .. run.stdout .. run.stderr)
local r = cjson.decode(run.result)

local rows = {
  { "idle", stats.summary(r.idle) },
  { "50 in flight", stats.summary(r.in_flight), string.format("%d transfers live", r.live_in_flight) },
  { "50 commands", stats.summary(r.commands), string.format("%.1f s wall, %d failed", r.commands_wall_s, r.commands_failed) },
}
local idle = rows[1][2].p99
print("LÖVE 11 (LuaJIT, curl transport): airlock.poll(0) per love.update")
print(string.format("%-14s %8s %8s %8s %8s %10s  %s", "poll(0)", "frames", "p50 us", "p99 us", "max us", "p99/idle", ""))
for _, row in ipairs(rows) do
  local s = row[2]
  print(string.format("%-14s %8d %8.0f %8.0f %8.0f %9.1fx  %s", row[1], s.n, s.p50, s.p99, s.max, s.p99 / idle, row[3] or ""))
end
print("(target: p99 <= 200 us with 50 requests in flight)")
