-- luacheck: max line length 160
-- Resumes into sandboxes made ahead (issue #26, the resume's time): after a session with a
-- kernel is paused with its memory, airlockd makes one sandbox of its spec ahead for the tenant
-- (`runsc create`, state/restore-spares/<id>, its /workspace a shared mount point) and the next
-- resume restores the image into it. Checked here on the real server and gVisor: the resume says
-- so in its log line and the kernel's x is there; the session's workspace reaches the sandbox
-- both ways; the sandbox runs in a cgroup named after the session, with the session's own memory
-- size (a 768 MB session holds 400 MB, then is OOM-killed at 900); runsc's calls find it (a
-- memory snapshot and a session forked from it); paused again, its image's
-- spec is the session's own (a restart makes a spare of it for the paused session, which its
-- resume takes, x kept); a spare not taken is released after SANDBOX_WARM_IDLE_SECONDS, and
-- with the DELETE of its tenant's last session paused with its memory (before the answer); a
-- DELETE, a stop and a restart after kill -9 leave nothing of spares (no process, cgroup, mount
-- or directory). Loopback only.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local kernel_client = require "support.kernel_client"
local proc = require "support.proc"
require "support.eventually"

local q = proc.shell_quote

describe("resumes into sandboxes made ahead", function()
  local server, key
  local LIMITS = cjson.encode({ ["*"] = { max_memory_mb = 1024 } })
  local function env(extra)
    local e = { SANDBOX_EXEC_MODE = "session", SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_LOG_LEVEL = "debug" }
    for k, v in pairs(extra or {}) do e[k] = v end
    return e
  end

  local kc = kernel_client.new(function() return server, key end)
  local call, session_with_x41, pause = kc.call, kc.session_with_x41, kc.pause
  local function cell(sid, kid, code) return kc.cell(sid, kid, code, 30) end

  local function spares_dir() return server.dir .. "/state/restore-spares" end

  -- What of spares the host holds: their directories, mounts under restore-spares, processes
  -- whose command line names a spare's container id or directory, and cgroups named spare-*.
  local function spares()
    local dirs = proc.output("ls " .. q(spares_dir()) .. " 2>/dev/null"):gsub("%s+$", "")
    local mounts = proc.output("grep -c " .. q(spares_dir()) .. " /proc/mounts || true"):gsub("%s+", "")
    local procs = #host_state.pids_naming(spares_dir())
    local names, groups = {}, 0 -- (one directory per hierarchy: counted once)
    for _, g in ipairs(host_state.cgroups_under(host_state.cgroup_root(server.dir .. "/state"))) do
      local name = g:match("/(spare%-[^/]+)$")
      if name and not names[name] then names[name], groups = true, groups + 1 end
    end
    return { dirs = dirs, mounts = mounts, procs = procs, groups = groups }
  end

  -- Spares made so far (the debug line a spare's thread logs once `runsc create` is done).
  local function spares_made()
    local _, n = airlockd.log(server):gsub("sandbox spare%-[%w%-]+ made ahead for the resumes of t%-acme", "")
    return n
  end

  -- Pauses sid and waits for the spare it makes (none waits before: the earlier tests took or dropped theirs).
  local function pause_and_wait_spare(sid)
    local before = spares_made()
    pause(sid)
    assert.eventually(function()
      local n = spares_made()
      return n > before, n
    end, { timeout = 60, what = "a sandbox made ahead for the tenant's resumes" })
  end

  local function nothing_of_spares()
    assert.eventually(function()
      local s = spares()
      return s.dirs == "" and s.mounts == "0" and s.procs == 0 and s.groups == 0, s
    end, { timeout = 30, what = "nothing of the spares on the host" })
  end

  local function resumed_ahead(sid)
    local lines = {}
    for line in airlockd.log(server):gmatch("[^\n]*session " .. sid .. " resumed in [^\n]*") do lines[#lines + 1] = line end
    return lines
  end

  -- SIGTERM, its state directory kept for the next start
  local function stop_keeping_state()
    os.execute("kill -TERM " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
  end

  lazy_setup(function()
    key = "ak_" .. airlockd.random_hex(16)
    server = airlockd.start({ tenants = { acme = key }, env = env() })
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("restores a paused kernel into the sandbox made ahead: x kept, the workspace both ways, the session's cgroup and size", function()
    local sid, kid = session_with_x41({ memory_mb = 768 })
    assert.are.equal(0, http_client.exec(server, key, sid, "echo before > /workspace/f").json.exit_code)
    pause_and_wait_spare(sid)
    -- waiting: created by runsc (a gofer and a sentry), nothing restored in it yet, frozen
    local s = spares()
    assert.are.equal(2, s.procs, cjson.encode(s))
    assert.are.equal(1, s.groups, cjson.encode(s))
    for _, pid in ipairs(host_state.pids_naming(spares_dir())) do
      assert.is_true(host_state.frozen(pid), "spare process " .. pid .. " is not frozen")
    end
    assert.are.equal("42", cell(sid, kid, "x + 1").results[1]["text/plain"])
    local lines = resumed_ahead(sid)
    assert.are.equal(1, #lines, table.concat(lines, "\n"))
    assert.truthy(lines[1]:find("sandbox restored into one made ahead, its agent checked with a ping and 1 kernel", 1, true), lines[1])
    -- the session's workspace is the sandbox's, both ways
    assert.are.equal("before\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    assert.are.equal(0, http_client.exec(server, key, sid, "echo after > /workspace/g").json.exit_code)
    local g = call("GET", "/v1/sessions/" .. sid .. "/read?path=g")
    assert.are.equal(200, g.status, g.body)
    assert.truthy(g.body:find("after", 1, true), g.body)
    -- its cgroup is the session's: named after it (no spare-* group left), its size the session's
    local left = host_state.session_leftovers(server, sid)
    assert.is_true(#left.cgroups > 0, cjson.encode(left))
    assert.are.equal(0, spares().groups)
    local mem = proc.output("cat /sys/fs/cgroup/memory/" .. host_state.cgroup_root(server.dir .. "/state") .. "/t-acme/"
      .. sid .. "-*/memory.limit_in_bytes 2>/dev/null"):gsub("%s+", "")
    assert.are.equal(tostring(768 * 1024 * 1024), mem)
    local held = cell(sid, kid, "b = bytearray(400 * 1024 * 1024)\nlen(b) // (1024 * 1024)")
    assert.are.equal("400", held.results[1]["text/plain"], cjson.encode(held))
    local big = call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute",
      { code = "c = bytearray(900 * 1024 * 1024)", timeout = 30 }, 90)
    assert.are.equal(200, big.status, big.body)
    assert.is_true(big.json.oom_killed, big.body)
    -- deleted: nothing of it nor of the spare it took (the next spare is made at the next pause)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    nothing_of_spares()
    assert.eventually(function()
      local l = host_state.session_leftovers(server, sid)
      return #l.sandboxes == 0 and #l.cgroups == 0 and l.mounts == "0", l
    end, { timeout = 20, what = "nothing of the deleted session" })
  end)

  it("keeps the session's own spec with its next image: paused again and restarted, restored the usual way with x", function()
    local sid, kid = session_with_x41()
    pause_and_wait_spare(sid)
    assert.are.equal("42", cell(sid, kid, "x = x + 1\nx").results[1]["text/plain"])
    assert.truthy(resumed_ahead(sid)[1]:find("into one made ahead", 1, true))
    -- runsc's calls reach it under the spare's container id: a memory snapshot, and a session from it
    local snap = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { name = "ahead", memory = true }, 120)
    assert.are.equal(201, snap.status, snap.body)
    local fork = call("POST", "/v1/sessions", { from_snapshot = snap.json.snapshot_id }, 120)
    assert.are.equal(201, fork.status, fork.body)
    assert.are.equal("43", cell(fork.json.session_id, kid, "x + 1").results[1]["text/plain"])
    assert.are.equal(200, http_client.delete(server, key, fork.json.session_id).status)
    assert.are.equal(200, call("DELETE", "/v1/snapshots/" .. snap.json.snapshot_id).status)
    pause(sid)
    local spec = cjson.decode(proc.read_file(server.dir .. "/state/images/" .. sid .. ".ckpt/sandbox.json"))
    local workspace
    for _, m in ipairs(spec.mounts) do
      if m.destination == "/workspace" then workspace = m.source end
    end
    assert.truthy(workspace:find(server.dir .. "/state/workspaces/" .. sid, 1, true) == 1, workspace)
    -- a restart clears the spare made at this pause and makes one for the paused session again
    -- (from its image's spec): the resume goes into it
    local before = spares().dirs
    stop_keeping_state()
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = env(), wait = 60 })
    assert.eventually(function() return spares_made() == 1 end, { timeout = 60, what = "a spare made at the start" })
    assert.is_nil(spares().dirs:find(before, 1, true), before)
    assert.are.equal("43", cell(sid, kid, "x + 1").results[1]["text/plain"])
    local lines = resumed_ahead(sid)
    assert.truthy(lines[#lines]:find("into one made ahead", 1, true), lines[#lines])
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    nothing_of_spares()
  end)

  it("makes another for the tenant's next paused session once a resume took one", function()
    local a, ka = session_with_x41()
    local b, kb = session_with_x41()
    pause_and_wait_spare(a)
    pause(b) -- (of the same spec: the spare waiting is its too)
    local made = spares_made()
    assert.are.equal("42", cell(a, ka, "x + 1").results[1]["text/plain"])
    assert.eventually(function() return spares_made() > made end, { timeout = 60, what = "another spare, for b" })
    assert.are.equal("42", cell(b, kb, "x + 1").results[1]["text/plain"])
    assert.truthy(resumed_ahead(a)[1]:find("into one made ahead", 1, true))
    assert.truthy(resumed_ahead(b)[1]:find("into one made ahead", 1, true))
    -- none is paused any more: no other is made (the resume decides before it answers: a spare's
    -- directory is made then); the two taken run a and b
    local dirs = {}
    for d in spares().dirs:gmatch("[^\n]+") do dirs[#dirs + 1] = d end
    assert.are.equal(2, #dirs, table.concat(dirs, " "))
    for _, sid in ipairs({ a, b }) do assert.are.equal(200, http_client.delete(server, key, sid).status) end
    nothing_of_spares()
  end)

  it("releases the tenant's spare with the DELETE of its last session paused with its memory, before the answer", function()
    local a = session_with_x41()
    local b = session_with_x41()
    pause_and_wait_spare(a)
    pause(b)
    -- b still needs it
    assert.are.equal(200, http_client.delete(server, key, a).status)
    local s = spares()
    assert.are.equal(2, s.procs, cjson.encode(s))
    -- none does: gone when the DELETE answers
    assert.are.equal(200, http_client.delete(server, key, b).status)
    assert.are.same({ dirs = "", mounts = "0", procs = 0, groups = 0 }, spares())
  end)

  it("restores a session made from a memory snapshot into one made ahead too: its kernel's x, its own cgroup", function()
    local a, ka = session_with_x41()
    local snap = call("POST", "/v1/sessions/" .. a .. "/snapshots", { name = "base", memory = true }, 120)
    assert.are.equal(201, snap.status, snap.body)
    local b = session_with_x41()
    pause_and_wait_spare(b) -- (a spare of the same spec as a's)
    local fork = call("POST", "/v1/sessions", { from_snapshot = snap.json.snapshot_id }, 120)
    assert.are.equal(201, fork.status, fork.body)
    local f = fork.json.session_id
    assert.truthy(airlockd.log(server):find("sandbox " .. f .. "%-[%w%-]+ restored into spare%-[%w%-]+, made ahead"),
      "the fork's restore did not take the spare")
    assert.are.equal("42", cell(f, ka, "x + 1").results[1]["text/plain"])
    assert.are.equal("42", cell(a, ka, "x + 1").results[1]["text/plain"])
    assert.is_true(#host_state.session_leftovers(server, f).cgroups > 0)
    assert.are.equal(0, spares().groups)
    for _, sid in ipairs({ a, b, f }) do assert.are.equal(200, http_client.delete(server, key, sid).status) end
    assert.are.equal(200, call("DELETE", "/v1/snapshots/" .. snap.json.snapshot_id).status)
    nothing_of_spares()
  end)

  it("clears the spares a killed airlockd left, and releases one not taken after SANDBOX_WARM_IDLE_SECONDS", function()
    local sid = session_with_x41()
    pause(sid)
    assert.eventually(function()
      local s = spares()
      return s.procs == 2 and s.mounts == "1", s
    end, { timeout = 60, what = "a spare made" })
    local killed = spares().dirs
    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    assert.are.equal("1", spares().mounts) -- (its mount outlives the killed server)
    -- the new server clears it (and makes one of its own for the paused session: released 2 s
    -- later untaken)
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = env({ SANDBOX_WARM_IDLE_SECONDS = "2" }), wait = 60 })
    assert.are.equal(0, #host_state.pids_naming(spares_dir() .. "/" .. killed))
    assert.is_nil(spares().dirs:find(killed, 1, true), killed)
    assert.are.equal(0, tonumber((proc.output("grep -c " .. q(spares_dir() .. "/" .. killed) .. " /proc/mounts || true"):gsub("%s+", ""))))
    assert.eventually(function() return spares_made() == 1 end, { timeout = 60, what = "a spare made at the start" })
    nothing_of_spares()
    -- resumed without one (it was released), paused again: its new spare goes unused too
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(200, r.status, r.body)
    assert.is_nil(resumed_ahead(sid)[1]:find("made ahead", 1, true))
    pause_and_wait_spare(sid)
    nothing_of_spares()
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("leaves nothing of a waiting spare after a stop; makes none with SANDBOX_RESTORE_AHEAD=0", function()
    stop_keeping_state()
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = env(), wait = 60 })
    local sid = session_with_x41()
    pause(sid)
    assert.eventually(function() return spares().procs == 2 end, { timeout = 60, what = "a spare made" })
    stop_keeping_state()
    assert.are.same({ dirs = "", mounts = "0", procs = 0, groups = 0 }, spares())
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = env({ SANDBOX_RESTORE_AHEAD = "0" }), wait = 60 })
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(200, r.status, r.body)
    pause(sid)
    r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(200, r.status, r.body)
    local lines = resumed_ahead(sid)
    assert.are.equal(2, #lines, table.concat(lines, "\n"))
    assert.is_nil(lines[2]:find("made ahead", 1, true), lines[2])
    assert.are.same({ dirs = "", mounts = "0", procs = 0, groups = 0 }, spares())
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)
end)
