-- luacheck: max line length 160
-- Startup cleanup (issue #8 item 6, host objects of the sandboxes): airlockd killed with
-- SIGKILL during a `sleep 30` leaves its run's cgroups and its runsc container's state; the
-- next airlockd on the same state directory kills every process and removes every cgroup
-- under that directory's root airlockd-<16 hex of SHA-256(realpath(state dir))> (in every
-- hierarchy, frozen groups thawed first) and every process naming its runsc root, and leaves
-- `runsc list` on that root empty, while a second airlockd on another state directory keeps
-- running its command undisturbed. Leftovers a crash could leave beyond what the kill left
-- are planted too: a process in a group of the old root (out of reach of the parent-death
-- signal), one in a frozen group, and one carrying --root=<the runsc root>. Mounts and loop
-- devices are the storage cleanup's. Loopback only. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"

local q = proc.shell_quote
local RUNSC = os.getenv("AIRLOCK_RUNSC") or ".deps/runsc/usr/bin/runsc"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- Starts a process in the background and returns its pid.
local function spawn(dir, name, command)
  return proc.spawn(command, dir .. "/" .. name .. ".log", dir .. "/" .. name .. ".pid")
end

local function runsc_list(server)
  return proc.output(q(RUNSC) .. " --root " .. q(server.dir .. "/state/runsc") .. " list -quiet 2>&1")
end

-- The files under the server's runsc root (runsc's container state).
local function runsc_state(server)
  return proc.output("ls -A " .. q(server.dir .. "/state/runsc"))
end

describe("airlockd startup after a kill -9", function()
  local a, b, scratch, frozen_dir, aroot
  local planted = {}

  lazy_teardown(function()
    -- a failed run must not leave a frozen process (it could not even die)
    if frozen_dir then os.execute("echo THAWED > " .. q(frozen_dir .. "/freezer.state") .. " 2>/dev/null") end
    for _, pid in ipairs(planted) do os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    if a then airlockd.stop(a) end
    if b then airlockd.stop(b) end
    if aroot then host_state.remove_cgroup_root(aroot) end -- when the restart never came
    if scratch then proc.remove_tree(scratch) end
  end)

  it("removes the old server's processes, cgroups and containers, and nothing of another server's", function()
    a = airlockd.start()
    b = airlockd.start()
    scratch = proc.make_temp_dir()
    aroot = host_state.cgroup_root(a.dir .. "/state")
    local broot = host_state.cgroup_root(b.dir .. "/state")
    assert.are_not.equal(aroot, broot)
    local akey, bkey = a.tenants.acme, b.tenants.acme
    local aid = http_client.create(a, akey).json.session_id
    local bid = http_client.create(b, bkey).json.session_id
    local ajob = http_client.exec_async(a, akey, aid, "sleep 30", 60)
    local bjob = http_client.exec_async(b, bkey, bid, "sleep 12; echo neighbour", 60)
    assert.is_true(proc.wait_until(30, function() return host_state.runsc_runs(a) >= 1 and host_state.runsc_runs(b) >= 1 end))

    -- leftovers a crash could leave: a process in a group of the old root, one frozen, and
    -- one naming the runsc root
    for _, ctl in ipairs({ "memory", "pids", "cpu" }) do
      assert.is_true(proc.run("mkdir -p /sys/fs/cgroup/" .. ctl .. "/" .. aroot .. "/t-acme/planted"))
    end
    local in_group = spawn(scratch, "in_group", "sleep 300")
    for _, ctl in ipairs({ "memory", "pids", "cpu" }) do
      write("/sys/fs/cgroup/" .. ctl .. "/" .. aroot .. "/t-acme/planted/cgroup.procs", tostring(in_group))
    end
    frozen_dir = "/sys/fs/cgroup/freezer/" .. aroot .. "/t-acme/frozen"
    assert.is_true(proc.run("mkdir -p " .. q(frozen_dir)))
    local frozen = spawn(scratch, "frozen", "sleep 300")
    write(frozen_dir .. "/cgroup.procs", tostring(frozen))
    write(frozen_dir .. "/freezer.state", "FROZEN")
    local named = spawn(scratch, "named", "python3 -c 'import time; time.sleep(300)' --root=" .. q(a.dir .. "/state/runsc"))
    planted = { in_group, frozen, named }
    local old = host_state.pids_naming(a.dir .. "/state/runsc")
    assert.truthy(#old >= 3, "runsc, its gofer and sandbox, and the planted one") -- runsc run, gofer, sandbox (+ stubs), planted

    -- a crash that takes airlockd's guard with it (the guard alone would clear the cgroups at
    -- once: warm_spec.lua), so that what the next start removes is all still there
    local guards = host_state.pids_naming("--cgroup-guard\0" .. aroot)
    assert.are.equal(1, #guards)
    os.execute("kill -9 " .. guards[1] .. " " .. a.pid)
    assert.is_true(proc.wait_until(10, function() return not proc.alive(a.pid) and not proc.alive(guards[1]) end))
    assert.is_nil(ajob.wait(30))
    -- what the kill left behind
    local left = table.concat(host_state.cgroups_under(aroot), "\n")
    assert.truthy(left:find("/t-acme/" .. aid .. "-", 1, true), left)
    -- (runsc's state of the sandbox that ran the command: the session's own, or a spare booted
    -- ahead under the spare's id and handed to it)
    assert.truthy(runsc_state(a):find("sbx_%x+%-[sw]%-"), runsc_state(a))
    for _, pid in ipairs(planted) do assert.is_true(proc.alive(pid)) end

    a = airlockd.start({ dir = a.dir, tenants = a.tenants })
    for _, pid in ipairs(old) do assert.is_false(proc.alive(pid), "pid " .. pid .. " survived the restart") end
    for _, pid in ipairs(planted) do assert.is_false(proc.alive(pid), "planted pid " .. pid .. " survived the restart") end
    assert.are.same({}, host_state.pids_naming(a.dir .. "/state/runsc"))
    assert.are.equal("", runsc_list(a))
    assert.are.equal("", runsc_state(a))
    -- only the group the new server's own probe ran in is left, in every hierarchy
    for _, dir in ipairs(host_state.cgroups_under(aroot)) do
      assert.truthy(dir:match("/" .. aroot:gsub("%-", "%%-") .. "/internal$"), dir)
    end
    -- and the new server works
    local id = http_client.create(a, akey).json.session_id
    assert.are.equal("fresh\n", http_client.exec(a, akey, id, "echo fresh").json.stdout)

    -- the other server's command ran on, in its own groups
    assert.is_true(host_state.cgroup_root_exists(broot))
    assert.is_true(airlockd.alive(b))
    local res = bjob.wait(60)
    assert.are.equal("neighbour\n", res and res.stdout)
  end)
end)
