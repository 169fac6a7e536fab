-- luacheck: max line length 140
-- airlockd latency per operation, side by side with the bare `runsc run` it wraps, in one run
-- (these machines are noisy: only ratios measured together mean anything).
--
--   make bench        (or: lua5.4 bench/airlockd_latency.lua [runs])
--
-- Starts airlockd on 127.0.0.1 via spec/support/airlockd.lua and times, over >= 30 runs each:
-- create, write, read, exec `true`, exec `python3 -c 'print(2**16)'`; then the same two
-- commands under a bare `runsc run` with the flags src/server/sandbox/gvisor.c uses, on a minimal OCI bundle of
-- our own over airlockd's generated root (its state dir's sandbox-root) and a scratch
-- workspace. The ratio exec/bare is airlockd's own overhead (HTTP, cgroup, bundle, quota walk).
-- `true` also runs under bare runsc told its cgroup (linux.cgroupsPath, no --ignore-cgroups),
-- as airlockd runs it so that /proc/meminfo shows the 256 MB limit: that ratio is the price.
-- Needs root (runsc), like airlockd. No assertion anywhere: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local bare_runsc = require "support.bare_runsc"
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(30, tonumber(arg and arg[1]) or 30)

local function percentile(sorted, p)
  local idx = math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))
  return sorted[idx]
end

local function measure(fn)
  local t = {}
  for i = 1, RUNS do
    local t0 = socket.gettime()
    fn(i)
    t[i] = (socket.gettime() - t0) * 1000
  end
  table.sort(t)
  return { p50 = percentile(t, 50), p95 = percentile(t, 95) }
end

local check = harness.check
local call = harness.call


-- 16 MB workspace disks: every create makes a fully allocated image, and the runs' sessions
-- must fit the test servers' 8 GB cap (bench/workspace_disks.lua measures the 512 MB default)
local server = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000}}',
          SANDBOX_WORKSPACE_QUOTA_MB = "16" } })
local ok, err = pcall(function()
  check(airlockd.log(server):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(server))
  local key = server.tenants.bench
  local results = {}
  local ids = {}
  results.create = measure(function(i)
    local status, r = call(server, "POST", "/v1/sessions", key, "{}")
    check(status == 201, cjson.encode(r))
    ids[i] = r.session_id
  end)
  for i = 2, #ids do call(server, "DELETE", "/v1/sessions/" .. ids[i], key) end
  local id = ids[1]
  local base = "/v1/sessions/" .. id
  results.write = measure(function(i)
    check(call(server, "POST", base .. "/write", key, '{"path":"f' .. i .. '.txt","content":"hello"}') == 200, "write")
  end)
  results.read = measure(function(i)
    local _, r = call(server, "GET", base .. "/read?path=f" .. i .. ".txt", key)
    check(r.content == "hello", "read")
  end)
  results.exec_true = measure(function()
    local _, r = call(server, "POST", base .. "/exec", key, '{"command":"true"}')
    check(r.exit_code == 0, cjson.encode(r))
  end)
  results.exec_py = measure(function()
    local _, r = call(server, "POST", base .. "/exec", key, cjson.encode({ command = "python3 -c 'print(2**16)'" }))
    check(r.stdout == "65536\n", cjson.encode(r))
  end)

  -- the bare runsc run, same flags as sandbox/gvisor.c, its own root/state/bundle dirs; and
  -- the same with runsc told the run's cgroup (airlockd's way: /proc/meminfo = the limit)
  -- instead of --ignore-cgroups
  local bare_plain = bare_runsc.runner(server, "-plain")
  local cg_root = "airlockd-bench-" .. airlockd.random_hex(4)
  local bare_cg = bare_runsc.runner(server, "-cg", cg_root)
  local function bare(command, expect, runner)
    return function()
      local out = (runner or bare_plain)(command)
      check(out == expect, "bare runsc: " .. out)
    end
  end
  results.bare_true = measure(bare("true", ""))
  results.bare_cg_true = measure(bare("true", "", bare_cg))
  local meminfo = bare_cg("grep MemTotal /proc/meminfo")
  bare_runsc.remove_cgroup_root(cg_root)
  results.bare_py = measure(bare("python3 -c 'print(2**16)'", "65536\n"))

  print(string.format("airlockd latency, %d runs each (ms; lower is better)", RUNS))
  print(string.format("%-36s %9s %9s", "operation", "p50", "p95"))
  local rows = {
    { "create session", "create" }, { "write (5 bytes)", "write" }, { "read", "read" },
    { "exec true", "exec_true" }, { "  bare runsc run true", "bare_true" },
    { "  bare runsc run true, cgroupsPath", "bare_cg_true" },
    { "exec python3 print(2**16)", "exec_py" }, { "  bare runsc run python3", "bare_py" },
  }
  for _, row in ipairs(rows) do
    local r = results[row[2]]
    print(string.format("%-36s %9.1f %9.1f", row[1], r.p50, r.p95))
  end
  print(string.format("%-36s %9.2f %9.2f", "ratio exec/bare (true)", results.exec_true.p50 / results.bare_true.p50,
    results.exec_true.p95 / results.bare_true.p95))
  print(string.format("%-36s %9.2f %9.2f", "ratio exec/bare (python3)", results.exec_py.p50 / results.bare_py.p50,
    results.exec_py.p95 / results.bare_py.p95))
  print(string.format("%-36s %9.2f %9.2f", "ratio cgroupsPath/--ignore-cgroups", results.bare_cg_true.p50 / results.bare_true.p50,
    results.bare_cg_true.p95 / results.bare_true.p95))
  print("  (with cgroupsPath the sandbox sees " .. meminfo:gsub("%s+", " "):gsub(" $", "") .. "; the host's otherwise)")
  print(string.format("%-36s %9.1f %9.1f", "airlockd overhead per exec (true)", results.exec_true.p50 - results.bare_true.p50,
    results.exec_true.p95 - results.bare_true.p95))
end)
airlockd.stop(server)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
