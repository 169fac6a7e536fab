-- luacheck: max line length 160
-- Memory snapshots and forks (issue 26 item 3): POST /v1/sessions/{id}/snapshots {"memory": true}
-- of a running session with a kernel saves its sandbox's memory (`runsc checkpoint --leave-running`)
-- beside a copy of its workspace made while the sandbox is held still; the session answers on after
-- it. POST /v1/sessions {"from_snapshot"} of it makes a new session whose own sandbox is restored
-- from the image (a container, cgroup and workspace of its own), its kernel under its id with its
-- x (41 then, so x + 1 is 42); two such sessions are independent of each other and of the origin.
-- The snapshot survives an airlockd kill -9; a session with no kernel gets a files-only snapshot
-- (memory false); an image another runsc made is a 409; one that cannot be restored gives a 500
-- naming why and leaves no session and nothing on the host. Real airlockd with gVisor (SANDBOX_EXEC_MODE=session), loopback only.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local kernel_client = require "support.kernel_client"
local proc = require "support.proc"
require "support.eventually"

local q = proc.shell_quote

describe("memory snapshots and forks (kernels)", function()
  local server, key
  local ENV = { SANDBOX_EXEC_MODE = "session", SANDBOX_WORKSPACE_QUOTA_MB = "64",
    SANDBOX_TENANT_LIMITS = '{"other": {"max_snapshot_mb": 6}}' }

  local kc = kernel_client.new(function() return server, key end)
  local call, cell = kc.call, kc.cell

  local function value(sid, kid, code)
    local c = cell(sid, kid, code)
    return (c.results[1] or {})["text/plain"], cjson.encode(c)
  end

  local function sh(sid, command)
    local e = http_client.exec(server, key, sid, command)
    assert.are.equal(200, e.status, e.body)
    return e.json.stdout
  end

  local function fork(snap)
    local r = call("POST", "/v1/sessions", { from_snapshot = snap }, 120)
    assert.are.equal(201, r.status, r.body .. airlockd.log(server):sub(-2000))
    return r.json.session_id
  end

  -- what of sid runs or is mounted on the host
  local function leftovers(sid) return host_state.session_leftovers(server, sid) end

  local function nothing_left(sid)
    assert.eventually(function()
      local left = leftovers(sid)
      return #left.sandboxes == 0 and #left.cgroups == 0 and left.mounts == "0", left
    end, { timeout = 20, what = "nothing of " .. sid .. " left on the host" })
  end

  lazy_setup(function()
    key = "ak_" .. airlockd.random_hex(16)
    server = airlockd.start({ tenants = { acme = key, other = "ok_" .. airlockd.random_hex(16) }, env = ENV })
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("snapshots a running session with its kernel's memory; forks restore x, independent of each other and of it, after a kill -9 too", function()
    local sid = http_client.create(server, key).json.session_id
    local kid = call("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" }).json.kernel_id
    assert.truthy(kid)
    assert.are.equal(cjson.null, cell(sid, kid, "x = 41\nopen('/workspace/f', 'w').write('kept')").error)
    local r = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { name = "m", memory = true }, 120)
    assert.are.equal(201, r.status, r.body)
    local snap = r.json
    assert.is_true(snap.memory, r.body)
    assert.is_true(snap.memory_bytes > 1000000, r.body) -- a Python process's pages
    assert.is_true(snap.bytes > snap.memory_bytes, r.body) -- its workspace's too
    local dir = server.dir .. "/state/snapshots/" .. snap.snapshot_id
    assert.is_true(proc.run("test -s " .. q(dir .. "/memory/checkpoint.img") .. " && test -s " .. q(dir .. "/memory/sandbox.json")))
    -- the origin ran on through it, and changes after it
    assert.are.equal("42", value(sid, kid, "x + 1"))
    assert.are.equal(cjson.null, cell(sid, kid, "x = 100").error)
    assert.are.equal("", sh(sid, "echo later > later.txt"))

    local one = fork(snap.snapshot_id)
    assert.are_not.equal(sid, one)
    local kernels = call("GET", "/v1/sessions/" .. one .. "/kernels")
    assert.are.equal(200, kernels.status, kernels.body)
    assert.are.equal(kid, kernels.json.kernels[1].kernel_id, kernels.body)
    assert.are.equal("42", value(one, kid, "x + 1"))
    assert.are.equal("kept no-later\n", sh(one, "cat f; test -e later.txt && echo ' later' || echo ' no-later'"))

    -- the snapshot outlives a kill -9 of its server; the forks made after it are as the first
    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = ENV, wait = 60 })
    local got = call("GET", "/v1/snapshots/" .. snap.snapshot_id)
    assert.are.equal(200, got.status, got.body)
    assert.is_true(got.json.memory)
    assert.are.equal(snap.bytes, got.json.bytes)
    local two, three = fork(snap.snapshot_id), fork(snap.snapshot_id)
    assert.are.equal("42", value(two, kid, "x + 1"))
    assert.are.equal("42", value(three, kid, "x + 1"))
    -- independent: each its own x and its own files
    assert.are.equal(cjson.null, cell(two, kid, "x = 7\nopen('/workspace/mine', 'w').write('two')").error)
    assert.are.equal("42", value(three, kid, "x + 1"))
    assert.are.equal("8", value(two, kid, "x + 1"))
    assert.are.equal("absent\n", sh(three, "test -e mine && echo there || echo absent"))
    assert.are.equal("two", sh(two, "cat mine"))

    -- a fork's sandbox is its own: its deletion leaves nothing, the others answer on
    assert.are.equal(200, http_client.delete(server, key, two).status)
    nothing_left(two)
    assert.are.equal("42", value(three, kid, "x + 1"))
    -- a fork pauses and resumes with its memory as any session
    local p = call("POST", "/v1/sessions/" .. three .. "/pause", nil, 90)
    assert.are.equal(200, p.status, p.body)
    assert.is_true(p.json.image_bytes > 0, p.body)
    assert.are.equal("43", value(three, kid, "x + 2"))
    assert.are.equal(200, call("DELETE", "/v1/snapshots/" .. snap.snapshot_id).status)
    assert.is_false(proc.run("test -e " .. q(dir)))
    assert.are.equal(200, http_client.delete(server, key, three).status)
  end)

  it("gives a session without a kernel a files-only snapshot (memory false); refuses a size or egress other than a memory snapshot's", function()
    local sid = http_client.create(server, key).json.session_id
    assert.are.equal("", sh(sid, "echo plain > p"))
    local r = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true })
    assert.are.equal(201, r.status, r.body)
    assert.is_false(r.json.memory, r.body)
    assert.is_nil(r.json.memory_bytes)
    local f = fork(r.json.snapshot_id)
    assert.are.equal("plain\n", sh(f, "cat p"))
    assert.are.equal(0, #call("GET", "/v1/sessions/" .. f .. "/kernels").json.kernels)

    local kid = call("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" }).json.kernel_id
    assert.are.equal(cjson.null, cell(sid, kid, "x = 1").error)
    local m = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true }, 120)
    assert.are.equal(201, m.status, m.body)
    assert.is_true(m.json.memory)
    local bad = call("POST", "/v1/sessions", { from_snapshot = m.json.snapshot_id, memory_mb = 512 })
    assert.are.equal(422, bad.status, bad.body)
    assert.are.equal("memory_mb", bad.json.detail[1].loc[2])
    assert.are.equal(422, call("POST", "/v1/sessions", { from_snapshot = m.json.snapshot_id, egress = { "example.com" } }).status)
    -- a snapshot is busy while a cell runs (409), and taken once it ended
    local running = http_client.post_async(server, key, "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute",
      { code = "import time; time.sleep(3)", timeout = 20 }, 60)
    assert.eventually(function()
      local b = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true }, 120)
      return b.status == 409 and b.body:find("cell runs", 1, true) ~= nil, b.body
    end, { timeout = 10, what = "a memory snapshot refused while the cell runs" })
    running.wait()
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    assert.are.equal(200, http_client.delete(server, key, f).status)

    -- its memory image counts against max_snapshot_mb (6 for this tenant: its files alone fit)
    local okey = server.tenants.other
    local osid = http_client.create(server, okey).json.session_id
    local okid = http_client.request(server, "POST", "/v1/sessions/" .. osid .. "/kernels",
      { key = okey, body = '{"language": "python"}' }).json.kernel_id
    assert.truthy(okid)
    local over = http_client.request(server, "POST", "/v1/sessions/" .. osid .. "/snapshots", { key = okey, body = '{"memory": true}', max_time = 120 })
    assert.are.equal(429, over.status, over.body)
    assert.truthy(over.json.detail:find("max_snapshot_mb (6)", 1, true), over.body)
    local files = http_client.request(server, "POST", "/v1/sessions/" .. osid .. "/snapshots", { key = okey, body = '{}' })
    assert.are.equal(201, files.status, files.body)
    assert.are.equal(1, #http_client.request(server, "GET", "/v1/snapshots", { key = okey }).json.snapshots)
    assert.are.equal(200, http_client.delete(server, okey, osid).status)
  end)

  it("the Lua SDK: sbx:snapshot{ memory = true } and sbx:from_snapshot(id) give a session whose kernel has its x", function()
    local airlock = require "airlock"
    local sbx = airlock.sandbox({ api_key = key, base_url = server.url })
    finally(function() sbx:close() end)
    local k = sbx:kernel()
    assert.is_nil(k:run("x = 41").error)
    local id, rec = sbx:snapshot{ name = "sdk", memory = true }
    assert.is_true(rec.memory, cjson.encode(rec))
    assert.are.equal(id, rec.snapshot_id)
    local ok, err = pcall(sbx.snapshot, sbx, { memory = "yes" })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("memory", 1, true), tostring(err))
    local branch = sbx:from_snapshot(id)
    finally(function() branch:close() end)
    assert.are.equal(k.kernel_id, branch:kernels()[1].kernel_id)
    assert.are.equal("42", value(branch.session_id, k.kernel_id, "x + 1"))
    assert.are.equal("41", k:run("x").text)
  end)

  it("refuses a fork of another runsc's image (409); answers one that cannot be restored with a 500 naming why, leaving nothing", function()
    local sid = http_client.create(server, key).json.session_id
    local kid = call("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" }).json.kernel_id
    assert.are.equal(cjson.null, cell(sid, kid, "x = 41").error)
    local snap = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true }, 120).json
    -- an image another runsc made is refused before anything is made (409 naming both)
    local record = server.dir .. "/state/snapshots/" .. snap.snapshot_id .. "/snapshot.json"
    local text = assert(proc.read_file(record))
    local other, n = text:gsub('("runsc_version"%s*:%s*")[^"]*"', '%1runsc version 0.0-other"')
    assert.are.equal(1, n, text)
    local fh = assert(io.open(record, "w"))
    fh:write(other)
    fh:close()
    local refused = call("POST", "/v1/sessions", { from_snapshot = snap.snapshot_id })
    assert.are.equal(409, refused.status, refused.body)
    assert.truthy(refused.body:find("runsc version 0.0-other", 1, true) and refused.body:find("this server runs runsc version", 1, true), refused.body)
    fh = assert(io.open(record, "w"))
    fh:write(text)
    fh:close()
    local img = server.dir .. "/state/snapshots/" .. snap.snapshot_id .. "/memory/checkpoint.img"
    assert.is_true(proc.run("truncate -s 4096 " .. q(img)))
    local before = #call("GET", "/v1/sessions").json.sessions
    local r = call("POST", "/v1/sessions", { from_snapshot = snap.snapshot_id }, 120)
    assert.are.equal(500, r.status, r.body)
    assert.truthy(r.json.detail:find("could not be made from the memory snapshot", 1, true), r.body)
    assert.are.equal(before, #call("GET", "/v1/sessions").json.sessions)
    -- no sandbox, cgroup or mount of the fork (named in the log)
    local gone = airlockd.log(server):match("session (sbx_%x+): memory snapshot " .. snap.snapshot_id .. " could not be restored")
    assert.truthy(gone, airlockd.log(server):sub(-2000))
    nothing_left(gone)
    assert.are.equal(404, call("GET", "/v1/sessions/" .. gone).status)
    assert.are.equal("42", value(sid, kid, "x + 1"))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)
end)
