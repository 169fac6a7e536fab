-- luacheck: max line length 160
-- Spares (issue #10): after a tenant creates a session, airlockd makes the workspace disk of
-- its next new session and boots that session's first sandbox over it, frozen; the next create
-- adopts both (the spare's id becomes the session's), so create + first command costs no disk
-- and no boot. These specs prove that a new session adopts its own tenant's spare (never
-- another tenant's), that an adopted workspace is empty and its first command fresh, that a
-- session with egress never adopts one, that a spare gives its disk back to a session that
-- needs the room, and that nothing of a spare is left after its idle release, a SIGTERM, or a
-- kill -9 and a restart. Waits on the host (frozen freezer groups, mounts); no timing
-- assertions. Loopback only. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"

local q = proc.shell_quote

-- The session ids of the sandboxes waiting frozen under the server's cgroup root, sorted.
local function waiting_ids(root)
  local ids = {}
  for _, dir in ipairs(host_state.waiting_sandboxes(root)) do
    ids[#ids + 1] = dir:match("/(sbx_%x+)%-[^/]*$")
  end
  table.sort(ids)
  return ids
end

local function contains(list, value)
  for _, v in ipairs(list) do
    if v == value then return true end
  end
  return false
end

-- Every session id of the server's tenants.
local function session_ids(server)
  local ids = {}
  for _, key in pairs(server.tenants) do
    for _, item in ipairs(http_client.request(server, "GET", "/v1/sessions", { key = key }).json.sessions) do
      ids[#ids + 1] = item.session_id
    end
  end
  return ids
end

-- Waits until a sandbox waits frozen for no session of the server: a spare; its id.
local function wait_spare(server, root)
  local spare
  proc.wait_until(60, function()
    local sessions = session_ids(server)
    for _, id in ipairs(waiting_ids(root)) do
      if not contains(sessions, id) then spare = id end
    end
    return spare ~= nil
  end, 0.1)
  return spare
end

local function exists(path)
  return proc.run("test -e " .. q(path))
end

local function image_names(server)
  local names = {}
  for name in proc.output("ls " .. q(server.dir .. "/state/images")):gmatch("[^\n]+") do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- Stops the server with the signal and starts it again on the same state directory.
local function restart(server, signal, env)
  os.execute("kill -" .. signal .. " " .. server.pid)
  assert.is_true(proc.wait_until(30, function() return not proc.alive(server.pid) end))
  return airlockd.start({ dir = server.dir, tenants = server.tenants, env = env })
end

describe("spares for new sessions", function()
  local s, root

  lazy_setup(function()
    s = airlockd.start({ env = { SANDBOX_WARM_MAX = "6", SANDBOX_EGRESS_POLICY = '{"acme": ["example.com"]}' } })
    root = host_state.cgroup_root(s.dir .. "/state")
  end)

  lazy_teardown(function()
    if s then airlockd.stop(s) end
  end)

  it("gives a new session the disk and booted sandbox made ahead for its tenant, empty and fresh", function()
    local key = s.tenants.acme
    local first = http_client.create(s, key).json.session_id
    assert.are.equal(0, http_client.exec(s, key, first,
      "echo private > /workspace/mine; echo secret > /tmp/left; nohup sleep 300 >/dev/null 2>&1 &").json.exit_code)
    local spare = wait_spare(s, root)
    assert.truthy(spare, "no spare booted after the first create")
    assert.is_true(exists(s.dir .. "/state/workspaces/" .. spare), "the spare's disk is mounted before any session has it")

    local second = http_client.create(s, key)
    assert.are.equal(201, second.status, second.body)
    assert.are.equal(spare, second.json.session_id)
    local r = http_client.exec(s, key, spare, table.concat({
      "ls -A /workspace | tr '\\n' ' '; echo '|'",
      "ls -A /tmp | tr '\\n' ' '; echo '|'",
      "ps -e -o comm= | grep -v -x -e ps -e bash -e grep -e tr | tr '\\n' ' '; echo '|'",
      "ps -o pid=,comm= -p 1 | sed 's/^ *//'",
    }, "\n")).json
    assert.are.equal(0, r.exit_code, r.output)
    assert.are.equal("|\n|\n|\n1 bash\n", r.stdout)
    -- its workspace is its own from now on: files persist, the other session's stay apart
    assert.are.equal(200, http_client.write(s, key, spare, "ours.txt", "adopted\n").status)
    assert.are.equal("adopted\n", http_client.exec(s, key, spare, "cat /workspace/ours.txt; ls /workspace").json.stdout:match("^[^\n]*\n"))
    assert.are.equal("mine\n", http_client.exec(s, key, first, "ls /workspace").json.stdout)
    assert.are.equal("Error: File 'ours.txt' does not exist.", http_client.read(s, key, first, "ours.txt").json.content)
    -- the session list knows it like any other
    local listed = {}
    for _, item in ipairs(http_client.request(s, "GET", "/v1/sessions", { key = key }).json.sessions or {}) do
      listed[#listed + 1] = item.session_id
    end
    assert.is_true(contains(listed, spare), table.concat(listed, " "))
  end)

  it("never gives one tenant's spare to another tenant, nor to a session with egress", function()
    local acme, other = s.tenants.acme, s.tenants.other
    local a1 = http_client.create(s, acme).json.session_id
    assert.truthy(a1)
    local spare = wait_spare(s, root)
    assert.truthy(spare)
    local o1 = http_client.create(s, other)
    assert.are.equal(201, o1.status, o1.body)
    assert.are_not.equal(spare, o1.json.session_id)
    local e1 = http_client.create(s, acme, '{"egress": ["example.com"]}')
    assert.are.equal(201, e1.status, e1.body)
    assert.are_not.equal(spare, e1.json.session_id)
    assert.is_true(contains(waiting_ids(root), spare), "acme's spare is still waiting")
    assert.are.equal(spare, http_client.create(s, acme).json.session_id)
  end)
end)

describe("spares' disks", function()
  it("go back to a session that needs the room", function()
    -- a 5 MB quota makes an 8 MB image: a session and the tenant's spare fill 16 MB
    local d = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "5", SANDBOX_DISK_TOTAL_MB = "16", SANDBOX_WARM_MAX = "4" } })
    local droot = host_state.cgroup_root(d.dir .. "/state")
    local ok, err = pcall(function()
      local a = http_client.create(d, d.tenants.acme).json.session_id
      local spare = wait_spare(d, droot)
      assert.truthy(spare)
      local both = { a .. ".img", spare .. ".img" }
      table.sort(both)
      assert.are.same(both, image_names(d))
      local o = http_client.create(d, d.tenants.other)
      assert.are.equal(201, o.status, o.body)
      local want = { a .. ".img", o.json.session_id .. ".img" }
      table.sort(want)
      assert.are.same(want, image_names(d))
      assert.are.equal(0, http_client.exec(d, d.tenants.other, o.json.session_id, "echo fits > /workspace/f").json.exit_code)
    end)
    airlockd.stop(d)
    assert(ok, err)
  end)

  it("are deleted when the spare is released for being idle", function()
    local d = airlockd.start({ env = { SANDBOX_WARM_MAX = "4", SANDBOX_WARM_IDLE_SECONDS = "2" } })
    local droot = host_state.cgroup_root(d.dir .. "/state")
    local ok, err = pcall(function()
      local a = http_client.create(d, d.tenants.acme).json.session_id
      local spare = wait_spare(d, droot)
      assert.truthy(spare)
      assert.is_true(proc.wait_until(30, function()
        return not exists(d.dir .. "/state/images/" .. spare .. ".img") and not contains(waiting_ids(droot), spare)
      end, 0.2), "the idle spare is still there")
      assert.is_false(exists(d.dir .. "/state/workspaces/" .. spare))
      assert.are.same({ a .. ".img" }, image_names(d))
    end)
    airlockd.stop(d)
    assert(ok, err)
  end)

  it("leave nothing after SIGTERM, nor after kill -9 and a restart", function()
    local env = { SANDBOX_WARM_MAX = "4" }
    local d = airlockd.start({ env = env })
    local droot = host_state.cgroup_root(d.dir .. "/state")
    local ok, err = pcall(function()
      local a = http_client.create(d, d.tenants.acme).json.session_id
      local spare = wait_spare(d, droot)
      assert.truthy(spare)
      d = restart(d, "TERM", env)
      assert.are.same({ a .. ".img" }, image_names(d))
      assert.is_false(exists(d.dir .. "/state/workspaces/" .. spare))
      assert.are.same({}, waiting_ids(droot))
      assert.are.equal(0, http_client.exec(d, d.tenants.acme, a, "true").json.exit_code)
      assert.are.equal(404, http_client.exec(d, d.tenants.acme, spare, "true").status)

      local b = http_client.create(d, d.tenants.acme).json.session_id
      spare = wait_spare(d, droot)
      assert.truthy(spare)
      local old = host_state.pids_naming(d.dir .. "/state/runsc")
      d = restart(d, "KILL", env)
      for _, pid in ipairs(old) do assert.is_false(proc.alive(pid), "pid " .. pid .. " survived the restart") end
      local want = { a .. ".img", b .. ".img" }
      table.sort(want)
      assert.are.same(want, image_names(d))
      assert.is_false(exists(d.dir .. "/state/workspaces/" .. spare))
      assert.are.same({}, host_state.waiting_sandboxes(droot))
    end)
    airlockd.stop(d)
    assert(ok, err)
  end)
end)
