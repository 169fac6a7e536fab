-- luacheck: max line length 160
-- Red team (issue #3 item 6): every attack runs from inside a sandbox of a real airlockd on
-- 127.0.0.1, and each test asserts the exact outcome a client sees. Network rule: the host
-- only ever talks to loopback; the non-loopback targets (the metadata address, a TEST-NET
-- address) are only tried from inside the sandbox, which has no route at all, and the test
-- asserts they fail at once with "no route" (never a timeout, never a connection).
-- Lua 5.1-compatible (no <close>).
local root_checks = require "support.root_checks"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local host_state = require "support.host_state"

local http = http_client.request
local q = proc.shell_quote
local sh_output = proc.output
local read_file = proc.read_file

-- Host processes belonging to this server's sandboxes (runsc, its gofer and sentry): their
-- command lines carry the server's own runsc root, so other servers on the machine don't count.
-- A session's next sandbox, booted ahead and frozen until its command (README "Warm
-- sandboxes"), runs nothing and is not counted.
local function host_sandbox_processes(server)
  local root = server.dir .. "/state/runsc"
  local n = 0
  for line in sh_output("ps -eo pid=,args="):gmatch("[^\n]+") do
    if line:find("runsc", 1, true) and line:find(root, 1, true)
      and not host_state.frozen(line:match("^%s*(%d+)")) then n = n + 1 end
  end
  return n
end

-- Commands the tenant of key has running (GET /v1/usage).
local function commands_running(server, key)
  local body = http(server, "GET", "/v1/usage", { key = key }).body
  return tonumber(body:match('"commands_running":(%d+)')) or 0
end

describe("red team: attacks from inside the sandbox", function()
  local server, acme, other, hog, victim, secret
  local sid -- acme's main session

  local function exec(command, timeout, key, id)
    local r = http_client.exec(server, key or acme, id or sid, command, timeout)
    assert.are.equal(200, r.status, r.body)
    return r.json
  end

  local function create(key)
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    return r.json.session_id
  end

  lazy_setup(function()
    secret = "rt_secret_" .. airlockd.random_hex(12)
    server = airlockd.start({
      tenants = {
        acme = "ak_" .. airlockd.random_hex(16), other = "ok_" .. airlockd.random_hex(16),
        hog = "hk_" .. airlockd.random_hex(16), victim = "vk_" .. airlockd.random_hex(16),
      },
      env = {
        AIRLOCK_TEST_SECRET = secret,
        SANDBOX_WORKSPACE_QUOTA_MB = "2",
        SANDBOX_TENANT_LIMITS = '{"hog":{"max_sessions":2,"max_concurrent_exec":1},"victim":{"requests_per_minute":3}}',
      },
    })
    acme, other, hog, victim = server.tenants.acme, server.tenants.other, server.tenants.hog, server.tenants.victim
    sid = create(acme)
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("runs on gVisor", function()
    assert.truthy(airlockd.log(server):find("(isolation: gvisor)", 1, true), airlockd.log(server))
  end)

  describe("network exfiltration", function()
    it("reaches nothing: host loopback services refused, metadata and public addresses unreachable at once", function()
      local probe = [[python3 - <<'EOF'
import socket, errno, time
for host, port in [("127.0.0.1", PORT), ("::1", PORT), ("169.254.169.254", 80), ("192.0.2.1", 443)]:
    t = time.time()
    try:
        s = socket.create_connection((host, port), timeout=3)
        print(host, port, "CONNECTED")
        s.close()
    except socket.timeout:
        print(host, port, "TIMEOUT")
    except OSError as e:
        print(host, port, errno.errorcode.get(e.errno, e.errno), "fast" if time.time() - t < 1 else "slow")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"x", ("169.254.169.254", 53))
    print("udp SENT")
except OSError as e:
    print("udp", errno.errorcode.get(e.errno, e.errno))
EOF]]
      local r = exec((probe:gsub("PORT", tostring(server.port))))
      -- airlockd's own port on the host loopback is invisible: the sandbox has its own lo.
      assert.are.equal(table.concat({
        "127.0.0.1 " .. server.port .. " ECONNREFUSED fast",
        "::1 " .. server.port .. " ECONNREFUSED fast",
        "169.254.169.254 80 EHOSTUNREACH fast",
        "192.0.2.1 443 EHOSTUNREACH fast",
        "udp EHOSTUNREACH",
        "",
      }, "\n"), r.stdout)
      assert.are.equal(0, r.exit_code)
    end)

    it("cannot resolve names", function()
      local r = exec("getent hosts example.com; echo rc=$?; " ..
        "python3 -c 'import socket\ntry: socket.getaddrinfo(\"example.com\", 443)\nexcept OSError as e: print(type(e).__name__, e)'")
      assert.are.equal("rc=2\ngaierror [Errno -3] Temporary failure in name resolution\n", r.stdout)
    end)

    it("has only the loopback interface", function()
      local r = exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; ip -o link | cut -d' ' -f2")
      assert.are.equal("lo\nlo:\n", r.stdout)
      assert.are.equal("", r.stderr)
    end)
  end)

  describe("resource exhaustion", function()
    it("kills a memory bomb with exit 137, oom_killed and the memory warning; the session lives on", function()
      local r = exec("python3 -c 'x = bytearray(1024 * 1024 * 1024)'", 30)
      assert.are.equal(137, r.exit_code)
      assert.is_true(r.oom_killed)
      assert.is_false(r.timed_out)
      assert.are.same({ "Process killed by cgroups (Memory limit exceeded)." }, r.warnings)
      assert.are.equal("[WARNING]: Process killed by cgroups (Memory limit exceeded).\n[EXIT CODE]: 137", r.output)
      assert.are.equal("alive\n", exec("echo alive").stdout)
    end)

    it("contains a fork bomb while another session and /healthz keep working; no process is left", function()
      -- nothing runs (a next sandbox still booting freezes once booted)
      assert.is_true(proc.wait_until(30, function() return host_sandbox_processes(server) == 0 end))
      local other_sid = create(acme)
      -- the bomb's shell marks the moment it sees 60 processes (near the limit of 64), then
      -- keeps the bomb running until the spec has made its checks and writes go_on (15 s at
      -- most); the bomb starts in a subshell (the shell's one fork, before the bomb exists), and
      -- the glob, `: >` and `[` are builtins: the shell itself never forks again
      local bomb = 'bomb(){ bomb | bomb & }; (bomb) & until n=(/proc/[0-9]*); ((${#n[@]} >= 60 || SECONDS > 15)); do :; done; ' ..
        ': > at_limit; while [ ! -e go_on ] && ((SECONDS < 15)); do :; done; n=(/proc/[0-9]*); echo "procs ${#n[@]}"'
      local job = http_client.exec_async(server, acme, sid, bomb, 20)
      assert.is_true(proc.wait_until(20, function() return http_client.exists(server, acme, sid, "at_limit") end, 0.1))
      assert.is_false(job.done())
      local r = exec("echo second", nil, acme, other_sid)
      assert.are.equal("[STDOUT]:\nsecond\n[EXIT CODE]: 0", r.output)
      local h = http(server, "GET", "/healthz")
      assert.are.equal(200, h.status)
      assert.is_false(job.done()) -- served while the bomb was still running
      assert.are.equal(200, http_client.write(server, acme, sid, "go_on", "").status)
      local res = job.wait(60)
      assert.truthy(res, "no response for the fork bomb")
      -- the bomb's shell outlives it and counts the processes it could see: never more than the limit
      assert.is_false(res.timed_out)
      local procs = tonumber(res.stdout:match("^procs (%d+)\n$"))
      assert.truthy(procs and procs <= 64, "exit " .. tostring(res.exit_code) .. ", stdout: " .. tostring(res.stdout))
      assert.is_true(proc.wait_until(30, function() return host_sandbox_processes(server) == 0 end))
      assert.are.equal(200, http_client.delete(server, acme, other_sid).status)
      assert.are.equal(0, exec("rm at_limit go_on").exit_code)
    end)

    it("stops a command at 64 processes: the 64th new process fails to start", function()
      -- Deterministic, unlike the bomb: start children one by one until the kernel refuses.
      local script = table.concat({
        "import subprocess",
        "kids = []",
        "err = None",
        "for _ in range(100):",
        "    try: kids.append(subprocess.Popen(['sleep', '30']))",
        "    except OSError as e: err = e.errno; break",
        "print(len(kids), err)",
        "for k in kids: k.kill()",
      }, "\n")
      local r = exec("python3 -c " .. q(script))
      assert.are.equal(0, r.exit_code, r.output)
      local started, errno = r.stdout:match("^(%d+) (%S+)\n$")
      -- python3 itself is one of the 64; EAGAIN (11) is the refusal
      assert.are.equal("63", started, r.stdout)
      assert.are.equal("11", errno, r.stdout)
    end)

    it("warns past the workspace quota, then refuses API writes with 413 until files are removed", function()
      -- a little over the 2 MB quota: the disk holds the quota and at most ~0.6 MB more
      local r = exec("head -c 2150000 /dev/zero > fill.bin")
      assert.are.equal(0, r.exit_code)
      assert.are.equal(1, #r.warnings)
      assert.truthy(r.warnings[1]:match("^Workspace uses 2%.%d MB, over its 2 MB disk quota%. Delete files before writing more%.$"), r.warnings[1])
      local w = http_client.write(server, acme, sid, "after.txt", "x")
      assert.are.equal(413, w.status)
      assert.truthy(w.json.detail:match("^Writing after%.txt would use 2%.%d MB of the workspace's 2 MB disk quota%. Delete files first%.$"), w.body)
      assert.are.same({}, exec("rm fill.bin").warnings)
      assert.are.equal(200, http_client.write(server, acme, sid, "after.txt", "x").status)
    end)

    it("caps /tmp at 64 MB and keeps it noexec", function()
      local r = exec("head -c 100000000 /dev/zero > /tmp/fill; echo rc=$?; stat -c %s /tmp/fill; " ..
        "rm /tmp/fill; cp /bin/true /tmp/t; /tmp/t; echo rc=$?")
      assert.are.equal("rc=1\n67108864\nrc=126\n", r.stdout)
      assert.are.equal("head: error writing 'standard output': No space left on device\n/bin/bash: line 1: /tmp/t: Permission denied\n", r.stderr)
    end)

    it("limits session hogging and concurrent commands with the exact 429s", function()
      local a = create(hog)
      create(hog)
      local r = http_client.create(server, hog)
      assert.are.equal(429, r.status)
      assert.is_nil(r.headers["retry-after"])
      assert.are.equal('{"detail":"Session limit reached: 2 of 2 sessions are open. Delete one first."}', r.body)
      local job = http_client.exec_async(server, hog, a, http_client.until_go(), 60)
      -- probe only once the job's sandbox runs (a probe racing it could take the only slot)
      assert.is_true(proc.wait_until(10, function() return commands_running(server, hog) > 0 end, 0.25))
      local busy = http_client.exec(server, hog, a, "true")
      assert.are.equal(429, busy.status)
      assert.is_nil(busy.headers["retry-after"])
      assert.are.equal('{"detail":"Too many commands running at once: 1 allowed. Wait for one to finish."}', busy.body)
      assert.are.equal(200, http_client.write(server, hog, a, "go", "").status)
      assert.are.equal(0, job.wait(90).exit_code)
      assert.are.equal(200, http_client.exec(server, hog, a, "true").status)
    end)

    it("kills an infinite loop at the timeout, and no process of it survives into the next command or on the host", function()
      local r = exec("sleep 1000 & (while :; do :; done) & while :; do :; done", 2)
      assert.are.same({ command = "sleep 1000 & (while :; do :; done) & while :; do :; done",
        output = "[TIMEOUT]: Execution exceeded 2s limit.\n[EXIT CODE]: -1", stdout = "", stderr = "",
        exit_code = -1, timed_out = true, oom_killed = false, warnings = { "Execution exceeded 2s limit." } }, r)
      -- background, detached and renamed processes of a command that returned normally
      r = exec("sleep 1000 & nohup setsid sleep 999 >/dev/null 2>&1 & bash -c 'exec -a hidden sleep 998' & disown -a; echo started")
      assert.are.equal("started\n", r.stdout)
      assert.are.equal("ps\n", exec("ps -e -o comm=").stdout) -- ps is pid 1, alone
      assert.are.equal("1\n", exec("n=(/proc/[0-9]*); echo ${#n[@]}").stdout)
      assert.is_true(proc.wait_until(30, function() return host_sandbox_processes(server) == 0 end))
    end)
  end)

  describe("system tampering", function()
    it("cannot write the root, /usr, /etc, /bin or /proc", function()
      local r = exec("for d in / /usr /etc /bin /usr/bin /proc /sys; do touch $d/x 2>/dev/null && echo WROTE $d || echo denied $d; done; " ..
        "echo x >> /etc/passwd || echo denied passwd")
      assert.are.equal("denied /\ndenied /usr\ndenied /etc\ndenied /bin\ndenied /usr/bin\ndenied /proc\ndenied /sys\ndenied passwd\n", r.stdout)
    end)

    it("finds the host's alternatives (awk through /etc/alternatives, bound read-only) and cannot change them", function()
      root_checks.alternatives(exec)
    end)

    it("cannot chmod, chown or mount", function()
      local r = exec("touch mine; chmod 4777 /etc/passwd; echo chmod=$?; chown 0:0 mine; echo chown=$?; " ..
        "mount -t tmpfs none /tmp; echo mount=$?; umount /workspace; echo umount=$?")
      assert.are.equal("chmod=1\nchown=1\nmount=32\numount=32\n", r.stdout)
      assert.truthy(r.stderr:find("chmod: changing permissions of '/etc/passwd': Operation not permitted", 1, true), r.stderr)
      assert.truthy(r.stderr:find("chown: changing ownership of 'mine': Operation not permitted", 1, true), r.stderr)
      assert.truthy(r.stderr:find("mount: /tmp: must be superuser to use mount.", 1, true), r.stderr)
    end)

    it("runs as uid 1000 with no capabilities", function()
      local r = exec("id; grep -E '^Cap' /proc/self/status")
      assert.are.equal("uid=1000(sandboxuser) gid=1000(sandboxuser) groups=1000(sandboxuser)\n" ..
        "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n" ..
        "CapBnd:\t0000000000000000\n", r.stdout)
    end)

    it("gains nothing from setuid binaries or user namespaces", function()
      local r = exec("test -u /usr/bin/su && echo su-is-setuid; /usr/bin/su -c id root </dev/null; echo su=$?; " ..
        "python3 -c 'import os; os.setuid(0)' 2>/dev/null; echo setuid=$?; " ..
        "unshare -r sh -c 'id -u; touch /x 2>/dev/null; echo touch=$?; cat /proc/self/status | grep ^CapEff'")
      assert.are.equal("su-is-setuid\nsu=1\nsetuid=1\n0\ntouch=1\nCapEff:\t000001ffffffffff\n", r.stdout)
      -- "root" in a user namespace of its own: full capabilities over nothing it may touch
      r = exec("unshare -r sh -c 'echo x > /etc/hostname; cat /workspace/../etc/shadow; mount -t tmpfs none /usr' 2>&1; id -u")
      assert.truthy(r.stdout:find("1000\n$"), r.stdout)
      assert.is_nil(r.stdout:find("root:", 1, true))
    end)
  end)

  describe("secret hunting", function()
    it("sees none of the server's environment", function()
      local r = exec("tr '\\0' '\\n' < /proc/1/environ; echo ---; env | sort; echo ---; " ..
        "grep -rls -e " .. q(secret) .. " -e SANDBOX_API_KEYS -e " .. q(acme) .. " /proc/[0-9]*/environ /etc /tmp /workspace /run /var; echo grep=$?")
      assert.is_nil(r.stdout:find(secret, 1, true))
      for _, key in pairs(server.tenants) do assert.is_nil(r.output:find(key, 1, true)) end
      assert.is_nil(r.stdout:find("SANDBOX_", 1, true))
      assert.is_nil(r.stdout:find("AIRLOCK", 1, true))
      assert.truthy(r.stdout:find("\ngrep=1\n$"), r.stdout)
      local env = r.stdout:match("%-%-%-\n(.-)%-%-%-\n")
      assert.are.equal("HOME=/tmp\nPATH=/workspace/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n" ..
        "PIP_DISABLE_PIP_VERSION_CHECK=1\nPIP_NO_CACHE_DIR=1\nPIP_USER=1\nPWD=/workspace\nPYTHONUSERBASE=/workspace/.local\nSHLVL=1\n_=/usr/bin/env\n", env)
    end)

    it("has no /root or /home, and cannot reach the state dir or another session's workspace", function()
      local b = create(acme)
      local marker = "marker_" .. airlockd.random_hex(6)
      assert.are.equal(200, http_client.write(server, acme, b, marker .. ".txt", "private to B").status)
      local ws_b = server.dir .. "/state/workspaces/" .. b .. "/w"
      assert.truthy(read_file(ws_b .. "/" .. marker .. ".txt")) -- it is there on the host
      local r = exec("ls -d /root /home " .. q(server.dir) .. " " .. q(ws_b) .. " 2>&1; " ..
        "find / \\( -path /proc -o -path /sys -o -path /usr \\) -prune -o -name " .. q(marker .. "*") .. " -print 2>/dev/null; " ..
        "grep -rl 'private to B' /workspace /tmp /run /var /etc /dev 2>/dev/null; echo done", 60)
      assert.are.equal("ls: cannot access '/root': No such file or directory\n" ..
        "ls: cannot access '/home': No such file or directory\n" ..
        "ls: cannot access '" .. server.dir .. "': No such file or directory\n" ..
        "ls: cannot access '" .. ws_b .. "': No such file or directory\ndone\n", r.stdout)
      -- the sandbox's mount table names no host path either
      r = exec("cat /proc/self/mountinfo")
      assert.is_nil(r.stdout:find(server.dir, 1, true))
      assert.is_nil(r.stdout:find("/tmp/", 1, true))
      assert.are.equal(200, http_client.delete(server, acme, b).status)
    end)
  end)

  describe("kernel probing", function()
    it("sees gVisor's kernel, never the host's", function()
      local host_release = sh_output("uname -r"):gsub("%s+$", "")
      local r = exec("uname -r; cat /proc/version; dmesg | head -1 | cut -c16-; uname -a; cat /proc/sys/kernel/osrelease")
      assert.truthy(r.stdout:find("^4%.4%.0\nLinux version 4%.4%.0 #1 SMP Sun Jan 10 15:06:54 PST 2016\nStarting gVisor%.%.%.\n"), r.stdout)
      assert.is_nil(r.stdout:find(host_release, 1, true))
      assert.is_nil(r.stdout:find("6.18", 1, true))
    end)
  end)

  describe("path traversal and symlink escape through the file API", function()
    local function denied(path)
      return '{"detail":"Access denied: symlink/path traversal outside workspace for \'' .. path .. '\'"}'
    end

    it("refuses ../, a/../../, absolute and /workspace/ paths for read and write", function()
      for _, p in ipairs({ "../x", "a/../../x", "../../../../etc/passwd", "/etc/passwd", "/workspace/x", "./../x" }) do
        local r = http_client.read(server, acme, sid, p)
        assert.are.equal(403, r.status, p)
        assert.are.equal(denied(p), r.body)
        r = http_client.write(server, acme, sid, p, "pwned")
        assert.are.equal(403, r.status, p)
        assert.are.equal(denied(p), r.body)
      end
    end)

    it("refuses symlinks planted by a command, to a file, a directory, the state dir and a dangling target", function()
      local victim_ws = server.dir .. "/state/workspaces/" .. create(other) .. "/w"
      local dangling = "/tmp/rt-dangling-" .. airlockd.random_hex(6)
      local passwd_before = read_file("/etc/passwd")
      local r = exec("ln -s /etc/passwd pw; ln -s /etc etcdir; ln -s " .. q(victim_ws) .. " otherws; ln -s " ..
        q(server.dir .. "/state") .. " state; ln -s " .. q(dangling) .. " dangling; ln /etc/passwd hard; echo ln=$?")
      assert.are.equal("ln=1\n", r.stdout)
      assert.are.equal("ln: failed to create hard link 'hard' => '/etc/passwd': Invalid cross-device link\n", r.stderr)
      for _, p in ipairs({ "pw", "etcdir/passwd", "etcdir/x", "otherws/x.txt", "state/x", "dangling" }) do
        local rr = http_client.read(server, acme, sid, p)
        assert.are.equal(403, rr.status, p)
        assert.are.equal(denied(p), rr.body)
        local w = http_client.write(server, acme, sid, p, "pwned")
        assert.are.equal(403, w.status, p)
        assert.are.equal(denied(p), w.body)
      end
      assert.are.equal(passwd_before, read_file("/etc/passwd"))
      assert.is_nil(read_file("/etc/x"))
      assert.is_nil(read_file(dangling))
      assert.is_nil(read_file(victim_ws .. "/x.txt"))
      assert.is_nil(read_file(server.dir .. "/state/x"))
      exec("rm pw etcdir otherws state dangling")
    end)
  end)

  describe("keys and tenants", function()
    it("answers a guessed key 401 without consuming another tenant's rate tokens", function()
      local guesses = { victim:sub(1, -2), victim .. "x", victim:upper(), victim:sub(2), victim:sub(1, 3) .. victim:sub(5), "vk_", "", acme:sub(1, 10) }
      for _ = 1, 20 do guesses[#guesses + 1] = "vk_" .. airlockd.random_hex(16) end
      for _, g in ipairs(guesses) do
        local r = http(server, "GET", "/v1/sessions", { key = g })
        assert.are.equal(401, r.status, g)
        assert.are.equal('{"detail":"Invalid or missing X-API-Key header"}', r.body)
      end
      -- the victim still has its whole bucket of 3, and no more: the fourth waits for a token
      -- (20 s at 3 a minute, less the part of one that refilled while the three ran)
      for i = 1, 3 do assert.are.equal(200, http(server, "GET", "/v1/usage", { key = victim }).status, i) end
      local r = http(server, "GET", "/v1/usage", { key = victim })
      assert.are.equal(429, r.status)
      local wait = tonumber(r.headers["retry-after"])
      assert.truthy(wait and wait == math.floor(wait) and wait >= 1 and wait <= 20, r.headers["retry-after"])
    end)

    it("keeps tenants out of each other's sessions with the exact strings", function()
      assert.are.equal(200, http_client.write(server, acme, sid, "mine.txt", "acme's").status)
      local list = http(server, "GET", "/v1/sessions", { key = other })
      assert.are.equal(200, list.status)
      assert.is_nil(list.body:find(sid, 1, true))
      for _, s in ipairs(list.json.sessions) do assert.are.equal("other", s.tenant_id) end
      local forbidden = '{"detail":"Forbidden: Access denied to this session"}'
      assert.are.equal(forbidden, http_client.read(server, other, sid, "mine.txt").body)
      local w = http_client.write(server, other, sid, "mine.txt", "overwritten")
      assert.are.equal(403, w.status)
      assert.are.equal(forbidden, w.body)
      local e = http_client.exec(server, other, sid, "rm -rf /workspace/*")
      assert.are.equal(403, e.status)
      assert.are.equal(forbidden, e.body)
      local eg = http(server, "GET", "/v1/sessions/" .. sid .. "/egress", { key = other })
      assert.are.equal(403, eg.status)
      assert.are.equal(forbidden, eg.body)
      local d = http_client.delete(server, other, sid)
      assert.are.equal(403, d.status)
      assert.are.equal('{"detail":"Forbidden"}', d.body)
      local gone = "sbx_" .. string.rep("0", 12)
      assert.are.equal('{"detail":"Session not found or expired"}', http_client.read(server, other, gone, "x").body)
      assert.are.equal('{"detail":"Session not found"}', http_client.delete(server, other, gone).body)
      -- the session is untouched
      local r = http_client.read(server, acme, sid, "mine.txt")
      assert.are.same({ path = "mine.txt", content = "acme's" }, r.json)
    end)
  end)
end)
