-- luacheck: max line length 140
-- Warm sandboxes (issue #10): airlockd with sandboxes booted ahead (the default) beside the
-- same airlockd with SANDBOX_WARM_MAX=0 (today's cold path: every command boots its sandbox)
-- and beside a bare `runsc run` of the same command, in one run, interleaved round by round
-- (this machine is shared and loaded: only figures taken together mean anything; the load
-- average is printed with them).
--
--   make bench        (or: lua5.4 bench/warm.lua [runs])      BENCH_SMOKE=1: 3 runs, pause 0.2 s
--
-- Rows: exec `true` and `python3 -c 'print(2**16)'` end to end over HTTP (lua-socket, no curl
-- process), each after a pause of PAUSE seconds as between an agent's tool calls (the pause
-- is not timed; it is when the next sandbox boots); create session + first exec; 20 commands
-- back to back in one session, each sent when the previous answered; and the host memory of a
-- sandbox waiting for its command (its processes' VmRSS and Pss from /proc, and its memory
-- cgroup's charge). Needs root (runsc), like airlockd. No assertion: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local bare_runsc = require "support.bare_runsc"
local host_state = require "support.host_state"
local proc = require "support.proc"
local cjson = require "cjson"

local SMOKE = os.getenv("BENCH_SMOKE") == "1"
local RUNS = SMOKE and 3 or math.max(10, tonumber(arg and arg[1]) or 20)
local PAUSE = SMOKE and 0.2 or 1.0
local BACK_TO_BACK = SMOKE and 4 or 20

local function percentile(sorted, p)
  local idx = math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))
  return sorted[idx]
end

local function stats(t)
  table.sort(t)
  return { p50 = percentile(t, 50), p95 = percentile(t, 95) }
end

local check = harness.check
local call = harness.call

local function loadavg()
  return (proc.read_file("/proc/loadavg") or "?"):match("^(%S+ %S+ %S+)")
end

local timed = harness.timed

local LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000,"max_concurrent_exec":8}}'
local warm = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) }, env = { SANDBOX_TENANT_LIMITS = LIMITS } })
local cold = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_WARM_MAX = "0" } })

local function new_session(server)
  local status, r = call(server, "POST", "/v1/sessions", server.tenants.bench, "{}")
  check(status == 201, r)
  return r.session_id
end

local function exec(server, id, command, expect)
  local _, r = call(server, "POST", "/v1/sessions/" .. id .. "/exec", server.tenants.bench, cjson.encode({ command = command }))
  check(type(r) == "table" and r.stdout == expect and r.exit_code == 0, cjson.encode(r))
end

-- VmRSS and Pss (kB) summed over the processes of the waiting sandboxes' groups, and the
-- groups' memory charge; per sandbox.
local function idle_cost(server)
  local root = host_state.cgroup_root(server.dir .. "/state")
  local groups = host_state.waiting_sandboxes(root)
  local rss, pss, charge, procs = 0, 0, 0, 0
  for _, g in ipairs(groups) do
    for pid in (proc.read_file(g .. "/cgroup.procs") or ""):gmatch("%d+") do
      procs = procs + 1
      rss = rss + (host_state.status_kb(pid, "VmRSS") or 0)
      pss = pss + (tonumber(((proc.read_file("/proc/" .. pid .. "/smaps_rollup") or ""):match("\nPss:%s*(%d+) kB"))) or 0)
    end
    charge = charge + (tonumber(host_state.cgroup_value(g:gsub("/freezer/", "/memory/"), "memory.usage_in_bytes")) or 0)
  end
  local n = math.max(1, #groups)
  return { n = #groups, procs = procs / n, rss = rss / n / 1024, pss = pss / n / 1024, charge = charge / n / 1048576 }
end

local ok, err = pcall(function()
  for _, s in ipairs({ warm, cold }) do
    check(airlockd.log(s):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(s))
  end
  local load_before = loadavg()
  local bare = bare_runsc.runner(warm, "-plain")
  local sessions = { warm = new_session(warm), cold = new_session(cold) }
  exec(warm, sessions.warm, "true", "") -- the next sandbox boots
  exec(cold, sessions.cold, "true", "")
  local t = { true_warm = {}, true_cold = {}, true_bare = {}, py_warm = {}, py_cold = {}, py_bare = {},
    first_warm = {}, first_cold = {} }
  local PY = "python3 -c 'print(2**16)'"
  for _ = 1, RUNS do
    for _, kind in ipairs({ "warm", "cold" }) do
      local server = kind == "warm" and warm or cold
      proc.sleep(PAUSE)
      t["true_" .. kind][#t["true_" .. kind] + 1] = timed(function() exec(server, sessions[kind], "true", "") end)
      proc.sleep(PAUSE)
      t["py_" .. kind][#t["py_" .. kind] + 1] = timed(function() exec(server, sessions[kind], PY, "65536\n") end)
      local id
      t["first_" .. kind][#t["first_" .. kind] + 1] = timed(function()
        id = new_session(server)
        exec(server, id, "true", "")
      end)
      call(server, "DELETE", "/v1/sessions/" .. id, server.tenants.bench)
    end
    t.true_bare[#t.true_bare + 1] = timed(function() check(bare("true") == "", "bare true") end)
    t.py_bare[#t.py_bare + 1] = timed(function() check(bare(PY) == "65536\n", "bare python3") end)
  end
  local b2b = {}
  for _, kind in ipairs({ "warm", "cold" }) do
    local server = kind == "warm" and warm or cold
    proc.sleep(PAUSE)
    b2b[kind] = timed(function()
      for _ = 1, BACK_TO_BACK do exec(server, sessions[kind], "true", "") end
    end)
  end
  b2b.bare = timed(function()
    for _ = 1, BACK_TO_BACK do check(bare("true") == "", "bare true") end
  end)
  proc.sleep(PAUSE * 2) -- its next sandbox waits now
  local idle = idle_cost(warm)
  local load_after = loadavg()

  local s = {}
  for k, v in pairs(t) do s[k] = stats(v) end
  print(string.format("warm sandboxes, %d runs each, %.1f s between commands (ms; lower is better); load average %s -> %s",
    RUNS, PAUSE, load_before, load_after))
  print(string.format("%-40s %13s %13s %13s %8s", "measure", "cold (today)", "warm", "bare runsc", "warm/cold"))
  local function row(name, c, w, b)
    print(string.format("%-40s %13s %13s %13s %8.2f", name, c[2], w[2], b and b[2] or "-", w[1] / c[1]))
  end
  local function pp(x) return { x.p50, string.format("%.0f / %.0f", x.p50, x.p95) } end
  local function p50(x) return { x.p50, string.format("%.0f", x.p50) } end
  row("exec true, p50 / p95", pp(s.true_cold), pp(s.true_warm), pp(s.true_bare))
  row("exec python3 print(2**16), p50", p50(s.py_cold), p50(s.py_warm), p50(s.py_bare))
  row("create session + first exec true, p50", p50(s.first_cold), p50(s.first_warm), nil)
  row(string.format("%d x exec true back to back, total", BACK_TO_BACK), { b2b.cold, string.format("%.0f", b2b.cold) },
    { b2b.warm, string.format("%.0f", b2b.warm) }, { b2b.bare, string.format("%.0f", b2b.bare) })
  print(string.format("a sandbox waiting for its command (%d now): %.0f host processes, VmRSS sum %.1f MB, Pss sum %.1f MB, "
    .. "memory cgroup charge %.1f MB", idle.n, idle.procs, idle.rss, idle.pss, idle.charge))
end)
airlockd.stop(warm)
airlockd.stop(cold)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
