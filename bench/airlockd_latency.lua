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
-- Needs root (runsc), like airlockd. No assertion anywhere: it prints a table.
package.path = "spec/?.lua;" .. package.path
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local fuzz = require "support.fuzz" -- its raw lua-socket client: no curl process per call
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(30, tonumber(arg and arg[1]) or 30)
local q = proc.shell_quote
local write_file = proc.write_file

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

local function check(cond, msg)
  if not cond then error(msg, 2) end
end

-- One request over lua-socket; returns status and the decoded JSON body.
local function call(server, method, path, key, body)
  local status, raw, rbody = fuzz.request(server, method, path, key, body)
  local ok, decoded = pcall(cjson.decode, rbody or "")
  check(status, "no answer: " .. tostring(raw))
  return status, ok and decoded or rbody
end

-- The OCI config src/server/sandbox/oci.c writes, minus nothing that costs time: same mounts, limits,
-- namespaces, user and empty capability sets.
local function bare_config(rootfs, workspace, command)
  local function m(dst, typ, src, opts) return { destination = dst, type = typ, source = src, options = opts } end
  local tmp = { "nosuid", "nodev", "noexec", "size=64m", "mode=1777" }
  local json = cjson.encode({
    ociVersion = "1.0.2",
    process = {
      terminal = false, user = { uid = 1000, gid = 1000 }, args = { "/bin/bash", "-c", command },
      env = { "HOME=/tmp", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }, cwd = "/workspace",
      rlimits = { { type = "RLIMIT_NPROC", hard = 64, soft = 64 }, { type = "RLIMIT_NOFILE", hard = 65536, soft = 65536 },
        { type = "RLIMIT_CORE", hard = 0, soft = 0 } },
      noNewPrivileges = true,
    },
    root = { path = rootfs, readonly = true },
    hostname = "sandbox",
    mounts = {
      m("/proc", "proc", "proc", { "nosuid", "noexec", "nodev" }),
      m("/dev", "tmpfs", "tmpfs", { "nosuid", "strictatime", "mode=755", "size=65536k" }),
      m("/dev/pts", "devpts", "devpts", { "nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620" }),
      m("/dev/shm", "tmpfs", "shm", tmp),
      m("/sys", "sysfs", "sysfs", { "nosuid", "noexec", "nodev", "ro" }),
      m("/usr", "bind", "/usr", { "rbind", "ro", "nosuid", "nodev" }),
      m("/workspace", "bind", workspace, { "rbind", "rw", "nosuid", "nodev" }),
      m("/tmp", "tmpfs", "tmpfs", tmp),
    },
    linux = { namespaces = { { type = "pid" }, { type = "network" }, { type = "ipc" }, { type = "uts" }, { type = "mount" } } },
  })
  -- every capability set empty (lua-cjson encodes an empty table as an object, so splice it in)
  local caps = '"capabilities":{"bounding":[],"effective":[],"inheritable":[],"permitted":[],"ambient":[]},'
  local spliced, count = json:gsub('"noNewPrivileges":true,?', function(w) return caps .. w end, 1)
  check(count == 1, "cannot place capabilities in the OCI config")
  return spliced
end

local runsc = os.getenv("AIRLOCK_RUNSC") or ".deps/runsc/usr/bin/runsc"
local server = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000}}' } })
local ok, err = pcall(function()
  check(airlockd.log(server):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(server))
  local key = server.tenants.bench
  local results = {}
  local ids = {}
  results.create = measure(function(i)
    local status, r = call(server, "POST", "/v1/sessions", key, "{}")
    check(status == 201, r)
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

  -- the bare runsc run, same flags as sandbox/gvisor.c, its own root/state/bundle dirs
  local rootfs = server.dir .. "/state/sandbox-root"
  local dir = server.dir .. "/bare"
  check(os.execute("mkdir -p " .. q(dir .. "/ws") .. " " .. q(dir .. "/root") .. " && chown 1000:1000 " .. q(dir .. "/ws")), "mkdir")
  local n = 0
  local function bare(command, expect)
    return function()
      n = n + 1
      local bundle = dir .. "/b" .. n
      os.execute("mkdir -p " .. q(bundle))
      write_file(bundle .. "/config.json", bare_config(rootfs, dir .. "/ws", command))
      local p = io.popen(table.concat({ q(runsc), "--root", q(dir .. "/root"), "--platform=systrap", "--network=none",
        "--overlay2=none", "--ignore-cgroups", "--host-uds=none", "run", "--bundle", q(bundle), "bench-bare-" .. n }, " ") .. " 2>&1")
      local out = p:read("*a")
      p:close()
      check(out == expect, "bare runsc: " .. out)
      os.execute("rm -rf " .. q(bundle))
    end
  end
  results.bare_true = measure(bare("true", ""))
  results.bare_py = measure(bare("python3 -c 'print(2**16)'", "65536\n"))

  print(string.format("airlockd latency, %d runs each (ms; lower is better)", RUNS))
  print(string.format("%-36s %9s %9s", "operation", "p50", "p95"))
  local rows = {
    { "create session", "create" }, { "write (5 bytes)", "write" }, { "read", "read" },
    { "exec true", "exec_true" }, { "  bare runsc run true", "bare_true" },
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
  print(string.format("%-36s %9.1f %9.1f", "airlockd overhead per exec (true)", results.exec_true.p50 - results.bare_true.p50,
    results.exec_true.p95 - results.bare_true.p95))
end)
airlockd.stop(server)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
