-- luacheck: max line length 140
-- Resuming a session paused with its kernel's memory (issue 26 item 5), side by side in one run,
-- interleaved (these machines are noisy: only figures measured together mean anything):
--   1. in a 2-node fleet sharing SANDBOX_SNAPSHOT_DIR, POST /v1/sessions/{id}/resume on the node
--      that paused it (it takes its images back from the store and restores them);
--   2. the same on the other node (it takes them from the store and restores them into a
--      sandbox of its own);
--   3. one airlockd without a fleet (the image restored into the sandbox it kept, as before).
-- Each session: a Python kernel holding x = 41, paused (not timed); the resume is timed, then a
-- cell checks x + 1 is 42. p50/p95 over RUNS rounds, milliseconds, the load average beside.
--
--   lua5.4 bench/fleet_mempause.lua [runs]      (needs root, like airlockd)
-- No assertion beyond the checks: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local fleet = require "support.fleet"
local harness = require "harness"
local stats = require "stats"

local RUNS = math.max(3, tonumber(arg and arg[1]) or 5)
local KEY = "bench-mem-" .. string.rep("e", 24)
local check, timed, call = harness.check, harness.timed, harness.call_url

local f = fleet.up{ nodes = 2, shared_snapshots = true, env = {
  SANDBOX_API_KEYS = "main:" .. KEY,
  SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 1000, requests_per_minute = 1000000 } },
} }
local one
local times = { own = {}, other = {}, single = {} }
local loads = {}
local ok, err = pcall(function()
  one = airlockd.start({ env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WORKSPACE_QUOTA_MB = "16", SANDBOX_WARM_NEW = "0",
    SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000}}' }, wait = 60 })
  local single_key = one.tenants.acme

  -- a session on base (a node's or the single server's URL) whose kernel holds x = 41, paused
  local function paused_session(base, key)
    local st, s = call(base, "POST", "/v1/sessions", key, "{}")
    check(st == 201, "create: " .. tostring(st))
    local id = s.session_id
    local st2, k = call(base, "POST", "/v1/sessions/" .. id .. "/kernels", key, '{"language": "python"}', 120)
    check(st2 == 201, "kernel: " .. tostring(st2))
    local st3 = call(base, "POST", "/v1/sessions/" .. id .. "/kernels/" .. k.kernel_id .. "/execute", key,
      '{"code": "x = 41", "timeout": 60}', 120)
    check(st3 == 200, "cell: " .. tostring(st3))
    local st4, p = call(base, "POST", "/v1/sessions/" .. id .. "/pause", key, nil, 120)
    check(st4 == 200 and p.image_bytes > 0, "pause: " .. tostring(st4))
    return id, k.kernel_id
  end

  local function resume_on(base, key, id, kid)
    local ms, st, body = timed(function() return call(base, "POST", "/v1/sessions/" .. id .. "/resume", key, nil, 120) end)
    check(st == 200, "resume: " .. tostring(st) .. " " .. cjson.encode(body))
    local st2, r = call(base, "POST", "/v1/sessions/" .. id .. "/kernels/" .. kid .. "/execute", key,
      '{"code": "x + 1", "timeout": 60}', 120)
    check(st2 == 200 and r.results[1]["text/plain"] == "42", "x + 1: " .. tostring(st2) .. " " .. cjson.encode(r))
    check(call(base, "DELETE", "/v1/sessions/" .. id, key) == 200, "delete")
    return ms
  end

  local n1, n2 = f.nodes.node1.url, f.nodes.node2.url
  local cases = {
    own = function() local id, kid = paused_session(n1, KEY); return resume_on(n1, KEY, id, kid) end,
    other = function() local id, kid = paused_session(n1, KEY); return resume_on(n2, KEY, id, kid) end,
    single = function() local id, kid = paused_session(one.url, single_key); return resume_on(one.url, single_key, id, kid) end,
  }
  local order = { "own", "other", "single" }
  for i = 1, RUNS do
    for j = 0, 2 do -- a different one first each round
      local name = order[(i + j - 1) % 3 + 1]
      local t = times[name]
      t[#t + 1] = cases[name]()
    end
    loads[#loads + 1] = harness.loadavg()
  end
end)
if one then airlockd.stop(one) end
fleet.down(f)
if not ok then error(err, 0) end

local own, other, single = stats.p50_p95(times.own), stats.p50_p95(times.other), stats.p50_p95(times.single)
print(string.format("resume of a memory-paused session (a Python kernel, x = 41), %d rounds interleaved (ms)", RUNS))
print(string.format("  %-58s p50 %7.1f  p95 %7.1f", "fleet: on the node that paused it (through the store)", own.p50, own.p95))
print(string.format("  %-58s p50 %7.1f  p95 %7.1f", "fleet: on the other node (through the store)", other.p50, other.p95))
print(string.format("  %-58s p50 %7.1f  p95 %7.1f", "one airlockd, no fleet (its kept sandbox)", single.p50, single.p95))
print(string.format("  ratios of medians: other / own node %.2f×, own node / one airlockd %.2f×", other.p50 / own.p50,
  own.p50 / single.p50))
print("  load average after each round: " .. table.concat(loads, " | "))
