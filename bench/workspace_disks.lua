-- luacheck: max line length 140
-- What a workspace disk costs (one ext4 image per session), side by side in one run (these
-- machines are noisy: only figures measured together mean anything).
--
--   make bench        (or: lua5.4 bench/workspace_disks.lua [sessions])
--
-- 1. create and DELETE of a session at the default 512 MB quota and at 5 MB, p50/p95 over >= 30
--    each, beside GET /v1/usage on the same server (a request that touches no disk);
-- 2. a restart on the same state directory with N sessions (default 50, 5 MB each, a file in
--    each): after SIGTERM (disks unmounted: e2fsck -p + mount each) and after kill -9 (disks
--    still mounted: taken over), as airlockd logs it and as a client sees it (start to port).
-- Needs root, like airlockd. No assertion anywhere: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local stats = require "stats"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local cjson = require "cjson"

local RUNS = 30
local SESSIONS = math.max(1, tonumber(arg and arg[1]) or 50)

local call, timed, summary = harness.call, harness.timed, stats.p50_p95

-- create/delete/usage latencies on a server with the given quota
local function costs(quota_mb)
  local s = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = tostring(quota_mb), SANDBOX_DISK_TOTAL_MB = "4096",
                                     SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000}}' } })
  local key = s.tenants.acme
  local creates, deletes, usages = {}, {}, {}
  for i = 1, RUNS do
    local ms, status, body = timed(function() return call(s, "POST", "/v1/sessions", key, "{}") end)
    assert(status == 201, "create: " .. tostring(status))
    creates[i] = ms
    usages[i] = timed(function() return call(s, "GET", "/v1/usage", key) end)
    deletes[i] = timed(function() return call(s, "DELETE", "/v1/sessions/" .. body.session_id, key) end)
  end
  airlockd.stop(s)
  return summary(creates), summary(deletes), summary(usages)
end

local function restored_line(server)
  return airlockd.log(server):match("restored %d+ sessions in (%d+) ms") or "?"
end

-- A server with SESSIONS sessions of 5 MB, then restarted after SIGTERM and after kill -9.
local function restarts()
  local env = { SANDBOX_WORKSPACE_QUOTA_MB = "5", SANDBOX_DISK_TOTAL_MB = "4096",
                SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000,"max_sessions":' .. SESSIONS .. '}}' }
  local s = airlockd.start({ env = env })
  local key = s.tenants.acme
  for i = 1, SESSIONS do
    local status, body = call(s, "POST", "/v1/sessions", key, "{}")
    assert(status == 201, "create " .. i .. ": " .. tostring(status))
    call(s, "POST", "/v1/sessions/" .. body.session_id .. "/write", key, cjson.encode({ path = "f.txt", content = "x" }))
  end
  local out = {}
  for _, how in ipairs({ "TERM", "KILL" }) do
    local stop_ms = timed(function()
      os.execute("kill -" .. how .. " " .. s.pid)
      proc.wait_until(60, function() return not airlockd.alive(s) end, 0.01)
    end)
    local start_ms
    start_ms, s = timed(function() return airlockd.start({ dir = s.dir, tenants = s.tenants, env = env, wait = 120 }) end)
    local _, listed = call(s, "GET", "/v1/sessions", key)
    out[how] = { stop = stop_ms, start = start_ms, restored = restored_line(s), n = #listed.sessions }
  end
  -- a start with no sessions, for comparison
  local empty_ms, e = timed(function() return airlockd.start({ env = env }) end)
  airlockd.stop(e)
  airlockd.stop(s)
  return out, empty_ms
end

local rows = {}
for _, quota in ipairs({ 512, 5 }) do
  local c, d, u = costs(quota)
  rows[#rows + 1] = string.format("%-28s %8.1f %8.1f   %8.1f %8.1f   %8.1f %8.1f   %6.1fx", quota .. " MB quota (image " ..
    math.ceil((quota + quota / 16 + 2)) .. " MB)", c.p50, c.p95, d.p50, d.p95, u.p50, u.p95, c.p50 / u.p50)
end
print(string.format("%-28s %17s   %17s   %17s   %s", "session create/DELETE, ms", "create p50 p95", "DELETE p50 p95",
  "usage p50 p95", "create/usage"))
for _, r in ipairs(rows) do print(r) end

local r, empty_ms = restarts()
print(string.format("\nrestart with %d sessions of 5 MB (ms)    stop   start-to-port   restore (log)   sessions back", SESSIONS))
local ROW = "%-38s %6.0f %15.0f %15s %15d"
print(string.format(ROW, "after SIGTERM (fsck + mount each)", r.TERM.stop, r.TERM.start, r.TERM.restored, r.TERM.n))
print(string.format(ROW, "after kill -9 (mounts taken over)", r.KILL.stop, r.KILL.start, r.KILL.restored, r.KILL.n))
print(string.format("%-38s %6s %15.0f", "a fresh state directory", "", empty_ms))
