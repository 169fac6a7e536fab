-- luacheck: max line length 160
-- Nothing lost on restart (issue #8 item 6): sessions are saved in the state directory
-- (SANDBOX_SESSION_STATE, on by default) and come back on the same state directory with their
-- id, tenant, egress, timestamps (the idle time keeps counting), quota and files, after a
-- SIGTERM (their disks were unmounted: checked and mounted again) and after a kill -9 (their
-- disks are still mounted: taken over). A session whose image is held elsewhere is refused and
-- kept for later. The start removes what a killed server left of sessions that are gone, and
-- only that. --state-dir refuses a directory airlockd did not make. After DELETE and after a
-- shutdown nothing of the state directory is mounted or attached. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
require "support.eventually"
local http_client = require "support.http_client"
local proc = require "support.proc"
local cjson = require "cjson"

local q = proc.shell_quote
local http = http_client.request

local POLICY = '{"acme":["pypi"]}'

local function sessions_by_id(server, key)
  local r = http(server, "GET", "/v1/sessions", { key = key })
  assert.are.equal(200, r.status, r.body)
  local by = {}
  for _, s in ipairs(r.json.sessions) do by[s.session_id] = s end
  return by, r.json.sessions
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

local function wait_dead(server)
  assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end), "airlockd did not stop")
end

local function restart(server, env)
  return airlockd.start({ dir = server.dir, tenants = server.tenants, env = env, wait = 60 })
end

-- Waits until the state file holds every listed session's last access (touches are saved within
-- 5 s; a kill -9 before that would roll them back by up to that much, as documented).
local function wait_saved(server, listed)
  assert.is_true(proc.wait_until(15, function()
    local ok, saved = pcall(cjson.decode, proc.read_file(server.dir .. "/state/sessions.json") or "")
    if not ok then return false end
    local at = {}
    for _, s in ipairs(saved.sessions) do at[s.session_id] = s.last_accessed_at end
    for _, by in pairs(listed) do
      for id, s in pairs(by) do
        if at[id] ~= s.last_accessed_at then return false end
      end
    end
    return true
  end), "the state file did not catch up")
end

local function image(server, id)
  return server.dir .. "/state/images/" .. id .. ".img"
end

local function exists(path)
  return proc.run("test -e " .. q(path))
end

describe("airlockd restarts on the same state directory", function()
  local ENV = { SANDBOX_EGRESS_POLICY = POLICY, SANDBOX_WORKSPACE_QUOTA_MB = "8",
    SANDBOX_WARM_NEW = "0" } -- counts the sessions' disks only (spares: warm_spares_spec)
  local server

  after_each(function()
    if server then airlockd.stop(server) end
    server = nil
  end)

  -- Three sessions of two tenants with files written through the API and by a command.
  local function populate()
    server = airlockd.start({ env = ENV })
    local acme, other = server.tenants.acme, server.tenants.other
    local r = http_client.create(server, acme, '{"egress":["pypi"]}')
    assert.are.equal(201, r.status, r.body)
    local a1 = r.json.session_id
    local a2 = http_client.create(server, acme).json.session_id
    local o1 = http_client.create(server, other).json.session_id
    for _, pair in ipairs({ { acme, a1 }, { acme, a2 }, { other, o1 } }) do
      assert.are.equal(200, http_client.write(server, pair[1], pair[2], "dir/api.txt", "written by the API " .. pair[2]).status)
    end
    local e = http_client.exec(server, acme, a1, "echo from a command > cmd.txt && head -c 2000000 /dev/urandom > blob && sha256sum blob")
    assert.are.equal(0, e.json.exit_code, e.body)
    local before = { acme = sessions_by_id(server, acme), other = sessions_by_id(server, other) }
    return { a1 = a1, a2 = a2, o1 = o1, sum = e.json.stdout }, before
  end

  local function check_restored(ids, before)
    local acme, other = server.tenants.acme, server.tenants.other
    local now_acme, now_other = sessions_by_id(server, acme), sessions_by_id(server, other)
    assert.are.equal(2, count(now_acme))
    assert.are.equal(1, count(now_other))
    -- the same sessions, field for field: id, tenant, egress, created_at, last_accessed_at,
    -- expires_at (the idle time counts on from before the restart), disk_quota_mb
    assert.are.same(before.acme, now_acme)
    assert.are.same(before.other, now_other)
    assert.are.same({ "pypi.org", "files.pythonhosted.org" }, now_acme[ids.a1].egress)
    assert.are.equal(8, now_acme[ids.a1].disk_quota_mb)
    for _, pair in ipairs({ { acme, ids.a1 }, { acme, ids.a2 }, { other, ids.o1 } }) do
      assert.are.equal("written by the API " .. pair[2], http_client.read(server, pair[1], pair[2], "dir/api.txt").json.content)
    end
    local e = http_client.exec(server, acme, ids.a1, "cat cmd.txt && sha256sum blob && df -k --output=size /workspace | tail -1")
    assert.are.equal(0, e.json.exit_code, e.body)
    local cat, sum, kb = e.json.stdout:match("^(from a command\n)(.-\n)%s*(%d+)\n$")
    assert.are.equal("from a command\n", cat, e.json.stdout)
    assert.are.equal(ids.sum, sum)
    assert.truthy(tonumber(kb) >= 8 * 1024 and tonumber(kb) < 12 * 1024, kb)
    -- tenants stay apart, and the restored server makes new sessions
    assert.are.equal(403, http_client.read(server, other, ids.a1, "dir/api.txt").status)
    assert.are.equal(201, http_client.create(server, other).status)
    -- exactly one loop device per session: nothing was mounted twice
    assert.are.equal(4, #airlockd.host_objects(server.dir).loops)
  end

  it("after SIGTERM: sessions saved, disks unmounted, then checked and mounted again", function()
    local ids, before = populate()
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    assert.are.same({ mounts = {}, loops = {} }, airlockd.settled(server.dir))
    for _, id in pairs({ ids.a1, ids.a2, ids.o1 }) do assert.is_true(exists(image(server, id)), id) end
    server = restart(server, ENV)
    check_restored(ids, before)
    local log = airlockd.log(server)
    assert.truthy(log:find("restored 3 sessions in %d+ ms %(0 mounts taken over, 3 images mounted again%)"), log)
  end)

  it("after kill -9: the mounts it left are taken over, not mounted twice", function()
    local ids, before = populate()
    wait_saved(server, before)
    os.execute("kill -9 " .. server.pid)
    wait_dead(server)
    local left = airlockd.host_objects(server.dir)
    assert.are.equal(4, #left.mounts) -- the workspaces mount and one per session
    assert.are.equal(3, #left.loops)
    server = restart(server, ENV)
    check_restored(ids, before)
    local log = airlockd.log(server)
    assert.truthy(log:find("restored 3 sessions in %d+ ms %(3 mounts taken over, 0 images mounted again%)"), log)
  end)

  it("keeps counting the idle time: a session idle past the TTL while the server was down is gone", function()
    -- the idle times are moved back in the state file while the server is down, so the test
    -- needs no waiting for the TTL and no tight timing: stale was last used a TTL and more
    -- ago, soon a TTL less 20 s ago (a count restarted at the restart would keep it 40 s);
    -- 20 s is room for the restart on a loaded machine (2-4 s under ASan at load average 10),
    -- where soon must still have time left; then the wait for soon to expire is LEFT plus at
    -- most one sweep (every TTL/4 s)
    local TTL, LEFT = 40, 20
    local env = { SANDBOX_SESSION_TTL = tostring(TTL) }
    server = airlockd.start({ env = env })
    local key = server.tenants.acme
    local stale = http_client.create(server, key).json.session_id
    local soon = http_client.create(server, key).json.session_id
    assert.are.equal(200, http_client.read(server, key, soon, "x").status)
    os.execute("kill -TERM " .. server.pid) -- (a shutdown saves every session)
    wait_dead(server)
    local path = server.dir .. "/state/sessions.json"
    local saved = cjson.decode(proc.read_file(path))
    local now = math.floor(proc.output("date +%s") + 0) -- whole seconds: exact through JSON
    local last = { [stale] = now - TTL - 5, [soon] = now - TTL + LEFT }
    for _, s in ipairs(saved.sessions) do s.last_accessed_at = last[s.session_id] or s.last_accessed_at end
    -- (lua-cjson writes the empty egress lists as {})
    proc.write_file(path, (cjson.encode(saved):gsub('"egress":{}', '"egress":[]')))
    server = restart(server, env)
    local listed = sessions_by_id(server, key)
    assert.is_nil(listed[stale])
    assert.is_false(exists(image(server, stale)))
    assert.truthy(airlockd.log(server):find("session " .. stale .. " expired while the server was down", 1, true), airlockd.log(server))
    assert.truthy(listed[soon], "the session with time left is back")
    assert.are.equal(last[soon], listed[soon].last_accessed_at)
    assert.are.equal(last[soon] + TTL, listed[soon].expires_at)
    -- and it expires on schedule, counted from before the restart (expires_at above)
    assert.eventually(function()
      local left = sessions_by_id(server, key)[soon]
      return left == nil, left
    end, { timeout = LEFT + 30, step = 1, what = "soon expires" })
    -- (its disk goes right after it leaves the list)
    assert.eventually(function() return not exists(image(server, soon)) end, { what = "soon's image is removed" })
  end)

  it("refuses (and keeps for a later start) a session whose image a loop device elsewhere still holds", function()
    local ids = populate()
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    -- something else attaches a2's image (a copy of its mount in another namespace does the same)
    local dev = proc.output("losetup -f --show " .. q(image(server, ids.a2))):gsub("%s+$", "")
    assert.truthy(dev:match("^/dev/loop%d+$"), dev)
    local ok, err = pcall(function()
      server = restart(server, ENV)
      local acme = sessions_by_id(server, server.tenants.acme)
      assert.truthy(acme[ids.a1])
      assert.is_nil(acme[ids.a2])
      local log = airlockd.log(server)
      assert.truthy(log:find("session " .. ids.a2 .. " not restored %(its image is kept for a later start%): " ..
        "/.-/images/" .. ids.a2 .. "%.img is still attached to " .. dev), log)
      assert.is_true(exists(image(server, ids.a2)))
      assert.are.equal(404, http_client.read(server, server.tenants.acme, ids.a2, "dir/api.txt").status)
    end)
    os.execute("losetup -d " .. dev)
    assert(ok, err)
    -- once it is free, the next start serves it again
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    server = restart(server, ENV)
    assert.are.equal("written by the API " .. ids.a2,
      http_client.read(server, server.tenants.acme, ids.a2, "dir/api.txt").json.content)
  end)

  it("removes only what a killed server left of sessions that are gone", function()
    populate()
    os.execute("kill -9 " .. server.pid)
    wait_dead(server)
    -- leftovers of a session the state file does not know: an image, attached and mounted
    local ghost = "sbx_00000000dead"
    local state = server.dir .. "/state"
    assert.is_true(proc.run("fallocate -l 8M " .. q(state .. "/images/" .. ghost .. ".img") .. " && mkfs.ext4 -q " ..
      q(state .. "/images/" .. ghost .. ".img")))
    assert.is_true(proc.run("mkdir " .. q(state .. "/workspaces/" .. ghost) .. " && mount -o loop " ..
      q(state .. "/images/" .. ghost .. ".img") .. " " .. q(state .. "/workspaces/" .. ghost)))
    -- and a file that is not an image: never touched
    proc.write_file(state .. "/images/README", "not ours to delete")
    assert.are.equal(5, #airlockd.host_objects(server.dir).mounts)
    server = restart(server, ENV)
    assert.is_false(exists(state .. "/images/" .. ghost .. ".img"))
    assert.is_false(exists(state .. "/workspaces/" .. ghost))
    assert.are.equal("not ours to delete", proc.read_file(state .. "/images/README"))
    assert.are.equal(4, #airlockd.host_objects(server.dir).mounts)
    -- (the ghost's loop detaches itself as its mount goes, asynchronously)
    assert.is_true(proc.wait_until(10, function() return #airlockd.host_objects(server.dir).loops == 3 end))
    assert.truthy(airlockd.log(server):find("removed leftovers of an earlier run: 1 mounts", 1, true), airlockd.log(server))
    assert.are.equal(3, count(sessions_by_id(server, server.tenants.acme)) + count(sessions_by_id(server, server.tenants.other)))
  end)

  it("leaves nothing mounted or attached after DELETE, and after a shutdown", function()
    server = airlockd.start({ env = ENV })
    local key = server.tenants.acme
    local a = http_client.create(server, key).json.session_id
    local b = http_client.create(server, key).json.session_id
    assert.are.equal(200, http_client.write(server, key, a, "x.txt", "x").status)
    assert.are.equal(200, http_client.delete(server, key, a).status)
    local left = airlockd.settled(server.dir, 1, 2)
    assert.are.same({ server.dir .. "/state/workspaces", server.dir .. "/state/workspaces/" .. b }, left.mounts)
    assert.are.equal(1, #left.loops)
    assert.is_false(exists(image(server, a)))
    local saved = cjson.decode(proc.read_file(server.dir .. "/state/sessions.json"))
    assert.are.equal(1, #saved.sessions)
    assert.are.equal(b, saved.sessions[1].session_id)
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    assert.are.same({ mounts = {}, loops = {} }, airlockd.settled(server.dir))
  end)

  it("reads SANDBOX_SESSION_STATE as the state file's place; off ends sessions with the server", function()
    local file = proc.make_temp_dir() .. "/sessions.json"
    server = airlockd.start({ env = { SANDBOX_SESSION_STATE = file } })
    local key = server.tenants.acme
    local id = http_client.create(server, key).json.session_id
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    assert.truthy(proc.read_file(file):find(id, 1, true))
    assert.is_false(exists(server.dir .. "/state/sessions.json"))
    server = restart(server, { SANDBOX_SESSION_STATE = file })
    assert.truthy(sessions_by_id(server, key)[id])
    -- off: the next start forgets them and removes their disks; a shutdown removes them too
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    server = restart(server, { SANDBOX_SESSION_STATE = "off" })
    assert.is_nil(sessions_by_id(server, key)[id])
    assert.is_false(exists(image(server, id)))
    local again = http_client.create(server, key).json.session_id
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    assert.is_false(exists(image(server, again)))
    proc.remove_tree(file:match("^(.*)/"))
  end)

  it("does not start on a state file it cannot read, and deletes nothing", function()
    local ids = populate()
    os.execute("kill -TERM " .. server.pid)
    wait_dead(server)
    proc.write_file(server.dir .. "/state/sessions.json", "{ not json")
    local rc, out = proc.run_capture("env SANDBOX_API_KEY=k " .. q(airlockd.binary()) .. " --listen 127.0.0.1:0 --state-dir " ..
      q(server.dir .. "/state"))
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("SANDBOX_SESSION_STATE: " .. server.dir .. "/state/sessions.json is not a session state file", 1, true), out)
    for _, id in pairs({ ids.a1, ids.a2, ids.o1 }) do assert.is_true(exists(image(server, id)), id) end
    assert.are.same({ mounts = {}, loops = {} }, airlockd.settled(server.dir))
  end)
end)

describe("airlockd --state-dir", function()
  local function start_on(dir)
    return proc.run_capture("env SANDBOX_API_KEY=k " .. q(airlockd.binary()) .. " --listen 127.0.0.1:0 --state-dir " .. q(dir))
  end

  it("refuses a directory that is not empty and was not made by airlockd, and touches nothing in it", function()
    local dir = proc.make_temp_dir()
    proc.write_file(dir .. "/notes.txt", "mine")
    assert.is_true(proc.run("mkdir " .. q(dir .. "/workspaces") .. " " .. q(dir .. "/runsc") .. " && echo keep > " .. q(dir .. "/workspaces/x")))
    -- every file and folder, itself included, with its size and mtime (not `ls -la`, whose ..
    -- line changes with whatever else the machine puts in /tmp)
    local function list() return proc.output("find " .. q(dir) .. " -printf '%p %y %m %s %T@\\n' | sort") end
    local listing = list()
    local rc, out = start_on(dir)
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("airlockd: --state-dir " .. dir .. ": the directory is not empty and was not made by airlockd " ..
      "(no .airlockd-state file); airlockd never takes over or deletes files it did not create", 1, true), out)
    assert.are.equal(listing, list())
    proc.remove_tree(dir)
  end)

  it("refuses the state directory of a newer airlockd, and one another airlockd is using", function()
    local server = airlockd.start()
    local ok, err = pcall(function()
      local rc, out = start_on(server.dir .. "/state")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("airlockd: --state-dir " .. server.dir .. "/state: another airlockd is using it", 1, true), out)
      assert.are.equal(200, http(server, "GET", "/healthz").status) -- the first one is untouched
      os.execute("kill -TERM " .. server.pid)
      wait_dead(server)
      proc.write_file(server.dir .. "/state/.airlockd-state", "airlockd state directory\nformat 2\n")
      rc, out = start_on(server.dir .. "/state")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("made by a newer airlockd (state format 2; this one reads 1)", 1, true), out)
    end)
    airlockd.stop(server)
    assert(ok, err)
  end)

  it("takes an empty directory and marks it", function()
    local dir = proc.make_temp_dir()
    assert.is_true(proc.run("mkdir " .. q(dir .. "/state")))
    local server = airlockd.start({ dir = dir })
    local ok, err = pcall(function()
      assert.truthy(proc.read_file(dir .. "/state/.airlockd-state"):find("\nformat 1\n", 1, true))
    end)
    airlockd.stop(server)
    assert(ok, err)
  end)
end)
