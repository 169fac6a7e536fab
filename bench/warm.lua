-- luacheck: max line length 140
-- Warm sandboxes (issue #10) and a session's own sandbox (issue #19): airlockd with
-- SANDBOX_EXEC_MODE=command and sandboxes booted ahead (the default before issue #19), the same
-- with SANDBOX_WARM_MAX=0 (the cold path: every command boots its sandbox), airlockd as it
-- comes (SANDBOX_EXEC_MODE=session: one sandbox per session, a fresh container per command from
-- its agent) and a bare `runsc run` of the same
-- command, in one run, interleaved round by round (this machine is shared and loaded: only
-- figures taken together mean anything; the load average is printed with them).
--
--   make bench        (or: lua5.4 bench/warm.lua [runs])      BENCH_SMOKE=1: 2 runs, pause 0.2 s, 2 in parallel
--   BENCH_PAUSE=s: the pause between spaced commands (default 0.3 s, the issue's)
--
-- Rows: exec `true` and `python3 -c pass` end to end over HTTP (lua-socket, no curl process),
-- each after a pause of PAUSE seconds as between an agent's tool calls (the pause is not
-- timed; it is when the next sandbox boots); create session + first exec; 20 commands back to
-- back in one session, each sent when the previous answered; host CPU per command over those
-- 20 (the server's cgroup tree's cpuacct.usage, every sandbox and runsc in it, plus airlockd's
-- own utime + stime from /proc/<pid>/stat); commands per second with 8 sessions in parallel,
-- each sending 20 x `true` back to back (curl processes); and the host memory of a sandbox
-- waiting for its command (its processes' VmRSS and Pss from /proc/<pid>/smaps_rollup, and its
-- memory cgroup's charge). Needs root (runsc), like airlockd. No assertion: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local bare_runsc = require "support.bare_runsc"
local host_state = require "support.host_state"
local proc = require "support.proc"
local cjson = require "cjson"

local SMOKE = os.getenv("BENCH_SMOKE") == "1"
local RUNS = SMOKE and 2 or math.max(10, tonumber(arg and arg[1]) or 20)
local PAUSE = SMOKE and 0.2 or tonumber(os.getenv("BENCH_PAUSE")) or 0.3
local PARALLEL = SMOKE and 2 or 8
local BACK_TO_BACK = SMOKE and 3 or 20

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

local timed = harness.timed

local LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000,"max_concurrent_exec":8}}'
local warm = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "command" } })
local cold = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_WARM_MAX = "0", SANDBOX_EXEC_MODE = "command" } })
local sess = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session" } }) -- (the default)
local SERVERS = { warm = warm, cold = cold, sess = sess }
local KINDS = { "warm", "cold", "sess" }

local function new_session(server)
  local status, r = call(server, "POST", "/v1/sessions", server.tenants.bench, "{}")
  check(status == 201, r)
  return r.session_id
end

local function exec(server, id, command, expect)
  local _, r = call(server, "POST", "/v1/sessions/" .. id .. "/exec", server.tenants.bench, cjson.encode({ command = command }))
  check(type(r) == "table" and r.stdout == expect and r.exit_code == 0, cjson.encode(r))
end

-- VmRSS and Pss (kB) summed over the processes of the waiting sandboxes' groups (those whose
-- name has `pattern`, when given), and the groups' memory charge; per sandbox.
local function idle_cost(server, pattern)
  local root = host_state.cgroup_root(server.dir .. "/state")
  local groups = {}
  for _, g in ipairs(host_state.waiting_sandboxes(root)) do
    if not pattern or g:match("[^/]+$"):find(pattern) then groups[#groups + 1] = g end
  end
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

-- Host CPU seconds so far of server: its cgroup tree (every sandbox, runsc and gofer) and
-- airlockd itself.
local CLK_TCK = tonumber(proc.output("getconf CLK_TCK")) or 100
local function cpu_seconds(server)
  local root = host_state.cgroup_root(server.dir .. "/state")
  local tree = tonumber(host_state.cgroup_value("/sys/fs/cgroup/cpuacct/" .. root, "cpuacct.usage")
    or host_state.cgroup_value("/sys/fs/cgroup/cpu,cpuacct/" .. root, "cpuacct.usage")) or 0
  local stat = proc.read_file("/proc/" .. server.pid .. "/stat") or ""
  local utime, stime = stat:match("^%d+ %b() %a " .. string.rep("%S+ ", 10) .. "(%d+) (%d+)")
  return tree / 1e9 + ((tonumber(utime) or 0) + (tonumber(stime) or 0)) / CLK_TCK
end

-- Commands per second: PARALLEL sessions of server, each sending n x `true` back to back.
local function parallel_rate(server, n)
  local ids = {}
  for i = 1, PARALLEL do ids[i] = new_session(server) end
  for i = 1, PARALLEL do exec(server, ids[i], "true", "") end -- their sandboxes are up
  proc.sleep(PAUSE)
  local q = proc.shell_quote
  local loops = {}
  for i = 1, PARALLEL do
    loops[i] = string.format("(for j in $(seq %d); do curl -sf -o /dev/null -H 'Content-Type: application/json' -H %s "
      .. "--data-binary '{\"command\":\"true\"}' %s || echo fail; done) &", n, q("X-API-Key: " .. server.tenants.bench),
      q(server.url .. "/v1/sessions/" .. ids[i] .. "/exec"))
  end
  local out
  local ms = timed(function() out = proc.output(table.concat(loops, " ") .. " wait") end)
  check(not out:find("fail", 1, true), "a parallel exec failed")
  for i = 1, PARALLEL do call(server, "DELETE", "/v1/sessions/" .. ids[i], server.tenants.bench) end
  return PARALLEL * n / (ms / 1000)
end

local ok, err = pcall(function()
  for _, s in ipairs({ warm, cold, sess }) do
    check(airlockd.log(s):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(s))
  end
  local load_before = harness.loadavg()
  local bare = bare_runsc.runner(warm, "-plain")
  local sessions = { warm = new_session(warm), cold = new_session(cold), sess = new_session(sess) }
  for _, kind in ipairs(KINDS) do exec(SERVERS[kind], sessions[kind], "true", "") end -- the next sandbox boots
  local t = { true_warm = {}, true_cold = {}, true_bare = {}, py_warm = {}, py_cold = {}, py_bare = {},
    first_warm = {}, first_cold = {}, true_sess = {}, py_sess = {}, first_sess = {} }
  local PY = "python3 -c pass"
  for _ = 1, RUNS do
    for _, kind in ipairs(KINDS) do
      local server = SERVERS[kind]
      proc.sleep(PAUSE)
      t["true_" .. kind][#t["true_" .. kind] + 1] = timed(function() exec(server, sessions[kind], "true", "") end)
      proc.sleep(PAUSE)
      t["py_" .. kind][#t["py_" .. kind] + 1] = timed(function() exec(server, sessions[kind], PY, "") end)
      local id
      t["first_" .. kind][#t["first_" .. kind] + 1] = timed(function()
        id = new_session(server)
        exec(server, id, "true", "")
      end)
      call(server, "DELETE", "/v1/sessions/" .. id, server.tenants.bench)
    end
    t.true_bare[#t.true_bare + 1] = timed(function() check(bare("true") == "", "bare true") end)
    t.py_bare[#t.py_bare + 1] = timed(function() check(bare(PY) == "", "bare python3") end)
  end
  local b2b, cpu = {}, {}
  for _, kind in ipairs(KINDS) do
    local server = SERVERS[kind]
    proc.sleep(PAUSE)
    local c0 = cpu_seconds(server)
    b2b[kind] = timed(function()
      for _ = 1, BACK_TO_BACK do exec(server, sessions[kind], "true", "") end
    end)
    proc.sleep(PAUSE) -- the boot of the next sandbox after the last command is its cost too
    cpu[kind] = (cpu_seconds(server) - c0) * 1000 / BACK_TO_BACK
  end
  proc.sleep(math.max(1, PAUSE * 2)) -- its next sandbox waits now
  -- before the parallel sessions, which would evict them (SANDBOX_WARM_MAX)
  local idle = idle_cost(warm)
  local idle_sess = idle_cost(sess, "%-s%-")
  local rate = {}
  for _, kind in ipairs(KINDS) do rate[kind] = parallel_rate(SERVERS[kind], SMOKE and 2 or BACK_TO_BACK) end
  b2b.bare = timed(function()
    for _ = 1, BACK_TO_BACK do check(bare("true") == "", "bare true") end
  end)
  local load_after = harness.loadavg()

  local s = {}
  for k, v in pairs(t) do s[k] = stats(v) end
  print(string.format("warm sandboxes, %d runs each, %.1f s between commands (ms; lower is better); load average %s -> %s",
    RUNS, PAUSE, load_before, load_after))
  print(string.format("%-40s %12s %12s %12s %12s %9s %9s %9s", "measure", "cold", "warm (cmd)", "session", "bare runsc",
    "warm/cold", "sess/warm", "sess/bare"))
  local function ratio(a, b) return (a and b and b ~= 0) and string.format("%.2f", a / b) or "-" end
  local function row(name, c, w, se, b)
    print(string.format("%-40s %12s %12s %12s %12s %9s %9s %9s", name, c[2], w[2], se[2], b and b[2] or "-",
      ratio(w[1], c[1]), ratio(se[1], w[1]), ratio(se[1], b and b[1])))
  end
  local function pp(x) return { x.p50, string.format("%.0f / %.0f", x.p50, x.p95) } end
  local function p50(x) return { x.p50, string.format("%.0f", x.p50) } end
  local function one(x, fmt) return { x, string.format(fmt or "%.0f", x) } end
  row(string.format("exec true %.1f s apart, p50 / p95", PAUSE), pp(s.true_cold), pp(s.true_warm), pp(s.true_sess), pp(s.true_bare))
  row("exec python3 -c pass, p50", p50(s.py_cold), p50(s.py_warm), p50(s.py_sess), p50(s.py_bare))
  row("create session + first exec true, p50", p50(s.first_cold), p50(s.first_warm), p50(s.first_sess), p50(s.true_bare))
  row(string.format("%d x exec true back to back, total", BACK_TO_BACK), one(b2b.cold), one(b2b.warm), one(b2b.sess),
    one(b2b.bare))
  row("host CPU ms per command (back to back)", one(cpu.cold), one(cpu.warm), one(cpu.sess), nil)
  row(string.format("commands/s, %d sessions in parallel", PARALLEL), one(rate.cold, "%.1f"), one(rate.warm, "%.1f"),
    one(rate.sess, "%.1f"), nil)
  print(string.format("a sandbox waiting for its command (%d now): %.0f host processes, VmRSS sum %.1f MB, Pss sum %.1f MB, "
    .. "memory cgroup charge %.1f MB", idle.n, idle.procs, idle.rss, idle.pss, idle.charge))
  print(string.format("a session's own sandbox, idle (%d now): %.0f host processes, VmRSS sum %.1f MB, Pss sum %.1f MB, "
    .. "memory cgroup charge %.1f MB", idle_sess.n, idle_sess.procs, idle_sess.rss, idle_sess.pss, idle_sess.charge))
end)
airlockd.stop(warm)
airlockd.stop(cold)
airlockd.stop(sess)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
