-- luacheck: max line length 160
-- The bubblewrap sandbox (issue #3 item 7, issue 16): asked for with SANDBOX_ISOLATION=bubblewrap
-- (or auto, when runsc is missing), airlockd still isolates every command (uid 1000, only
-- loopback, read-only root, memory and process limits, timeouts) but says loudly that it is
-- the weaker backend: the first log line and the x-airlock-isolation header on /healthz (the
-- healthz body is the contract's, unchanged). Without that setting it never runs on it: no
-- working runsc means no start. airlockd finds the checkout's fetched runsc by itself.
-- Egress works on bubblewrap too (the sandbox joins its namespace pair). A start's probe of
-- runsc is kept until the next boot (/run/airlockd) and made again once runsc's file changes.
-- Lua 5.1-compatible (no <close>).
local root_checks = require "support.root_checks"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"

local http = http_client.request

local function run_capture(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo rc=$?", "r"))
  local out = p:read("*a")
  p:close()
  return out
end

describe("airlockd without runsc (bubblewrap fallback)", function()
  local server, key, id
  local secret = "fb_secret_" .. airlockd.random_hex(12)

  local function exec(command, timeout)
    local r = http_client.exec(server, key, id, command, timeout)
    assert.are.equal(200, r.status, r.body)
    return r.json
  end

  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_ISOLATION = "bubblewrap", AIRLOCK_TEST_SECRET = secret,
                                      SANDBOX_WORKSPACE_QUOTA_MB = "5" } })
    key = server.tenants.acme
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    id = r.json.session_id
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("reports the weaker backend in the first log line and the healthz header, with the exact healthz body", function()
    local log = airlockd.messages(airlockd.log(server))
    assert.are.equal("airlockd: isolation: bubblewrap, the weaker sandbox: commands share the host kernel " ..
      "(asked for by SANDBOX_ISOLATION=bubblewrap)", log:match("^[^\n]*"), log)
    assert.truthy(log:find("(isolation: bubblewrap)", 1, true), log)
    local h = http(server, "GET", "/healthz")
    assert.are.equal(200, h.status)
    assert.are.equal("bubblewrap", h.headers["x-airlock-isolation"])
    assert.are.equal('{"status":"healthy","active_sessions":1}', h.body)
  end)

  it("runs a command with the contract's exact result", function()
    local r = http_client.exec(server, key, id, "echo hi")
    assert.are.equal('{"command":"echo hi","output":"[STDOUT]:\\nhi\\n[EXIT CODE]: 0","stdout":"hi\\n","stderr":"",' ..
      '"exit_code":0,"timed_out":false,"oom_killed":false,"warnings":[]}', r.body)
    assert.are.equal(200, http_client.write(server, key, id, "f.txt", "from the API").status)
    assert.are.equal("from the API|/workspace\n", exec("printf '%s|' \"$(cat f.txt)\"; pwd").stdout)
  end)

  it("runs as uid 1000 with no capabilities and only the sandbox's environment", function()
    local r = exec("id; grep -E '^CapEff' /proc/self/status; env | sort | grep -Ev '^(_|SHLVL)='")
    assert.are.equal("uid=1000(sandboxuser) gid=1000(sandboxuser) groups=1000(sandboxuser)\nCapEff:\t0000000000000000\n" ..
      "HOME=/tmp\nPATH=/workspace/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n" ..
      "PIP_DISABLE_PIP_VERSION_CHECK=1\nPIP_NO_CACHE_DIR=1\nPIP_USER=1\nPWD=/workspace\nPYTHONUSERBASE=/workspace/.local\n", r.stdout)
    -- nor the server's: not in any process visible to the command (bwrap's init included)
    r = exec("grep -ls -e " .. airlockd.shell_quote(secret) .. " -e SANDBOX_API_KEYS /proc/[0-9]*/environ; echo grep=$?")
    assert.are.equal("grep=1\n", r.stdout)
  end)

  it("has no network: only lo, host loopback refused, no route elsewhere, no DNS", function()
    local probe = [[python3 - <<'EOF'
import socket, errno
for host, port in [("127.0.0.1", PORT), ("169.254.169.254", 80), ("192.0.2.1", 443)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(host, "CONNECTED")
    except socket.timeout:
        print(host, "TIMEOUT")
    except OSError as e:
        print(host, errno.errorcode.get(e.errno, e.errno))
EOF
tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; getent hosts example.com; echo dns=$?]]
    local r = exec((probe:gsub("PORT", tostring(server.port))))
    assert.are.equal("127.0.0.1 ECONNREFUSED\n169.254.169.254 ENETUNREACH\n192.0.2.1 ENETUNREACH\nlo\ndns=2\n", r.stdout)
  end)

  it("has a read-only root, a 64 MB noexec /tmp, and no /root or /home", function()
    local r = exec("for d in / /usr /etc /bin; do touch $d/x 2>/dev/null && echo WROTE $d || echo denied $d; done; " ..
      "head -c 100000000 /dev/zero > /tmp/fill 2>/dev/null; stat -c %s /tmp/fill; rm /tmp/fill; " ..
      "cp /bin/true /tmp/t; /tmp/t 2>/dev/null; echo exec=$?; ls -d /root /home 2>&1 | wc -l")
    assert.are.equal("denied /\ndenied /usr\ndenied /etc\ndenied /bin\n67108864\nexec=126\n2\n", r.stdout)
    assert.are.equal("touch: cannot touch '/x': Read-only file system\n",
      exec("touch /x").stderr)
  end)

  it("finds the host's alternatives (awk through /etc/alternatives, bound read-only) and cannot change them", function()
    root_checks.alternatives(exec)
  end)

  it("kills a memory bomb with the memory warning", function()
    local r = exec("python3 -c 'x = bytearray(1024 * 1024 * 1024)'", 30)
    assert.are.equal(137, r.exit_code)
    assert.is_true(r.oom_killed)
    assert.are.same({ "Process killed by cgroups (Memory limit exceeded)." }, r.warnings)
  end)

  it("holds a fork bomb at the process limit", function()
    -- the bomb starts in a subshell: the counting shell forks once, before the bomb exists (its
    -- own `bomb | bomb &` forked twice, the second fork racing the first child's bomb for the
    -- last pids: on a loaded host it lost, retried, and ended with 254 before counting)
    local r = exec('bomb(){ bomb | bomb & }; (bomb) & while ((SECONDS < 3)); do :; done; n=(/proc/[0-9]*); echo "procs ${#n[@]}"', 20)
    assert.is_false(r.timed_out)
    local procs = tonumber(r.stdout:match("^procs (%d+)\n$"))
    -- 64 sandboxed processes plus bwrap's own init
    assert.truthy(procs and procs <= 66, require("cjson").encode({ exit_code = r.exit_code, stdout = r.stdout,
      stderr_head = r.stderr:sub(1, 300), warnings = r.warnings, oom_killed = r.oom_killed }))
    assert.truthy(r.stderr:find("fork: retry: Resource temporarily unavailable", 1, true), r.stderr)
    assert.are.equal("ok\n", exec("echo ok").stdout)
  end)

  it("uses the same workspace disks: df shows the quota, a write past it fails with ENOSPC", function()
    local r = exec("df -k --output=size /workspace | tail -1; dd if=/dev/zero of=big bs=1M count=48 2>&1 | head -1; rm big")
    local kb, dd = r.stdout:match("^%s*(%d+)\n(.-)\n$")
    assert.truthy(kb and tonumber(kb) >= 5 * 1024 and tonumber(kb) < 8 * 1024, r.stdout)
    assert.are.equal("dd: error writing 'big': No space left on device", dd)
  end)

  it("does not pin another session's disk while a command runs", function()
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    local other = r.json.session_id
    local job = http_client.exec_async(server, key, id, "sleep 8", 30)
    -- the command's namespace exists (with a copy of every mount) once its bwrap runs
    local function bwraps()
      return tonumber(io.popen("pgrep -c -x -P " .. server.pid .. " bwrap"):read("*a")) or 0
    end
    local t0 = os.time()
    while bwraps() == 0 and os.time() - t0 < 10 do airlockd.sleep(0.1) end
    assert.truthy(bwraps() > 0)
    assert.are.equal(2, #airlockd.host_objects(server.dir).loops)
    assert.are.equal(200, http_client.delete(server, key, other).status)
    -- its loop device goes while the command still runs: no copy of its mount in the command's
    -- namespaces keeps it (pre-exec's is a slave of the server's; bwrap's own root has none)
    local t1 = os.time()
    while #airlockd.host_objects(server.dir).loops > 1 and os.time() - t1 < 5 do airlockd.sleep(0.1) end
    assert.are.equal(1, #airlockd.host_objects(server.dir).loops)
    assert.is_false(job.done())
    local res = job.wait(60)
    assert.are.equal(0, res and res.exit_code)
  end)

  it("kills the whole sandbox at the timeout; nothing survives into the next command", function()
    local r = exec("sleep 1000 & while :; do :; done", 2)
    assert.are.equal("[TIMEOUT]: Execution exceeded 2s limit.\n[EXIT CODE]: -1", r.output)
    assert.is_true(r.timed_out)
    assert.are.equal("started\n", exec("nohup setsid sleep 999 >/dev/null 2>&1 & echo started").stdout)
    r = exec("ps -e -o comm=")
    assert.are.equal("bwrap\nps\n", r.stdout)
    local host = io.popen("ps -eo args= | grep -c " .. airlockd.shell_quote("[s]leep 99[9]") .. " ; true"):read("*a")
    assert.are.equal("0\n", host)
  end)
end)

describe("the isolation settings (SANDBOX_ISOLATION, SANDBOX_REQUIRE_GVISOR) and finding runsc", function()
  local bin = os.getenv("AIRLOCKD_BIN") or "build/airlockd"
  local dir = proc.temp_path()

  after_each(function() os.execute("rm -rf " .. airlockd.shell_quote(dir) .. "-state") end)

  -- airlockd started by hand (no AIRLOCK_RUNSC), its output and exit status
  local function start_fails(env, args)
    return airlockd.messages(run_capture("env -u AIRLOCK_RUNSC SANDBOX_API_KEYS=a:k1 " .. env .. " timeout 60 " .. airlockd.shell_quote(bin) ..
      " --listen 127.0.0.1:0 --state-dir " .. airlockd.shell_quote(dir .. "-state") .. " " .. (args or "")))
  end

  local function first_line(server)
    return airlockd.messages(airlockd.log(server)):match("^[^\n]*")
  end

  it("never falls back to bubblewrap unless asked: without a working runsc it does not start, saying how to ask", function()
    assert.are.equal("airlockd: no isolation backend: gVisor is required (the default; SANDBOX_ISOLATION=bubblewrap runs " ..
      "on bubblewrap instead) but does not work: runsc not found (/nonexistent/runsc); refusing the weaker bubblewrap " ..
      "fallback\nrc=1\n", start_fails("", "--runsc /nonexistent/runsc"))
    assert.are.equal("airlockd: invalid configuration: SANDBOX_ISOLATION: must be one of gvisor, bubblewrap, auto, " ..
      "got 'bwrap'\nrc=2\n", start_fails("SANDBOX_ISOLATION=bwrap"))
    assert.are.equal("airlockd: invalid configuration: SANDBOX_REQUIRE_GVISOR: 1 refuses the weaker bubblewrap that " ..
      "--isolation auto asks for\nrc=2\n", start_fails("SANDBOX_REQUIRE_GVISOR=1", "--isolation auto"))
  end)

  it("finds the checkout's fetched runsc beside the binary with neither AIRLOCK_RUNSC nor runsc on PATH", function()
    -- what `make deps` fetched, as airlockd should find it: .deps in the binary's directory or above
    local p = io.popen("d=$(dirname " .. airlockd.shell_quote(bin) .. "); for up in '' ../ ../../; do " ..
      "f=\"$d/$up.deps/runsc/usr/bin/runsc\"; if [ -x \"$f\" ]; then readlink -f \"$f\"; break; fi; done")
    local runsc = p:read("*l")
    p:close()
    assert.truthy(runsc, "no .deps/runsc beside " .. bin .. ": run make deps")
    local s = airlockd.start({ launcher = "env -u AIRLOCK_RUNSC PATH=/usr/sbin:/usr/bin:/sbin:/bin" })
    local ok, err = pcall(function()
      assert.are.equal("airlockd: isolation: gvisor (runsc " .. runsc .. ")", first_line(s))
      assert.are.equal("gvisor", http(s, "GET", "/healthz").headers["x-airlock-isolation"])
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("falls back to bubblewrap with SANDBOX_ISOLATION=auto, saying why in the first line", function()
    local s = airlockd.start({ env = { SANDBOX_ISOLATION = "auto" }, args = { "--runsc", "/nonexistent/runsc" } })
    local ok, err = pcall(function()
      assert.are.equal("airlockd: isolation: bubblewrap, the weaker sandbox: commands share the host kernel " ..
        "(SANDBOX_ISOLATION=auto: gVisor unavailable: runsc not found (/nonexistent/runsc))", first_line(s))
      assert.are.equal("bubblewrap", http(s, "GET", "/healthz").headers["x-airlock-isolation"])
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("refuses to start without gVisor, naming the variable", function()
    local out = airlockd.messages(run_capture("SANDBOX_API_KEYS=a:k1 SANDBOX_REQUIRE_GVISOR=1 timeout 60 " .. airlockd.shell_quote(bin) ..
      " --listen 127.0.0.1:0 --state-dir " .. airlockd.shell_quote(dir .. "-state") .. " --runsc /nonexistent/runsc"))
    assert.are.equal("airlockd: no isolation backend: gVisor is required (SANDBOX_REQUIRE_GVISOR=1) but does not work: " ..
      "runsc not found (/nonexistent/runsc); refusing the weaker bubblewrap fallback\nrc=1\n", out)
  end)

  it("rejects a value other than 1 or 0 instead of silently allowing the fallback", function()
    local out = airlockd.messages(run_capture("SANDBOX_API_KEYS=a:k1 SANDBOX_REQUIRE_GVISOR=yes timeout 60 " .. airlockd.shell_quote(bin) ..
      " --listen 127.0.0.1:0 --state-dir " .. airlockd.shell_quote(dir .. "-state") .. " --runsc /nonexistent/runsc"))
    assert.are.equal("airlockd: invalid configuration: SANDBOX_REQUIRE_GVISOR: must be 1 (refuse to run without gVisor) or 0, got 'yes'\nrc=2\n", out)
  end)

  it("probes a runsc once per boot, and again once its file changed (a broken one is refused)", function()
    local real = os.getenv("AIRLOCK_RUNSC") or ".deps/runsc/usr/bin/runsc"
    local wrapper = proc.temp_path() .. "-runsc"
    local function write_wrapper(body)
      local f = assert(io.open(wrapper .. ".new", "w"))
      f:write("#!/bin/sh\n", body, "\n")
      f:close()
      assert.is_true(proc.run("chmod 755 " .. airlockd.shell_quote(wrapper .. ".new") .. " && mv " ..
        airlockd.shell_quote(wrapper .. ".new") .. " " .. airlockd.shell_quote(wrapper)))
    end
    local proven = "isolation: gvisor proven earlier on this boot"
    local function start_log()
      local s = airlockd.start({ env = { SANDBOX_LOG_LEVEL = "debug", SANDBOX_REQUIRE_GVISOR = "1" }, args = { "--runsc", wrapper } })
      local log = airlockd.log(s)
      airlockd.stop(s)
      return log
    end
    write_wrapper("exec " .. airlockd.shell_quote(real) .. ' "$@"')
    local ok, err = pcall(function()
      -- a new file (its own inode and time): never proven, so probed; then proven
      local first = start_log()
      assert.truthy(first:find("(isolation: gvisor)", 1, true), first)
      assert.falsy(first:find(proven, 1, true), first)
      local second = start_log()
      assert.truthy(second:find(proven, 1, true), second)
      -- the same path, another file that boots nothing: probed again and refused
      write_wrapper('case "$*" in *--version*) exec ' .. airlockd.shell_quote(real) .. ' "$@" ;; esac\n' ..
        'echo "broken on purpose" >&2; exit 1')
      local out = airlockd.messages(run_capture("SANDBOX_API_KEYS=a:k1 SANDBOX_REQUIRE_GVISOR=1 timeout 60 " ..
        airlockd.shell_quote(bin) .. " --listen 127.0.0.1:0 --state-dir " .. airlockd.shell_quote(dir .. "-state") ..
        " --runsc " .. airlockd.shell_quote(wrapper)))
      assert.truthy(out:find("gVisor is required (SANDBOX_REQUIRE_GVISOR=1) but does not work", 1, true), out)
      assert.truthy(out:find("rc=1\n", 1, true), out)
    end)
    os.remove(wrapper)
    assert(ok, err)
  end)

  it("starts on gVisor when runsc works", function()
    local s = airlockd.start({ env = { SANDBOX_REQUIRE_GVISOR = "1" } })
    local ok, err = pcall(function()
      assert.truthy(airlockd.log(s):find("(isolation: gvisor)", 1, true))
      assert.are.equal("gvisor", http(s, "GET", "/healthz").headers["x-airlock-isolation"])
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)
end)

describe("egress under the bubblewrap fallback", function()
  local egress = require "support.egress"
  local ctx

  lazy_setup(function()
    ctx = egress.start({ env = { SANDBOX_ISOLATION = "bubblewrap" } })
  end)
  lazy_teardown(function()
    if ctx then egress.stop(ctx) end
  end)

  it("installs with pip through the proxy, logs it, and has no other route", function()
    assert.truthy(airlockd.log(ctx.server):find("(isolation: bubblewrap)", 1, true))
    local sid = egress.session(ctx.server, ctx.key, { "pypi" })
    -- (pip's wait for an answer is long enough for a machine under load; its one retry, should it
    -- need it, is one more tunnel to the same host)
    local r = egress.exec(ctx.server, ctx.key, sid, "pip install --retries 1 --timeout 25 airlock-egress-probe " ..
      ">/dev/null && python3 -c 'import airlock_egress_probe as m; print(m.VALUE)'; " ..
      "python3 -c 'import socket; socket.create_connection((\"198.51.100.7\", 443), timeout=3)' 2>&1 | tail -1; " ..
      "curl -sS https://registry.npmjs.org/ 2>&1", 60)
    assert.are.equal("egress works\nOSError: [Errno 101] Network is unreachable\ncurl: (56) CONNECT tunnel failed, response 403\n",
      r.stdout, r.stderr)
    local hosts, seen = {}, {}
    for _, e in ipairs(egress.events(ctx.server, ctx.key, sid)) do
      local what = e.decision .. " " .. e.host
      if not seen[what] then hosts[#hosts + 1] = what end
      seen[what] = true
    end
    table.sort(hosts) -- pip's two tunnels are logged as they close, in no fixed order
    assert.are.same({ "allow files.pythonhosted.org", "allow pypi.org", "deny registry.npmjs.org" }, hosts)
  end)
end)
