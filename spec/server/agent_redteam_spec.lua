-- luacheck: max line length 160
-- Red team of SANDBOX_EXEC_MODE=session (issue #19): commands of a session run through one
-- long-lived gVisor sandbox whose agent gives each a fresh container (new PID, mount, IPC and
-- UTS namespaces, a new overlay root, /tmp, /dev/shm and /proc, uid 1000 without
-- capabilities). Every attack is made from inside a command of a real airlockd on 127.0.0.1,
-- and the command after it must find everything fresh: nothing outside /workspace survives,
-- and the agent, its pipes and the next command's prepared container are out of reach.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"

local q = proc.shell_quote

local function session_sandboxes(server, sid)
  return host_state.sandbox_ids(server, sid .. "-s-")
end

describe("red team: a session's sandbox with its agent (SANDBOX_EXEC_MODE=session)", function()
  local server, key, sid

  local function exec(command, timeout, id)
    local r = http_client.exec(server, key, id or sid, command, timeout)
    assert.are.equal(200, r.status, r.body)
    return r.json
  end

  -- The state a fresh command sees: its processes, its files outside /workspace, its mounts.
  local FRESH = table.concat({
    -- (a pipeline's process may still be named bash before its exec)
    "ps -e -o comm= | grep -v -x -e bash -e ps -e grep",
    "echo ---",
    "find / -xdev \\( -path /proc -o -path /sys -o -path /workspace -o -path /usr \\) -prune -o -printf '%p %m %U %s\\n' 2>/dev/null | sort | md5sum",
    "echo ---",
    "ls -A /tmp /dev/shm /var/tmp",
    "echo ---",
    "awk '{print $2, $3}' /proc/mounts | sort",
  }, "; ")

  lazy_setup(function()
    server = airlockd.start({ tenants = { acme = "ak_" .. airlockd.random_hex(16) },
      env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WORKSPACE_QUOTA_MB = "64" } })
    key = server.tenants.acme
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    sid = r.json.session_id
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  local baseline
  local function assert_fresh(after)
    local now = exec(FRESH)
    assert.are.equal(0, now.exit_code, now.output)
    assert.are.equal(baseline, now.stdout, "after: " .. after)
  end

  it("runs every command of the session in the same long-lived sandbox, each in a container of its own", function()
    assert.truthy(airlockd.log(server):find("commands run in their session's sandbox", 1, true), airlockd.log(server))
    exec("true")
    assert.is_true(proc.wait_until(30, function() return #session_sandboxes(server, sid) == 1 end))
    local box = session_sandboxes(server, sid)[1]
    baseline = exec(FRESH).stdout
    -- PID 1 is the command's bash, exec'd before the command came (src/agent/bootstrap.c): its
    -- /proc cmdline keeps the placeholder it was exec'd with
    local r = exec("id -u; id -g; hostname; echo $$ \"$BASH_EXECUTION_STRING\"; cat /proc/1/cmdline | tr '\\0' ' '; echo; "
      .. "grep -E '^(CapEff|CapBnd)' /proc/self/status; pwd; echo $HOME")
    assert.are.equal("1000\n1000\nsandbox\n1 id -u; id -g; hostname; echo $$ \"$BASH_EXECUTION_STRING\"; cat /proc/1/cmdline | "
      .. "tr '\\0' ' '; echo; grep -E '^(CapEff|CapBnd)' /proc/self/status; pwd; echo $HOME\n"
      .. "/bin/bash -c airlock: waiting for its command \n"
      .. "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n/workspace\n/tmp\n", r.stdout)
    assert.are.same({ box }, session_sandboxes(server, sid))
  end)

  it("hides the agent, its pipes and the next command's container: the command is PID 1 and sees only its own", function()
    -- processes: bash, ls, grep (2 at most at once besides bash)
    local count = exec("ls /proc | grep -c '^[0-9]'").stdout
    assert.truthy(tonumber(count) <= 3, count)
    -- descriptors: 0 1 2 and ls's own directory
    assert.are.equal("0 1 2 3 ", exec("ls /proc/self/fd | tr '\\n' ' '").stdout)
    local r = exec("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c -e '[a]irlock/agent' -e '[a]irlock/waiter'")
    assert.are.equal("0\n", r.stdout)
    -- kill -1 reaches every process the command may signal but itself: there is none
    local k = exec("kill -9 -1; echo signalled $?; ls -l /proc/1/exe /proc/1/root 2>&1 | grep -c agent")
    assert.are.equal("signalled 1\n0\n", k.stdout)
    assert_fresh("kill -9 -1")
  end)

  it("keeps the agent's binary and the root read-only; a change made as the command's user does not reach the next", function()
    local before = exec("sha256sum /airlock/agent").stdout
    local r = exec("cp /bin/true /airlock/agent; echo cp $?; echo x >> /etc/passwd; echo passwd $?; "
      .. "rm -f /etc/hostname; echo rm $?; ln -s /workspace /airlock/x; echo ln $?")
    assert.are.equal("cp 1\npasswd 1\nrm 1\nln 1\n", r.stdout)
    assert.are.equal(before, exec("sha256sum /airlock/agent").stdout)
    assert_fresh("tampering with the root")
  end)

  it("leaves no process behind: background, disowned, setsid and new-namespace processes die with their command", function()
    local r = exec("sleep 1000 & disown; nohup sleep 1001 >/dev/null 2>&1 & setsid sleep 1002 & "
      .. "(unshare -U sleep 1003 || true) & sleep 0.2; ps -e -o comm= | grep -c sleep")
    assert.truthy(tonumber(r.stdout:match("^(%d+)")) >= 3, r.stdout)
    assert_fresh("background processes")
  end)

  it("leaves no file in /, /tmp, /dev/shm or /var/tmp, and no mount", function()
    local r = exec("touch /tmp/t /dev/shm/s /var/tmp/v 2>/dev/null; mkdir -p /tmp/d/e; "
      .. "(unshare -Urm sh -c 'mount -t tmpfs none /tmp && touch /tmp/inner' 2>/dev/null; true); ls -A /tmp /dev/shm")
    assert.are.equal(0, r.exit_code, r.output)
    assert.truthy(r.stdout:find("\nt\n", 1, true), r.stdout)
    assert_fresh("files and mounts")
  end)

  it("gives a setuid file left in /workspace no privilege, and none outside it survives", function()
    local r = exec("cp /bin/bash /workspace/sbash && chmod u+s /workspace/sbash; cp /bin/bash /tmp/sb; chmod u+s /tmp/sb; echo ok")
    assert.are.equal("ok\n", r.stdout)
    local r2 = exec("/workspace/sbash -p -c 'id -u; id -ru'; ls /tmp")
    assert.are.equal("1000\n1000\n", r2.stdout)
    exec("rm -f /workspace/sbash")
    assert_fresh("setuid files")
  end)

  it("bounds /tmp and /dev/shm at 64 MB each, and the next command finds them empty", function()
    local r = exec("head -c 100M /dev/zero > /tmp/fill; echo tmp $?; head -c 100M /dev/zero > /dev/shm/fill; echo shm $?; "
      .. "du -sm /tmp/fill /dev/shm/fill | awk '{print $1}'")
    local tmp_rc, shm_rc = r.stdout:match("^tmp (%d+)\nshm (%d+)\n")
    assert.are_not.equal("0", tmp_rc, r.stdout)
    assert.are_not.equal("0", shm_rc, r.stdout)
    local r2 = exec("df -m /tmp /dev/shm | awk 'NR > 1 {print $3}'")
    assert.are.equal("0\n0\n", r2.stdout)
    assert_fresh("full /tmp and /dev/shm")
  end)

  it("gives every command the whole process limit, even after one that forked up to it and exited", function()
    local script = table.concat({
      "import subprocess",
      "kids = []",
      "err = None",
      "for _ in range(100):",
      "    try: kids.append(subprocess.Popen(['sleep', '300']))",
      "    except OSError as e: err = e.errno; break",
      "print(len(kids), err)",
    }, "\n")
    local first = exec("python3 -c " .. q(script))
    assert.are.equal("63 11\n", first.stdout, first.output)
    local second = exec("python3 -c " .. q(script))
    assert.are.equal("63 11\n", second.stdout, second.output)
    assert_fresh("a command at its process limit")
  end)

  it("ends a command that closed its output but keeps running only at its timeout; the next is fresh", function()
    local r = exec("echo before; exec >&- 2>&-; sleep 100", 2)
    assert.is_true(r.timed_out)
    assert.are.equal(-1, r.exit_code)
    local r2 = exec("exec >&- 2>&-; sleep 0.5; touch /workspace/closed")
    assert.are.equal(0, r2.exit_code)
    assert.are.equal("yes\n", exec("test -f /workspace/closed && echo yes; rm -f /workspace/closed").stdout)
    assert_fresh("closed output")
  end)

  it("gives a command the default signal dispositions (a writer to a closed pipe dies of SIGPIPE, silently)", function()
    local r = exec("yes | head -c 4; s=${PIPESTATUS[0]}; echo; echo $s; trap -p")
    assert.are.equal("y\ny\n\n141\n", r.stdout)
    assert.are.equal("", r.stderr)
  end)

  it("gives a command that reads stdin end of file at once", function()
    local r = exec("read -r x; echo \"read $? [$x]\"; cat; echo cat $?", 5)
    assert.are.equal("read 1 []\ncat 0\n", r.stdout)
    assert.is_false(r.timed_out)
  end)

  it("replaces the session's sandbox after a memory kill, keeping the workspace", function()
    exec("echo kept > /workspace/kept")
    local box = session_sandboxes(server, sid)
    local r = exec("python3 -c 'x = bytearray(1024 * 1024 * 1024)'", 30)
    assert.are.equal(137, r.exit_code)
    assert.is_true(r.oom_killed)
    assert.are.same({ "Process killed by cgroups (Memory limit exceeded)." }, r.warnings)
    assert.are.equal("kept\n", exec("cat /workspace/kept").stdout)
    assert.is_true(proc.wait_until(30, function()
      local now = session_sandboxes(server, sid)
      return #now == 1 and now[1] ~= box[1]
    end))
    assert_fresh("a memory kill")
  end)

  it("kills the session's sandbox with everything in it when the session ends", function()
    assert.are.equal(1, #session_sandboxes(server, sid))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    assert.are.same({}, session_sandboxes(server, sid))
  end)
end)
