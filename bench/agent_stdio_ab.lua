-- luacheck: max line length 140
-- A/B of two airlockd builds with SANDBOX_EXEC_MODE=session, e.g. main against a branch that
-- changes how airlockd talks to the session sandbox's agent (issue #26: the agent on stdio):
-- both servers up at once, measured in interleaved rounds (A then B, then B then A, ...) since
-- this machine is shared and loaded: only figures taken side by side mean anything.
--
--   BENCH_A=/tmp/main/build/airlockd BENCH_B=build/airlockd lua5.4 bench/agent_stdio_ab.lua [rounds]
--   (defaults: A /work/main/build/airlockd, B build/airlockd, 10 rounds; each build's agent is
--   the one beside it; needs root, like airlockd)
--
-- Rows, per build: exec `true` after a pause of 0.3 s (5 a round, p50 and p95), 20 `true` back
-- to back in one session (ms per command, p50 of the rounds), create session + first exec
-- `true` (2 a round, p50); then B/A of each, and the median of the rounds' own B/A.
-- BENCH_VERBOSE=1 also prints every sample, in the order taken; BENCH_FIRSTS=n: n creates a round.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local stats = require "stats"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local cjson = require "cjson"

local ROUNDS = math.max(2, tonumber(arg and arg[1]) or 10)
local PAUSE = 0.3
local SPACED = 5
local BACK_TO_BACK = 20
local FIRSTS = tonumber(os.getenv("BENCH_FIRSTS")) or 2
local check, call, timed = harness.check, harness.call, harness.timed

local LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000,"max_concurrent_exec":8}}'
local function start(bin)
  return airlockd.start({ binary = bin, tenants = { bench = "bk_" .. airlockd.random_hex(16) },
    env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session" } })
end

local A = os.getenv("BENCH_A") or "/work/main/build/airlockd"
local B = os.getenv("BENCH_B") or "build/airlockd"
local servers = { a = start(A), b = start(B) }

local function new_session(server)
  local status, r = call(server, "POST", "/v1/sessions", server.tenants.bench, "{}")
  check(status == 201, cjson.encode(r))
  return r.session_id
end

local function exec_true(server, id)
  local _, r = call(server, "POST", "/v1/sessions/" .. id .. "/exec", server.tenants.bench, '{"command":"true"}')
  check(type(r) == "table" and r.stdout == "" and r.exit_code == 0, cjson.encode(r))
end

local ok, err = pcall(function()
  for _, s in pairs(servers) do
    check(airlockd.log(s):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(s))
  end
  local sessions = {}
  for k, s in pairs(servers) do
    sessions[k] = new_session(s)
    exec_true(s, sessions[k])
  end
  proc.sleep(2) -- both pools have their next sandbox up
  local t = { a = { spaced = {}, b2b = {}, first = {} }, b = { spaced = {}, b2b = {}, first = {} } }
  local load_before = harness.loadavg()
  for round = 1, ROUNDS do
    for _, k in ipairs(round % 2 == 1 and { "a", "b" } or { "b", "a" }) do
      local s, m = servers[k], t[k]
      for _ = 1, SPACED do
        proc.sleep(PAUSE)
        m.spaced[#m.spaced + 1] = timed(function() exec_true(s, sessions[k]) end)
      end
      proc.sleep(PAUSE)
      m.b2b[#m.b2b + 1] = timed(function()
        for _ = 1, BACK_TO_BACK do exec_true(s, sessions[k]) end
      end) / BACK_TO_BACK
      for _ = 1, FIRSTS do
        proc.sleep(PAUSE)
        local id
        m.first[#m.first + 1] = timed(function()
          id = new_session(s)
          exec_true(s, id)
        end)
        call(s, "DELETE", "/v1/sessions/" .. id, s.tenants.bench)
        proc.sleep(2) -- its pool boots the next sandbox: not while the other build is measured
      end
    end
  end
  local load_after = harness.loadavg()
  print(string.format("\nA = %s\nB = %s\n%d rounds, interleaved; load average before %s, after %s\n",
    A, B, ROUNDS, load_before, load_after))
  local function p(list, pct)
    local c = {}
    for i, v in ipairs(list) do c[i] = v end
    table.sort(c)
    return stats.percentile(c, pct)
  end
  -- the rounds' own ratios (spaced: the median of each round's five)
  local function round_ratios(name, per)
    local r = {}
    for i = 1, ROUNDS do
      local function of(k)
        local l = {}
        for j = 1, per do l[j] = t[k][name][(i - 1) * per + j] end
        return stats.median(l)
      end
      r[i] = of("b") / of("a")
    end
    return stats.median(r)
  end
  print(string.format("%-44s %10s %10s %8s %12s", "ms", "A (main)", "B", "B/A", "rounds' B/A"))
  local function row(label, name, pct, per)
    local a, b = p(t.a[name], pct), p(t.b[name], pct)
    print(string.format("%-44s %10.1f %10.1f %8.3f %12s", label, a, b, b / a, per and string.format("%.3f", round_ratios(name, per)) or ""))
  end
  row(string.format("exec true %.1f s apart, p50", PAUSE), "spaced", 50, SPACED)
  row(string.format("exec true %.1f s apart, p95", PAUSE), "spaced", 95)
  row(string.format("%d x true back to back, per command, p50", BACK_TO_BACK), "b2b", 50, 1)
  row("create session + first exec true, p50", "first", 50, FIRSTS)
  if os.getenv("BENCH_VERBOSE") == "1" then
    for _, name in ipairs({ "spaced", "b2b", "first" }) do
      for _, k in ipairs({ "a", "b" }) do
        local l = {}
        for i, v in ipairs(t[k][name]) do l[i] = string.format("%.0f", v) end
        print(string.format("%s %s: %s", name, k, table.concat(l, " ")))
      end
    end
  end
end)
for _, s in pairs(servers) do airlockd.stop(s) end
if not ok then error(err, 0) end
