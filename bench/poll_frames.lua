-- luacheck: max line length 140
-- The cost of airlock.poll(0) in a game frame, side by side in one run (only ratios measured
-- together mean anything on these machines):
--   idle            no task
--   50 in flight    50 tasks, each waiting for an HTTP answer that does not come (a loopback
--                   server that stalls): 50 sockets for the core to look at every frame
--   50 commands     50 tasks running `sleep 1` on airlockd (8 places: 8 requests in flight,
--                   42 tasks waiting in the client-side line)
-- Frames: poll(0), then a 4 ms pause (the host's own work). Prints p50/p99/max of poll(0) in
-- microseconds and p99 against idle. No assertion.
--
--   make bench        (or: lua5.4 bench/poll_frames.lua)        needs root (runsc)
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local socket = require "socket"
local stats = require "stats"

-- Frames of poll(0) until done() or max_frames; the poll(0) times in microseconds, sorted.
local function frames(done, max_frames)
  local t = {}
  for i = 1, max_frames do
    local t0 = socket.gettime()
    airlock.poll(0)
    t[i] = (socket.gettime() - t0) * 1e6
    if done() then break end
    socket.sleep(0.004)
  end
  return stats.summary(t)
end

local rows = {}

rows[#rows + 1] = { "idle", frames(function() return false end, 500) }

do
  local srv = badserver.start()
  local opts = { api_key = "stall", base_url = srv.url, timeout = 30, max_retries = 0 }
  for _ = 1, 50 do
    airlock.spawn(function() return pcall(airlock.list_sessions, opts) end)
  end
  rows[#rows + 1] = { "50 in flight", frames(function() return false end, 500) }
  assert(airlock.stats().live == 50, "expected 50 transfers in flight, got " .. tostring(airlock.stats().live))
  badserver.stop(srv)                              -- the stalled requests fail now
  local t0 = socket.gettime()
  while airlock.poll(20) > 0 and socket.gettime() - t0 < 40 do end
end

do
  local srv = airlockd.start({ env = {
    SANDBOX_TENANT_LIMITS = '{"*":{"max_concurrent_exec":8,"max_sessions":20,"requests_per_minute":100000}}' } })
  local opts = { api_key = srv.tenants.acme, base_url = srv.url, max_concurrent_exec = 8 }
  local boxes = {}
  for i = 1, 5 do boxes[i] = airlock.sandbox(opts) end
  local list, failed = {}, 0
  for i = 1, 50 do
    list[i] = airlock.spawn(function() return boxes[i % 5 + 1]:run("sleep 1").exit_code end)
  end
  local t0 = socket.gettime()
  local result = frames(function() return airlock.poll(0) == 0 end, 100000)
  local wall = socket.gettime() - t0
  for _, task in ipairs(list) do
    local ok, code = task:result()
    if not ok or code ~= 0 then failed = failed + 1 end
  end
  for _, b in ipairs(boxes) do b:close() end
  airlockd.stop(srv)
  result.note = string.format("%.1f s wall, %d failed", wall, failed)
  rows[#rows + 1] = { "50 commands", result }
end

local idle = rows[1][2].p99
print(string.format("%-14s %8s %8s %8s %8s %10s  %s", "poll(0)", "frames", "p50 us", "p99 us", "max us", "p99/idle", ""))
for _, row in ipairs(rows) do
  local r = row[2]
  print(string.format("%-14s %8d %8.0f %8.0f %8.0f %9.1fx  %s", row[1], r.n, r.p50, r.p99, r.max,
    r.p99 / idle, r.note or ""))
end
