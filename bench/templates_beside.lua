-- luacheck: max line length 140
-- A template build beside 8 busy sessions, airlockd binaries compared (issue #24's "their
-- commands/s >= 0.8x without the build"): one server per binary, each with 8 sessions; round
-- by round, each server in turn (the order rotating) measures the sessions' commands/s alone
-- for 10 s, then beside a fresh build of jq and hello (its own recipe) for 10 s, and waits for
-- that build. Per binary: the ratios beside / alone of its pairs, their median, and the build's
-- seconds from POST to ready (the first round's includes the download). This machine is shared:
-- only figures of one run compare. E.g. another revision's build against this tree's (a copy
-- of airlockd in build/ finds the agent and waiter beside it):
--
--   cp build/airlockd build/airlockd-this; git stash / checkout the other; make; cp build/airlockd build/airlockd-other
--   lua5.4 bench/templates_beside.lua 3 other=build/airlockd-other this=build/airlockd-this
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local busy_sessions = require "busy_sessions"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local cjson = require "cjson"

local call, check = harness.call, harness.check
local ROUNDS = math.max(1, tonumber(arg[1]) or 3)
local SECONDS = 10
local LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000,"max_concurrent_exec":16,"max_template_builds":2}}'
local KEY = "bk_" .. airlockd.random_hex(16)

local variants = {}
for i = 2, #arg do
  local name, bin = arg[i]:match("^([^=]+)=(.+)$")
  check(name, "arguments: [rounds] name=/path/to/airlockd ...")
  variants[#variants + 1] = { name = name, bin = bin, ratios = {}, shown = {}, builds = {} }
end
check(#variants > 0, "arguments: [rounds] name=/path/to/airlockd ...")

local function now()
  local f = io.popen("date +%s.%N")
  local t = tonumber(f:read("*l"))
  f:close()
  return t
end

local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c[math.ceil(#c / 2)]
end

local function wait_built(server, name)
  local rec
  proc.wait_until(900, function()
    local _
    _, rec = call(server, "GET", "/v1/templates/" .. name, KEY)
    return rec.status ~= "building"
  end, 0.5)
  check(rec.status == "ready", name .. " failed:\n" .. tostring(rec.log_tail))
end

local ok, err = pcall(function()
  local binary = airlockd.binary
  for _, v in ipairs(variants) do
    airlockd.binary = function() return v.bin end
    v.server = airlockd.start({ tenants = { bench = KEY }, env = { SANDBOX_TENANT_LIMITS = LIMITS } })
    airlockd.binary = binary
    v.ids = {}
    for i = 1, 8 do
      local status, s = call(v.server, "POST", "/v1/sessions", KEY, "{}")
      check(status == 201, "create: " .. tostring(status))
      v.ids[i] = s.session_id
    end
  end
  for round = 1, ROUNDS do
    for k = 0, #variants - 1 do
      local v = variants[(round + k - 1) % #variants + 1]
      local alone = busy_sessions.rate(v.server, KEY, v.ids, SECONDS)
      local name, t0 = "beside" .. round, now()
      call(v.server, "POST", "/v1/templates", KEY, cjson.encode({ name = name, packages = { "jq", "hello" },
        setup = { "echo " .. round } }))
      local beside = busy_sessions.rate(v.server, KEY, v.ids, SECONDS)
      local _, b = call(v.server, "GET", "/v1/templates/" .. name, KEY)
      check(b.status == "building", "the build ended within the window")
      wait_built(v.server, name)
      v.builds[#v.builds + 1] = now() - t0
      v.ratios[#v.ratios + 1] = beside / alone
      v.shown[#v.shown + 1] = string.format("%.1f/%.1f", beside, alone)
    end
  end
end)

print(string.format("a build beside 8 busy sessions (load average %s)",
  (proc.read_file("/proc/loadavg") or "?"):match("^(%S+ %S+ %S+)")))
for _, v in ipairs(variants) do
  if #v.ratios > 0 then
    local builds = {}
    for i, b in ipairs(v.builds) do builds[i] = string.format("%.0f", b) end
    print(string.format("  %-10s commands/s beside / alone: median %.2f [%s]; build (s): median %.0f [%s]", v.name,
      median(v.ratios), table.concat(v.shown, ", "), median(v.builds), table.concat(builds, ", ")))
  end
  if v.server then airlockd.stop(v.server) end
end
if not ok then error(err, 0) end
