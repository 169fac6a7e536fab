-- luacheck: max line length 140
-- A/B of two airlockd builds for a session that holds a kernel (issue 25: the agent makes its
-- next container while a cell may run), both servers up at once, in interleaved rounds (A then B,
-- then B then A): a cell using a 1M-entry dict right after a command (CMD: a python3 run that
-- builds a dict, as a reload does) and 0.3 s after one, 10 `true` back to back, a `true` right
-- after a cell; p50, p95 and B/A of the p50s. Each build's agent is the one beside it.
--
--   BENCH_A=/tmp/main/build/airlockd BENCH_B=build/airlockd lua5.4 bench/kernels_ab.lua [rounds]
--   (defaults: A /work/main/build/airlockd, B build/airlockd, 10 rounds)
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local harness = require "harness"
local proc = require "support.proc"
local stats = require "stats"
local ROUNDS = math.max(2, tonumber(arg and arg[1]) or 10)
local check, timed = harness.check, harness.timed
local builds = { a = os.getenv("BENCH_A") or "/work/main/build/airlockd", b = os.getenv("BENCH_B") or "build/airlockd" }
local S, K, srv = {}, {}, {}
local CMD = os.getenv("CMD") or "python3 -c 'd = {i: str(i) for i in range(300000)}'"
for n, bin in pairs(builds) do
  srv[n] = airlockd.start({ binary = bin })
  S[n] = airlock.sandbox({ base_url = srv[n].url, api_key = srv[n].tenants.acme, memory_mb = 1024 })
end
local res = {}
local function add(n, key, v) res[n .. key] = res[n .. key] or {}; table.insert(res[n .. key], v) end
local ok, err = pcall(function()
  local l0 = io.open("/proc/loadavg"):read("*l")
  for _, n in ipairs({ "a", "b" }) do
    K[n] = S[n]:kernel()
    check(K[n]:run("d = {i: str(i) for i in range(1000000)}", { timeout = 60 }).ok, "load")
  end
  local probe, expect = "len(d), d[999999]", "(1000000, '999999')"
  for r = 1, ROUNDS do
    local order = r % 2 == 1 and { "a", "b" } or { "b", "a" }
    for _, n in ipairs(order) do
      local sbx, k = S[n], K[n]
      check(sbx:run(CMD, { timeout = 60 }).ok, "cmd")
      add(n, "cell_now", timed(function() check(k:run(probe).text == expect, probe) end))
      check(sbx:run(CMD, { timeout = 60 }).ok, "cmd")
      proc.sleep(0.3)
      add(n, "cell_pause", timed(function() check(k:run(probe).text == expect, probe) end))
      for _ = 1, 10 do add(n, "b2b", timed(function() check(sbx:run("true").ok, "true") end)) end
      add(n, "cmd_after_cell", timed(function() check(sbx:run("true").ok, "true") end))
      k:run("1 + 1")
      add(n, "cmd_after_cell", timed(function() check(sbx:run("true").ok, "true") end))
      proc.sleep(0.3)
    end
  end
  print("A " .. builds.a .. "   B " .. builds.b .. "   command: " .. CMD)
  print("load before " .. l0 .. "   after " .. io.open("/proc/loadavg"):read("*l"))
  for _, key in ipairs({ "cell_now", "cell_pause", "b2b", "cmd_after_cell" }) do
    local a, b = stats.p50_p95(res["a" .. key]), stats.p50_p95(res["b" .. key])
    print(string.format("%-16s A p50 %7.1f p95 %7.1f   B p50 %7.1f p95 %7.1f   B/A p50 %.2f  (n=%d)", key, a.p50, a.p95, b.p50, b.p95,
      b.p50 / a.p50, #res["a" .. key]))
  end
end)
for _, n in ipairs({ "a", "b" }) do
  if K[n] then pcall(K[n].close, K[n]) end
  S[n]:close()
  airlockd.stop(srv[n])
end
if not ok then
  io.stderr:write("bench/kernels_ab.lua: ", tostring(err), "\n")
  os.exit(1)
end
