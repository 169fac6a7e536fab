-- luacheck: max line length 140
-- Kernels (issue 25's measures), side by side in one run through the SDK against airlockd
-- (no assertion: it prints figures and ratios; this machine is shared, only figures taken
-- together mean anything):
--  1. a trivial cell (`1 + 1`, k:run) vs `sbx:run("python3 -c pass")`, interleaved: p50 and
--     their ratio (goal <= 0.2x);
--  2. a cell using a 1M-entry dict the kernel already holds vs a fresh run that reloads it
--     from the workspace (a pickle: the quickest reload; a CSV: as an agent's script reads
--     its data), interleaved: p50 and their ratios (goal <= 0.01x);
--  3. an idle kernel: its CPU time over IDLE seconds of no cells (the kernel's own
--     getrusage, read by a cell before and after; goal 0) and its VmRSS (from its
--     /proc/self/status) vs a bare interpreter's (`python3 -c` reading its own; goal <= + 5 MB).
--
--   make bench   (or: lua5.4 bench/kernels.lua [rounds])    BENCH_SMOKE=1: 3 rounds, a 100k dict, 1 s idle
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local harness = require "harness"
local proc = require "support.proc"
local stats = require "stats"

local SMOKE = os.getenv("BENCH_SMOKE") == "1"
local ROUNDS = SMOKE and 3 or math.max(5, tonumber(arg and arg[1]) or 20)
local ENTRIES = SMOKE and 100000 or 1000000
local IDLE = SMOKE and 1 or 5

local check, timed = harness.check, harness.timed
local srv = airlockd.start()
-- room for the kernel's dict and a fresh run's copy of it side by side
local sbx = airlock.sandbox({ base_url = srv.url, api_key = srv.tenants.acme, memory_mb = 1024 })

local function fmt(ms) return string.format("%8.1f ms", ms) end

local function ok_cell(k, code)
  local r = k:run(code, { timeout = 60 })
  check(r.ok, tostring(r))
  return r
end

local function ok_run(command)
  local r = sbx:run(command, { timeout = 60 })
  check(r.ok, r.output)
  return r
end

-- VmRSS (kB) in a /proc/<pid>/status text.
local function vmrss(text)
  return tonumber(tostring(text):match("VmRSS:%s*(%d+)"))
end

local ok, err = pcall(function()
  print(string.format("kernels bench: %d rounds, interleaved; load %s", ROUNDS,
    (io.open("/proc/loadavg"):read("*l") or "?"):match("^(%S+ %S+ %S+)")))

  -- 3 first, on a kernel that has run trivial cells only
  local k = sbx:kernel()
  ok_cell(k, "import resource, time")
  ok_cell(k, "1 + 1")
  ok_cell(k, "t0 = resource.getrusage(resource.RUSAGE_SELF); w0 = time.monotonic()")
  proc.sleep(IDLE)   -- the idle time itself (no cell runs)
  local idle = ok_cell(k, "t1 = resource.getrusage(resource.RUSAGE_SELF)\n"
    .. "round((t1.ru_utime - t0.ru_utime + t1.ru_stime - t0.ru_stime) * 1000, 3), round(time.monotonic() - w0, 1)").text
  local kernel_rss = vmrss(ok_cell(k, "print(open('/proc/self/status').read())").stdout)
  local bare_rss = vmrss(ok_run("python3 -c \"print(open('/proc/self/status').read())\"").stdout)
  local idle_ms, idle_s = idle:match("^%(([%d.]+), ([%d.]+)%)$")
  print(string.format("idle    kernel CPU over %s s without cells: %s ms (goal 0)", idle_s or "?", idle_ms or idle))
  print(string.format("memory  idle kernel VmRSS %d kB, bare python3 VmRSS %d kB: +%.1f MB (goal <= +5 MB)",
    kernel_rss or -1, bare_rss or -1, ((kernel_rss or 0) - (bare_rss or 0)) / 1024))

  -- 1: trivial cell vs python3 -c pass
  local cell, run = {}, {}
  for _ = 1, ROUNDS do
    cell[#cell + 1] = timed(function() check(k:run("1 + 1").text == "2", "1 + 1") end)
    run[#run + 1] = timed(function() ok_run("python3 -c pass") end)
  end
  local c, r = stats.summary(cell), stats.summary(run)
  print(string.format("trivial cell `1 + 1` p50 %s   sbx:run(\"python3 -c pass\") p50 %s   ratio %.3fx (goal <= 0.2x)",
    fmt(c.p50), fmt(r.p50), c.p50 / r.p50))

  -- 2: state already loaded vs reloading it (from a pickle: the quickest reload; from a CSV: as
  -- an agent's script reads its data)
  local load_ms = timed(function()
    ok_cell(k, string.format("import csv, pickle\nd = {i: str(i) for i in range(%d)}\n"
      .. "with open('d.pickle', 'wb') as f:\n    pickle.dump(d, f)\n"
      .. "with open('d.csv', 'w', newline='') as f:\n    csv.writer(f).writerows(d.items())", ENTRIES))
  end)
  local probe = string.format("len(d), d[%d]", ENTRIES - 1)
  local expect = string.format("(%d, '%d')", ENTRIES, ENTRIES - 1)
  local RELOADS = {
    pickle = "import pickle\nd = pickle.load(open('d.pickle', 'rb'))",
    csv = "import csv\nd = {int(k): v for k, v in csv.reader(open('d.csv', newline=''))}",
  }
  -- the cell using it is timed three ways each round: right on the heels of a command (the
  -- sandbox then still busy for ~10 ms: its agent tears the command's container down and makes
  -- the next one), PAUSE s after one (an agent's calls are a model's turn apart), and FROZEN s
  -- after one (its sandbox frozen by then: the cell thaws it)
  local PAUSE, FROZEN = 0.3, 1.6
  local reuse, reload = { now = {}, pause = {}, frozen = {} }, { pickle = {}, csv = {} }
  local function reuse_cell(after)
    reuse[after][#reuse[after] + 1] = timed(function() check(k:run(probe).text == expect, probe) end)
  end
  for _ = 1, ROUNDS do
    for _, how in ipairs({ "pickle", "csv" }) do
      reload[how][#reload[how] + 1] = timed(function()
        local out = ok_run("python3 -c \"" .. RELOADS[how] .. "\nprint((" .. probe .. "))\"").stdout
        check(out == expect .. "\n", out)
      end)
    end
    reuse_cell("now")
    proc.sleep(PAUSE)
    reuse_cell("pause")
    proc.sleep(FROZEN)
    reuse_cell("frozen")
  end
  print(string.format("state   %d-entry dict (built, pickled and written as CSV once in the kernel: %.0f ms)", ENTRIES, load_ms))
  for _, after in ipairs({ { "now", "right after a command" }, { "pause", PAUSE .. " s after a command" },
                           { "frozen", FROZEN .. " s after (frozen)" } }) do
    local u = stats.summary(reuse[after[1]])
    for _, how in ipairs({ "pickle", "csv" }) do
      local l = stats.summary(reload[how])
      print(string.format("        a cell using it %-24s p50 %s   a fresh run reloading it %-8s p50 %s   ratio %.4fx (goal <= 0.01x)",
        after[2], fmt(u.p50), "(" .. how .. ")", fmt(l.p50), u.p50 / l.p50))
    end
  end
  k:close()
end)

sbx:close()
airlockd.stop(srv)
if not ok then
  io.stderr:write("bench/kernels.lua: ", tostring(err), "\n")
  os.exit(1)
end
