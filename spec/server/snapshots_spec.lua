-- luacheck: max line length 160
-- Snapshots of sessions' workspaces (issue 26 item 3, files only; memory: memsnap_spec.lua): POST
-- /v1/sessions/{id}/snapshots while the session runs, GET/DELETE /v1/snapshots[/{id}], and
-- POST /v1/sessions {"from_snapshot"}. A snapshot taken right after a command wrote a file holds
-- that file (the session's sandbox is flushed and its filesystem frozen for the copy); two sessions
-- made from one snapshot are independent; tenants never see each other's; the limits
-- max_snapshots / max_snapshot_mb answer 429 naming them; snapshots survive a restart and a kill -9,
-- and half-written ones are removed at start; DELETE leaves nothing on disk. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
require "support.eventually"
local http_client = require "support.http_client"
local proc = require "support.proc"

local http = http_client.request
local q = proc.shell_quote

local function snapshot(server, key, id, body)
  return http(server, "POST", "/v1/sessions/" .. id .. "/snapshots", { key = key, body = body or '{"name": "s"}' })
end

local function snap_dir(server)
  return server.dir .. "/state/snapshots"
end

-- The names in dir but the store's lock file (.lock, always there once a snapshot was taken).
local function entries(dir)
  local out = {}
  local p = io.popen("ls -A " .. q(dir) .. " 2>/dev/null")
  for name in p:lines() do
    if name ~= ".lock" then out[#out + 1] = name end
  end
  p:close()
  table.sort(out)
  return out
end

describe("snapshots", function()
  local server
  local ENV = { SANDBOX_WORKSPACE_QUOTA_MB = "64", SANDBOX_WARM_NEW = "0",
    SANDBOX_TENANT_LIMITS = '{"*": {"max_snapshots": 3}, "other": {"max_snapshot_mb": 100}}' }

  after_each(function()
    if server then airlockd.stop(server) end
    server = nil
  end)

  for _, mode in ipairs({ "session", "command" }) do
    it("keeps what a command wrote right before it, and forks independent sessions from it (SANDBOX_EXEC_MODE=" .. mode .. ")", function()
      local env = { SANDBOX_EXEC_MODE = mode }
      for k, v in pairs(ENV) do env[k] = v end
      server = airlockd.start({ env = env })
      local acme = server.tenants.acme
      local id = http_client.create(server, acme).json.session_id
      -- a file written by a program in the sandbox, kept in its page cache, snapshotted at once
      local e = http_client.exec(server, acme, id,
        "python3 -c \"f=open('kept.txt','w'); f.write('x'*100000 + 'end'); f.flush()\" && mkdir -p d && echo deep > d/f && ln -s kept.txt link")
      assert.are.equal(0, e.json.exit_code, e.body)
      local r = snapshot(server, acme, id, '{"name": "before-refactor"}')
      assert.are.equal(201, r.status, r.body)
      local snap = r.json
      assert.truthy(snap.snapshot_id:match("^snap_%x+$"), r.body)
      assert.are.equal("before-refactor", snap.name)
      assert.are.equal(false, snap.memory)
      assert.are.equal(id, snap.session_id)
      assert.are.equal("sandbox-base:latest", snap.template)
      assert.are.equal(64, snap.disk_mb)
      assert.truthy(snap.bytes > 100000 and snap.bytes < 64 * 1048576, r.body) -- sparse: far below the image's size
      -- the session keeps running and changing; the snapshot does not
      assert.are.equal(0, http_client.exec(server, acme, id, "echo later > later.txt && rm kept.txt").json.exit_code)

      local forks = {}
      for i = 1, 2 do
        local c = http_client.create(server, acme, '{"from_snapshot": "' .. snap.snapshot_id .. '"}')
        assert.are.equal(201, c.status, c.body)
        assert.are.equal(64, c.json.disk_mb)
        forks[i] = c.json.session_id
        local check = http_client.exec(server, acme, forks[i],
          "tail -c 3 kept.txt; wc -c < kept.txt; cat d/f; readlink link; test -e later.txt || echo no-later")
        assert.are.equal("end100003\ndeep\nkept.txt\nno-later\n", check.json.stdout, check.body)
      end
      -- independent: a write in one fork is not in the other, nor in the original
      assert.are.equal(0, http_client.exec(server, acme, forks[1], "echo one > mine.txt").json.exit_code)
      assert.are.equal("absent\n", http_client.exec(server, acme, forks[2], "test -e mine.txt && echo there || echo absent").json.stdout)
      assert.are.equal("absent\n", http_client.exec(server, acme, id, "test -e mine.txt && echo there || echo absent").json.stdout)

      -- listing and reading it; the source session's deletion leaves it
      assert.are.equal(200, http_client.delete(server, acme, id).status)
      local list = http(server, "GET", "/v1/snapshots", { key = acme })
      assert.are.equal(200, list.status, list.body)
      assert.are.equal(1, #list.json.snapshots)
      assert.are.same(snap, list.json.snapshots[1])
      local one = http(server, "GET", "/v1/snapshots/" .. snap.snapshot_id, { key = acme })
      assert.are.same(snap, one.json)

      -- DELETE leaves nothing of it on disk
      local d = http(server, "DELETE", "/v1/snapshots/" .. snap.snapshot_id, { key = acme })
      assert.are.equal(200, d.status, d.body)
      assert.are.same({}, entries(snap_dir(server)))
      assert.are.equal(404, http(server, "GET", "/v1/snapshots/" .. snap.snapshot_id, { key = acme }).status)
      assert.are.equal(404, http(server, "DELETE", "/v1/snapshots/" .. snap.snapshot_id, { key = acme }).status)
      assert.are.equal(404, http_client.create(server, acme, '{"from_snapshot": "' .. snap.snapshot_id .. '"}').status)
    end)
  end

  it("keeps tenants apart, refuses bad input naming the field, answers the limits, counts in the disk budget", function()
    server = airlockd.start_with_admin({ env = ENV })
    local acme, other = server.tenants.acme, server.tenants.other
    local function disk_used()
      local st = http(server, "GET", "/v1/admin/status", { key = server.admin })
      assert.are.equal(200, st.status, st.body)
      return st.json.budgets.disk.used_bytes
    end
    local id = http_client.create(server, acme).json.session_id
    local before = disk_used()
    local first = snapshot(server, acme, id).json
    local snap = first.snapshot_id
    assert.are.equal(before + first.bytes, disk_used()) -- counted at its real size
    -- another tenant: neither the session nor the snapshot exists for it
    assert.are.equal(404, snapshot(server, other, id).status)
    assert.are.equal(404, http(server, "GET", "/v1/snapshots/" .. snap, { key = other }).status)
    assert.are.equal(404, http(server, "DELETE", "/v1/snapshots/" .. snap, { key = other }).status)
    assert.are.equal(404, http_client.create(server, other, '{"from_snapshot": "' .. snap .. '"}').status)
    assert.are.same({}, http(server, "GET", "/v1/snapshots", { key = other }).json.snapshots)
    assert.are.equal(404, snapshot(server, acme, "sbx_000000000000").status)

    local function field_of(r)
      assert.are.equal(422, r.status, r.body)
      return r.json.detail[1].loc[2]
    end
    assert.are.equal("name", field_of(snapshot(server, acme, id, '{"name": "../x"}')))
    assert.are.equal("name", field_of(snapshot(server, acme, id, '{"name": "' .. string.rep("a", 65) .. '"}')))
    assert.are.equal("name", field_of(snapshot(server, acme, id, '{"name": 5}')))
    assert.are.equal("memory", field_of(snapshot(server, acme, id, '{"memory": "yes"}')))
    assert.are.equal("from_snapshot", field_of(http_client.create(server, acme, '{"from_snapshot": "nope"}')))
    assert.are.equal("template", field_of(http_client.create(server, acme, '{"from_snapshot": "' .. snap .. '", "template": "python:3.11-slim"}')))
    assert.are.equal("disk_mb", field_of(http_client.create(server, acme, '{"from_snapshot": "' .. snap .. '", "disk_mb": 128}')))
    assert.are.equal(404, http(server, "GET", "/v1/snapshots/..%2Fx", { key = acme }).status)

    -- a paused session is resumed first, as for any call, and the answer says so
    local paused = http(server, "POST", "/v1/sessions/" .. id .. "/pause", { key = acme })
    assert.are.equal(200, paused.status, paused.body)
    local after_pause = snapshot(server, acme, id)
    assert.are.equal(201, after_pause.status, after_pause.body)
    assert.are.equal("1", after_pause.headers["x-airlock-resumed"])
    -- max_snapshots (3): the fourth is refused with the limit's name and value
    assert.are.equal(201, snapshot(server, acme, id).status)
    local over = snapshot(server, acme, id)
    assert.are.equal(429, over.status, over.body)
    assert.truthy(over.json.detail:find("max_snapshots", 1, true) and over.json.detail:find("3 of 3", 1, true), over.body)
    -- the other tenant has its own count; its max_snapshot_mb (100) stops a second 60 MB one
    local oid = http_client.create(server, other).json.session_id
    assert.are.equal(0, http_client.exec(server, other, oid, "head -c 60000000 /dev/urandom > big").json.exit_code)
    assert.are.equal(201, snapshot(server, other, oid).status)
    local big = snapshot(server, other, oid)
    assert.are.equal(429, big.status, big.body)
    assert.truthy(big.json.detail:find("max_snapshot_mb (100)", 1, true), big.body)
    assert.are.equal(1, #http(server, "GET", "/v1/snapshots", { key = other }).json.snapshots)
    assert.are.equal(3, #http(server, "GET", "/v1/snapshots", { key = acme }).json.snapshots)
    -- a deleted snapshot gives its bytes back
    local used = disk_used()
    assert.are.equal(200, http(server, "DELETE", "/v1/snapshots/" .. snap, { key = acme }).status)
    assert.are.equal(used - first.bytes, disk_used())
  end)

  it("survive a restart and a kill -9; half-written ones are removed at start", function()
    server = airlockd.start({ env = ENV })
    local acme = server.tenants.acme
    local id = http_client.create(server, acme).json.session_id
    assert.are.equal(0, http_client.exec(server, acme, id, "echo kept > f.txt").json.exit_code)
    local a = snapshot(server, acme, id, '{"name": "a"}').json
    local dir = snap_dir(server)
    -- what a crash leaves: this server's temporary and half-deleted directories, and a snapshot
    -- directory without its record; another server's temporary directory (a fleet sharing the
    -- store) and a file that is not a snapshot's are left alone
    for _, d in ipairs({ ".tmp-local-snap_00000000000000aa", ".del-local-snap_00000000000000bb", "snap_00000000000000cc",
        ".tmp-node2-snap_00000000000000dd" }) do
      assert.is_true(proc.run("mkdir " .. q(dir .. "/" .. d) .. " && head -c 4096 /dev/zero > " .. q(dir .. "/" .. d .. "/workspace.img")))
    end
    assert.is_true(proc.run("echo x > " .. q(dir .. "/README")))
    -- a record cut short, and a whole record whose image is missing: not whole, removed
    local rec = proc.read_file(dir .. "/" .. a.snapshot_id .. "/snapshot.json")
    assert.truthy(rec and rec:find('"parts"', 1, true), rec)
    for name, files in pairs({ snap_00000000000000ee = { ["snapshot.json"] = rec:sub(1, math.floor(#rec / 2)) },
        snap_00000000000000ff = { ["snapshot.json"] = (rec:gsub(a.snapshot_id, "snap_00000000000000ff")) } }) do
      assert.is_true(proc.run("mkdir " .. q(dir .. "/" .. name)))
      for file, text in pairs(files) do
        local fh = assert(io.open(dir .. "/" .. name .. "/" .. file, "wb"))
        fh:write(text)
        fh:close()
      end
    end

    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = ENV, wait = 60 })
    assert.are.same({ ".tmp-node2-snap_00000000000000dd", "README", a.snapshot_id }, entries(dir))
    assert.are.same({ a }, http(server, "GET", "/v1/snapshots", { key = acme }).json.snapshots)
    local b = snapshot(server, acme, id, '{"name": "b"}').json

    os.execute("kill -TERM " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = ENV, wait = 60 })
    assert.are.same({ b, a }, http(server, "GET", "/v1/snapshots", { key = acme }).json.snapshots)
    local c = http_client.create(server, acme, '{"from_snapshot": "' .. a.snapshot_id .. '"}')
    assert.are.equal(201, c.status, c.body)
    assert.are.equal("kept\n", http_client.exec(server, acme, c.json.session_id, "cat f.txt").json.stdout)
  end)
end)
