-- luacheck: max line length 160
-- Pause and resume (issue #26 item 2, files only): POST /v1/sessions/{id}/pause stops the
-- session's sandbox and unmounts its disk (image kept), leaving nothing of it on the host (no
-- runsc process, no cgroup, no mount, no loop device); any call on a paused session resumes it
-- and says so (X-Airlock-Resumed: 1, "resumed": true); egress works again after a resume;
-- {"on_idle": "pause"} pauses instead of deleting and SANDBOX_PAUSED_TTL deletes a paused
-- session; a paused session survives SIGTERM and kill -9 and stays paused; DELETE of a paused
-- session leaves nothing. A session with kernels and egress is paused with its memory: nothing of
-- its network is left while paused, and after the resume (and after airlockd is killed and
-- started again) its kernel and its commands reach the allowed upstream and are denied another,
-- logged. A memory snapshot of such a session cuts the connections open in it and leaves its
-- egress working; each fork of it has the kernel's x, the snapshot's rules and a namespace and
-- proxy of its own (its commands and its kernel, whose HTTPS_PROXY login is the origin's, reach
-- the allowed host, are denied another, logged as the fork's), also paused and resumed, and after
-- a kill -9. Real airlockd, real runsc, loopback egress stand-ins. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local egress = require "support.egress"
require "support.eventually"
local host_state = require "support.host_state"
local http_client = require "support.http_client"
local proc = require "support.proc"

local http = http_client.request

local function post(server, key, sid, what)
  return http(server, "POST", "/v1/sessions/" .. sid .. "/" .. what, { key = key })
end

local function info(server, key, sid)
  local r = http(server, "GET", "/v1/sessions/" .. sid, { key = key })
  assert.are.equal(200, r.status, r.body)
  return r.json
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- What of session sid is on the host: processes naming it (its runsc sandbox), cgroups naming
-- it, its mount and the loop devices backed by its image.
local function host_of(server, sid)
  local found = {}
  for _, pid in ipairs(host_state.pids_naming(sid)) do found[#found + 1] = "process " .. pid end
  for _, g in ipairs(host_state.cgroups_under(host_state.cgroup_root(server.dir .. "/state"))) do
    if g:find(sid, 1, true) then found[#found + 1] = "cgroup " .. g end
  end
  local objects = airlockd.host_objects(server.dir)
  for _, m in ipairs(objects.mounts) do
    if m:find(sid, 1, true) then found[#found + 1] = "mount " .. m end
  end
  for _, dev in ipairs(objects.loops) do
    local back = proc.read_file("/sys/block/" .. dev:match("loop%d+") .. "/loop/backing_file") or ""
    if back:find(sid, 1, true) then found[#found + 1] = "loop " .. dev end
  end
  return found
end

local function own_sandbox_runs(server, sid)
  return #host_state.sandbox_ids(server, sid .. "-s-") == 1
end

describe("pause and resume", function()
  local ctx, server, key

  lazy_setup(function()
    ctx = egress.start({ env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WARM_NEW = "0" } })
    server, key = ctx.server, ctx.key
  end)

  lazy_teardown(function()
    if ctx then egress.stop(ctx) end
  end)

  it("pauses to nothing on the host, keeps the files, and resumes on the next call, saying so", function()
    local sid = http_client.create(server, key).json.session_id
    assert.are.equal(200, http_client.write(server, key, sid, "kept.txt", "written before the pause").status)
    assert.are.equal("one\n", http_client.exec(server, key, sid, "echo one | tee made.txt").json.stdout)
    assert.eventually(function() return own_sandbox_runs(server, sid) end, { timeout = 60, what = "its sandbox" })
    assert.are.equal("active", info(server, key, sid).state)
    -- what the check below must find gone: its sandbox's processes and cgroups, its mount and loop
    local kinds = {}
    for _, what in ipairs(host_of(server, sid)) do kinds[what:match("^%a+")] = true end
    assert.are.same({ process = true, cgroup = true, mount = true, loop = true }, kinds)

    local p = post(server, key, sid, "pause")
    assert.are.equal(200, p.status, p.body)
    assert.are.equal("paused", p.json.state)
    assert.are.equal(0, p.json.image_bytes)
    assert.is_number(p.json.pause_ms)
    local seen = info(server, key, sid)
    assert.are.equal("paused", seen.state)
    assert.is_number(seen.paused_at)
    local listed = http(server, "GET", "/v1/sessions", { key = key }).json.sessions
    local state
    for _, s in ipairs(listed) do
      if s.session_id == sid then state = s.state end
    end
    assert.are.equal("paused", state)
    assert.eventually(function() local left = host_of(server, sid); return #left == 0, left end,
      { what = "nothing of the paused session on the host" })
    assert.is_true(exists(server.dir .. "/state/images/" .. sid .. ".img"), "its image is kept")
    local m = http(server, "GET", "/v1/sessions/" .. sid .. "/metrics", { key = key })
    assert.are.same({ 200, "paused" }, { m.status, m.json.state }) -- the figures resume nothing
    assert.is_nil(m.headers["x-airlock-resumed"])

    -- pausing a paused session answers the same state (idempotent)
    local again = post(server, key, sid, "pause")
    assert.are.equal(200, again.status, again.body)
    assert.are.equal("paused", again.json.state)

    -- any call resumes it first and says so
    local r = http_client.exec(server, key, sid, "cat kept.txt made.txt")
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("written before the pause" .. "one\n", r.json.stdout)
    assert.is_true(r.json.resumed)
    assert.are.equal("1", r.headers["x-airlock-resumed"])
    assert.are.equal("active", info(server, key, sid).state)
    local after = http_client.exec(server, key, sid, "true")
    assert.is_nil(after.json.resumed)
    assert.is_nil(after.headers["x-airlock-resumed"])

    -- a file read on a paused session resumes it too; POST /resume says whether it did
    assert.are.equal(200, post(server, key, sid, "pause").status)
    local read = http_client.read(server, key, sid, "kept.txt")
    assert.are.equal(200, read.status, read.body)
    assert.are.equal("written before the pause", read.json.content)
    assert.are.equal("1", read.headers["x-airlock-resumed"])
    -- and a streamed exec: the header on its chunked answer
    assert.are.equal(200, post(server, key, sid, "pause").status)
    local streamed = http(server, "POST", "/v1/sessions/" .. sid .. "/exec",
      { key = key, body = '{"command": "cat kept.txt", "stream": true}' })
    assert.are.equal(200, streamed.status, streamed.body)
    assert.are.equal("1", streamed.headers["x-airlock-resumed"])
    assert.truthy(streamed.body:find("written before the pause", 1, true), streamed.body)
    local resume = post(server, key, sid, "resume")
    assert.are.equal(200, resume.status, resume.body)
    assert.are.same({ "active", false }, { resume.json.state, resume.json.resumed })
    assert.are.equal(200, post(server, key, sid, "pause").status)
    resume = post(server, key, sid, "resume")
    assert.are.same({ "active", true }, { resume.json.state, resume.json.resumed })
    assert.is_number(resume.json.resume_ms)
    assert.eventually(function() return own_sandbox_runs(server, sid) end, { timeout = 60, what = "its sandbox again" })
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("refuses to pause while a command runs (409 saying why), and answers bad input clearly", function()
    local sid = http_client.create(server, key).json.session_id
    -- the command runs until the spec lets it end (a sleep could end first on a loaded machine)
    local job = http_client.exec_async(server, key, sid, "touch started; " .. http_client.until_go() .. "echo done", 60)
    assert.eventually(function() return http_client.exists(server, key, sid, "started") end,
      { timeout = 30, what = "the command started" })
    local busy = post(server, key, sid, "pause")
    assert.are.equal(409, busy.status, busy.body)
    assert.truthy(busy.json.detail:find("a command is running", 1, true), busy.body)
    assert.are.equal(200, http_client.write(server, key, sid, "go", "").status)
    assert.are.equal("done\n", assert(job.wait(90)).stdout)
    assert.are.equal(200, post(server, key, sid, "pause").status)

    assert.are.equal(404, post(server, key, "sbx_000000000000", "pause").status)
    assert.are.equal(403, post(server, ctx.other, sid, "resume").status)
    assert.are.equal("paused", info(server, key, sid).state) -- another tenant's call resumed nothing
    local bad = http_client.create(server, key, '{"on_idle": "sleep"}')
    assert.are.equal(422, bad.status, bad.body)
    assert.are.same({ "body", "on_idle" }, bad.json.detail[1].loc)
    local good = http_client.create(server, key, '{"on_idle": "pause"}')
    assert.are.equal(201, good.status, good.body)
    assert.are.equal("pause", good.json.on_idle)
    assert.are.equal(200, http_client.delete(server, key, good.json.session_id).status)

    -- DELETE of a paused session removes it, image and all, without resuming it
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    assert.is_false(exists(server.dir .. "/state/images/" .. sid .. ".img"))
    assert.are.same({}, host_of(server, sid))
    assert.are.equal(404, http(server, "GET", "/v1/sessions/" .. sid, { key = key }).status)
  end)

  it("resumes a session with egress with its network: the proxy lets it out again", function()
    local sid = egress.session(server, key, { "sink.test" })
    local before = egress.probe(server, key, sid, { { op = "connect", target = "sink.test:443" } })
    assert.are.equal(200, before[1].status)
    assert.are.equal(200, post(server, key, sid, "pause").status)
    assert.eventually(function() local left = host_of(server, sid); return #left == 0, left end,
      { what = "nothing of the paused session on the host" })
    -- its sandbox booted again on a new namespace and listener: allowed out, denied elsewhere, logged
    local logged = #egress.events(server, key, sid, 1000)
    local after = egress.probe(server, key, sid, { { op = "connect", target = "sink.test:443" }, { op = "connect", target = "pypi.org:443" } })
    assert.are.same({ 200, 403 }, { after[1].status, after[2].status })
    assert.eventually(function()
      local seen = {}
      for _, e in ipairs(egress.new_events(server, key, sid, logged)) do seen[#seen + 1] = e.decision .. " " .. e.host end
      table.sort(seen)
      return #seen == 2 and seen[1] == "allow sink.test" and seen[2] == "deny pypi.org", seen
    end, { timeout = 20, what = "the resumed session's connections logged" })
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  -- the kernels' and egress tests' helpers
  local function call(method, path, body)
    return http(server, method, path, { key = key, body = body and cjson.encode(body), max_time = 90 })
  end
  local function cell(sid, kid, code)
    local r = call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute", { code = code, timeout = 30 })
    assert.are.equal(200, r.status, r.body)
    assert.are.equal(cjson.null, r.json.error, r.body)
    return r.json.results[1] and r.json.results[1]["text/plain"], r.json
  end
  -- a CONNECT through the session's proxy from the kernel (its pass from HTTPS_PROXY): the socket and the status
  local TUNNEL = table.concat({
    "import base64, os, socket, urllib.parse",
    "def tunnel(target):",
    "    u = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])",
    "    cred = base64.b64encode((urllib.parse.unquote(u.username) + ':' + urllib.parse.unquote(u.password)).encode()).decode()",
    "    s = socket.create_connection((u.hostname, u.port), timeout=15)",
    "    s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\nProxy-Authorization: Basic %s\\r\\n\\r\\n' % (target, target, cred)).encode())",
    "    head = b''",
    "    while b'\\r\\n\\r\\n' not in head:",
    "        c = s.recv(4096)",
    "        if not c:",
    "            break",
    "        head += c",
    "    return s, int(head.split(b' ')[1]) if head else None",
    "def status(target):",
    "    s, st = tunnel(target)",
    "    s.close()",
    "    return st",
  }, "\n")
  local function decisions(sid, since)
    local out = {}
    for _, e in ipairs(egress.new_events(server, key, sid, since)) do out[#out + 1] = e.decision .. " " .. e.host end
    table.sort(out)
    return out
  end
  -- egress works from a command and from the kernel; a host the session does not allow is denied; both logged
  -- what became of the tunnel the kernel holds as `held`: 'cut', 'open' or 'data'
  local HELD = table.concat({
    "try:",
    "    held.settimeout(10)",
    "    held.sendall(b'x')",
    "    res = 'cut' if held.recv(1) == b'' else 'data'",
    "except socket.timeout:",
    "    res = 'open'",
    "except OSError:",
    "    res = 'cut'",
    "res",
  }, "\n")
  local function egress_works(sid, kid)
    local before -- (once the log is quiet: a tunnel the pause cut is logged as it closes)
    assert.eventually(function()
      local n = #egress.events(server, key, sid, 1000)
      proc.sleep(1)
      before = #egress.events(server, key, sid, 1000)
      return n == before
    end, { timeout = 20, what = "the session's log quiet" })
    assert.are.equal("200", (cell(sid, kid, "status('sink.test:443')")))
    assert.are.equal("403", (cell(sid, kid, "status('pypi.org:443')")))
    local probe = egress.probe(server, key, sid, { { op = "connect", target = "sink.test:443" }, { op = "connect", target = "pypi.org:443" } })
    assert.are.same({ 200, 403 }, { probe[1].status, probe[2].status })
    assert.eventually(function()
      local seen = decisions(sid, before)
      return #seen == 4, seen
    end, { timeout = 20, what = "the four connections logged" })
    assert.are.same({ "allow sink.test", "allow sink.test", "deny pypi.org", "deny pypi.org" }, decisions(sid, before))
  end


  it("takes a memory snapshot of a session with kernels and egress; its forks have x and egress of their own", function()
    local sid = egress.session(server, key, { "sink.test" })
    local r = call("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" })
    assert.are.equal(201, r.status, r.body)
    local kid = r.json.kernel_id
    cell(sid, kid, TUNNEL .. "\nx = 41")
    local nets = egress.quiet_descriptors(server).net
    -- a tunnel open while it is taken
    assert.are.equal("200", (cell(sid, kid, "held, st = tunnel('sink.test:443')\nst")))
    local snap = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true })
    assert.are.equal(201, snap.status, snap.body)
    assert.is_true(snap.json.memory, snap.body)
    local rules_file = server.dir .. "/state/snapshots/" .. snap.json.snapshot_id .. "/memory/egress.json"
    local rules = cjson.decode(proc.read_file(rules_file) or proc.output("ls -la " .. server.dir .. "/state/snapshots/*/*"))
    assert.are.same({ "sink.test" }, rules)

    -- another egress than the snapshot's is refused; the same is the snapshot's
    local other = call("POST", "/v1/sessions", { from_snapshot = snap.json.snapshot_id, egress = { "pypi" } })
    assert.are.equal(422, other.status, other.body)
    assert.are.same({ "body", "egress" }, other.json.detail[1].loc)
    assert.truthy(other.json.detail[1].msg:find("sink.test", 1, true), other.body)
    local function fork(body)
      local f = call("POST", "/v1/sessions", body)
      assert.are.equal(201, f.status, f.body .. airlockd.log(server):sub(-2000))
      assert.are.same({ "sink.test" }, f.json.egress)
      return f.json.session_id
    end
    local one = fork({ from_snapshot = snap.json.snapshot_id })
    local two = fork({ from_snapshot = snap.json.snapshot_id, egress = { "sink.test" } })
    -- each its own namespace (one more each in airlockd), the kernel's x in each
    assert.eventually(function()
      local d = egress.descriptors(server)
      return d.net == nets + 2, d
    end, { timeout = 20, what = "a namespace of each fork's own" })
    assert.are.equal("42", (cell(one, kid, "x + 1")))
    assert.are.equal("42", (cell(two, kid, "x + 1")))
    assert.are.equal(cjson.null, (select(2, cell(one, kid, "x = 7"))).error)
    assert.are.equal("42", (cell(two, kid, "x + 1")))
    -- out through each fork's own proxy, from its commands and its kernel (logged as the fork's); denied elsewhere
    egress_works(one, kid)
    egress_works(two, kid)
    -- the session it was taken of is untouched: its x, its egress
    assert.are.equal("42", (cell(sid, kid, "x + 1")))
    -- (the tunnel it held when taken was cut: runsc saves no connected endpoint, --net-disconnect-ok cuts them)
    assert.are.equal("'cut'", (cell(sid, kid, HELD)))
    egress_works(sid, kid)
    -- a fork deleted, the other and the origin go on
    assert.are.equal(200, http_client.delete(server, key, one).status)
    assert.eventually(function() return #host_of(server, one) == 0, host_of(server, one) end,
      { timeout = 20, what = "nothing of the deleted fork left" })
    egress_works(two, kid)
    egress_works(sid, kid)
    -- a fork is paused with its memory and resumed as any session: its kernel's login still lets it out
    assert.are.equal(200, post(server, key, two, "pause").status)
    assert.are.equal("42", (cell(two, kid, "x + 1")))
    egress_works(two, kid)
    -- the Lua SDK's airlock.sandbox{ from_snapshot } asks no rules of its own: the snapshot's are its
    local sdk = require("airlock").sandbox({ api_key = key, base_url = server.url, from_snapshot = snap.json.snapshot_id })
    sdk:start()
    assert.are.same({ "sink.test" }, info(server, key, sdk.session_id).egress)
    assert.are.equal("42", (cell(sdk.session_id, kid, "x + 1")))
    sdk:close()
    for _, id in ipairs({ two, sid }) do assert.are.equal(200, http_client.delete(server, key, id).status) end
    assert.are.equal(200, call("DELETE", "/v1/snapshots/" .. snap.json.snapshot_id).status)
    assert.eventually(function()
      local d = egress.descriptors(server)
      return d.net == nets - 1, d
    end, { timeout = 20, what = "no namespace of the deleted sessions left" })
  end)

  -- (last here: it restarts the server)
  it("pauses a session with kernels and egress with its memory; resumed (also by a new airlockd) its egress works", function()
    local host_before = egress.host_network()
    local base = egress.quiet_descriptors(server)
    local namespaces_before = egress.namespaces(server)
    local sid = egress.session(server, key, { "sink.test" })
    local r = call("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" })
    assert.are.equal(201, r.status, r.body)
    local kid = r.json.kernel_id
    cell(sid, kid, TUNNEL .. "\nx = 41")
    egress_works(sid, kid)
    -- the session's own namespace (made since: what of the earlier tests' still closing went away, not in)
    local own = {}
    for ns in pairs(egress.namespaces(server)) do
      if not namespaces_before[ns] then own[#own + 1] = ns end
    end
    assert.are.equal(1, #own, "the session's namespaces: " .. table.concat(own, " "))
    -- a tunnel open at the pause, and one just closed (its socket waits in TIME_WAIT): the pause cuts them
    assert.are.equal("200", (cell(sid, kid, "held, st = tunnel('sink.test:443')\nstatus('sink.test:443') and st")))
    local p = post(server, key, sid, "pause")
    assert.are.equal(200, p.status, p.body)
    assert.is_true(p.json.image_bytes > 0, p.body)
    -- nothing of it left: no sandbox, cgroup or mount, no namespace or listener in airlockd, nothing in the host's network
    assert.eventually(function() local left = host_of(server, sid); return #left == 0, left end,
      { timeout = 20, what = "nothing of the paused session on the host" })
    -- its namespace closed, and no more sockets than before it (fewer when an earlier test's closed since)
    assert.eventually(function()
      local d = egress.descriptors(server)
      local open = egress.namespaces(server)[own[1]]
      if not open and d.socket <= base.socket then return true end
      -- what stays, and the session's last lines in the server's log (one a line: CI keeps 8)
      local lines = {}
      for line in airlockd.log(server):gmatch("[^\n]+") do
        if line:find(sid, 1, true) then lines[#lines + 1] = airlockd.messages(line):sub(1, 280) end
      end
      return false, string.format("its namespace %s; net %d socket %d (before it: %d, %d)\n%s", open and "open" or "closed",
        d.net, d.socket, base.net, base.socket, table.concat(lines, "\n", math.max(1, #lines - 5)))
    end, { timeout = 60, step = 0.2, what = "no namespace or socket of the paused session in airlockd" }) -- (ASan, loaded: > 20 s)
    assert.are.same(host_before, egress.host_network())

    -- resumed by its next cell: its memory is there, the tunnel it held was cut, new ones go out
    assert.are.equal("42", (cell(sid, kid, "x + 1")))
    assert.are.equal("'cut'", (cell(sid, kid, HELD)))
    egress_works(sid, kid)
    assert.is_false(exists(server.dir .. "/state/images/" .. sid .. ".ckpt"), "the image outlived its restore")

    -- a fork of it, paused: after the restart below its kernel's login (the session's) is taken again
    local snap = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true })
    assert.are.equal(201, snap.status, snap.body)
    local fork = call("POST", "/v1/sessions", { from_snapshot = snap.json.snapshot_id })
    assert.are.equal(201, fork.status, fork.body)
    fork = fork.json.session_id
    assert.are.equal(200, post(server, key, fork, "pause").status)
    assert.are.equal(200, call("DELETE", "/v1/snapshots/" .. snap.json.snapshot_id).status)
    -- paused again, airlockd killed (-9) and started again: the new process makes its network and proxy again
    assert.are.equal(200, post(server, key, sid, "pause").status)
    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    local env = require("support.egress_upstream").env(ctx.up)
    env.SANDBOX_EXEC_MODE, env.SANDBOX_WARM_NEW = "session", "0"
    server = airlockd.start({ env = env, dir = server.dir, tenants = server.tenants, wait = 60 })
    ctx.server = server
    base = egress.quiet_descriptors(server)
    assert.are.equal(1, base.net)
    assert.are.equal("paused", info(server, key, sid).state)
    assert.are.equal("43", (cell(sid, kid, "x + 2")))
    egress_works(sid, kid)
    assert.are.equal("43", (cell(fork, kid, "x + 2")))
    egress_works(fork, kid)
    assert.are.equal(200, http_client.delete(server, key, fork).status)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    assert.eventually(function()
      local d = egress.descriptors(server)
      return d.net == base.net and d.socket == base.socket and #host_of(server, sid) == 0, { d, host_of(server, sid) }
    end, { timeout = 20, what = "nothing of the deleted session left" })
    assert.is_false(exists(server.dir .. "/state/images/" .. sid .. ".ckpt"))
    assert.are.same(host_before, egress.host_network())
  end)
end)

describe("paused sessions over time and restarts", function()
  local server

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  local function restart(env)
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = env, wait = 60 })
  end

  it("pauses on idle with on_idle pause, deletes after SANDBOX_PAUSED_TTL; keeps a paused session across SIGTERM and kill -9", function()
    local env = { SANDBOX_SESSION_TTL = "2", SANDBOX_PAUSED_TTL = "3", SANDBOX_WARM_NEW = "0" }
    server = airlockd.start({ env = env })
    local key = server.tenants.acme
    local plain = http_client.create(server, key).json.session_id
    local sid = http_client.create(server, key, '{"on_idle": "pause"}').json.session_id
    assert.eventually(function() return info(server, key, sid).state == "paused" end, { timeout = 20, what = "paused on idle" })
    assert.eventually(function() return http(server, "GET", "/v1/sessions/" .. plain, { key = key }).status == 404 end,
      { what = "the plain session deleted on idle" })
    -- a resume resets its idle clock (it was last used a TTL before its pause), and it pauses again
    local paused_at = info(server, key, sid).paused_at
    assert.are.equal(true, post(server, key, sid, "resume").json.resumed)
    -- (it may be paused again already on a slow machine: its last use is what tells)
    assert.is_true(info(server, key, sid).last_accessed_at >= paused_at, "idle clock not reset")
    assert.eventually(function() return info(server, key, sid).state == "paused" end, { timeout = 20, what = "paused again" })
    assert.eventually(function() return http(server, "GET", "/v1/sessions/" .. sid, { key = key }).status == 404 end,
      { timeout = 20, what = "deleted after SANDBOX_PAUSED_TTL" })
    -- (the reaper unlists it, then removes its image: wait for the image too)
    assert.eventually(function() return not exists(server.dir .. "/state/images/" .. sid .. ".img") end,
      { what = "the expired paused session's image removed" })
    assert.are.same({}, host_of(server, sid))

    -- a paused session outlives SIGTERM and kill -9, stays paused, then resumes with its files
    local long = { SANDBOX_SESSION_TTL = "600", SANDBOX_WARM_NEW = "0" }
    os.execute("kill -TERM " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    restart(long)
    key = server.tenants.acme
    local kept = http_client.create(server, key).json.session_id
    assert.are.equal(200, http_client.write(server, key, kept, "notes.txt", "before the restarts").status)
    assert.are.equal(200, post(server, key, kept, "pause").status)
    -- a paused session whose image is gone when the server starts is dropped, as an active one is
    local orphan = http_client.create(server, key).json.session_id
    assert.are.equal(200, post(server, key, orphan, "pause").status)
    os.execute("kill -TERM " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    assert.is_true(os.remove(server.dir .. "/state/images/" .. orphan .. ".img"))
    restart(long)
    assert.are.equal(404, http(server, "GET", "/v1/sessions/" .. orphan, { key = key }).status)
    assert.truthy(airlockd.log(server):find("paused session " .. orphan .. " not restored: its image is missing", 1, true))
    assert.are.equal("paused", info(server, key, kept).state)
    assert.are.same({}, host_of(server, kept))
    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    restart(long)
    assert.are.equal("paused", info(server, key, kept).state)
    assert.are.same({}, host_of(server, kept))
    local r = http_client.exec(server, key, kept, "cat notes.txt")
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("before the restarts", r.json.stdout)
    assert.are.equal("1", r.headers["x-airlock-resumed"])
    assert.are.equal(200, http_client.delete(server, key, kept).status)
    assert.are.same({}, host_of(server, kept))
  end)
end)
