-- luacheck: max line length 160
-- Egress isolation and cleanup (issue 12, deliverable 6): nothing of a sandbox's network is
-- ever in the host's namespace (`ip netns list`, `ip link` unchanged while egress sandboxes
-- run), and no namespace descriptor, proxy listener, tunnel socket or log handle is left in
-- airlockd (/proc/<pid>/fd) after a session is deleted, expires, or after airlockd is killed
-- with SIGKILL and started again on the same state directory. Lua 5.1-compatible.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local egress = require "support.egress"
local http_client = require "support.http_client"
local proc = require "support.proc"

local TTL = 4
-- SANDBOX_EXEC_MODE=session (the default; command when the environment says so): a session with egress runs
-- its commands in its own sandbox (issue #19), which holds its network until the session ends
local SESSION_MODE = os.getenv("SANDBOX_EXEC_MODE") ~= "command"

describe("egress cleanup", function()
  local ctx, server, key, host_before, log_dir

  local function log_handles(id)
    return tonumber(proc.output("ls -l /proc/" .. server.pid .. "/fd 2>/dev/null | grep -c " .. proc.shell_quote(id .. ".jsonl")))
  end

  -- waits until airlockd's descriptors are back to `base` and returns them
  local function settle(base)
    local now
    proc.wait_until(15, function()
      now = egress.descriptors(server)
      return now.socket == base.socket and now.net == base.net and now.total == base.total
    end)
    return now
  end

  -- starts a command holding n tunnels for `hold` seconds; returns the job once they are open
  local function hold_tunnels(sid, n, hold)
    return egress.probe_async(server, key, sid, { { op = "many", target = "sink.test:443", n = n, hold = hold, marker = "opened" } },
      "opened", 30)
  end

  lazy_setup(function()
    host_before = egress.host_network()
    log_dir = proc.make_temp_dir()
    ctx = egress.start({ env = { SANDBOX_SESSION_TTL = tostring(TTL), SANDBOX_EGRESS_LOG_DIR = log_dir } })
    server, key = ctx.server, ctx.key
  end)

  lazy_teardown(function()
    if ctx then egress.stop(ctx) end
    proc.remove_tree(log_dir)
  end)

  it("keeps the host's namespaces and links untouched while egress sandboxes run, and frees everything on DELETE", function()
    local base = egress.quiet_descriptors(server)
    assert.are.equal(1, base.net) -- airlockd's own namespace, where its helper threads return
    local sid = egress.session(server, key, { "sink.test" })
    local job = hold_tunnels(sid, 3, 2) -- well within the TTL: the session outlives the command
    local during = egress.descriptors(server)
    assert.are.equal(2, during.net)                          -- and the sandbox's
    assert.truthy(during.socket >= base.socket + 1 + 3 * 2, cjson.encode(during)) -- listener, 3 tunnels of 2 sockets
    assert.are.same(host_before, egress.host_network())
    assert.are.equal(0, cjson.decode(assert(job.wait(60)).stdout:match("[^\n]+")).statuses["429"] or 0)
    if SESSION_MODE then
      -- the session's own sandbox keeps its network (namespace, listener, log) until the
      -- session ends; its tunnels are gone with the command
      assert.is_true(proc.wait_until(15, function()
        local d = egress.descriptors(server)
        return d.net == 2 and d.socket == base.socket + 1
      end), cjson.encode(egress.descriptors(server)))
    else
      -- the run is over: its namespace, listener and tunnels are gone; the session keeps its log file
      local after = settle({ socket = base.socket, net = 1, total = base.total + 1 })
      assert.are.same({ socket = base.socket, net = 1, total = base.total + 1 }, after)
    end
    assert.are.equal(1, log_handles(sid))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    assert.are.same(base, settle(base))
    assert.are.equal(0, log_handles(sid))
    assert.are.same(host_before, egress.host_network())
  end)

  it("frees another session's disk at once while an egress sandbox runs (its mounts follow the host's)", function()
    -- the sandbox's launcher gets its own mount namespace (an empty /proc/sys/net): its copy of
    -- every workspace mounted then must follow the host's unmounts, or it pins their loop devices
    local other = http_client.create(server, key).json.session_id
    assert.are.equal(200, http_client.write(server, key, other, "f.txt", "x").status)
    local img = server.dir .. "/state/images/" .. other .. ".img"
    local function attached()
      return proc.output("cat /sys/block/loop*/loop/backing_file 2>/dev/null"):find(img, 1, true) ~= nil
    end
    assert.is_true(attached())
    local sid = egress.session(server, key, { "sink.test" })
    -- a first command takes any sandbox booted ahead before other's disk was mounted; the
    -- second's sandbox is booted after it (cold, or ahead since)
    egress.exec(server, key, sid, "true")
    local job = hold_tunnels(sid, 1, 8)
    assert.are.equal(200, http_client.delete(server, key, other).status)
    assert.is_true(proc.wait_until(5, function() return not attached() end), "the deleted session's loop device is held")
    assert.is_table(job.wait(60))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("ends a running sandbox's tunnels and listener at once when its session is deleted", function()
    local base = egress.quiet_descriptors(server)
    local sid = egress.session(server, key, { "sink.test" })
    local job = hold_tunnels(sid, 5, 20)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    -- the sandbox still runs (its namespace is held until it ends), but the proxy side is gone
    assert.is_true(proc.wait_until(5, function()
      local d = egress.descriptors(server)
      return d.socket == base.socket + 1 and d.net == 2 -- + the running exec request's connection
    end), cjson.encode(egress.descriptors(server)))
    assert.are.equal(0, log_handles(sid))
    assert.truthy(job.wait(60))
    assert.are.same(base, settle(base))
    local events = {}
    for line in (proc.read_file(log_dir .. "/" .. sid .. ".jsonl") or ""):gmatch("[^\n]+") do events[#events + 1] = cjson.decode(line) end
    assert.are.equal(5, #events) -- each tunnel logged as it was closed
    for _, e in ipairs(events) do assert.are.equal("allow", e.decision) end
  end)

  it("frees everything when a session expires", function()
    local base = egress.quiet_descriptors(server)
    local sid = egress.session(server, key, { "sink.test" })
    egress.probe(server, key, sid, { { op = "connect", target = "sink.test:443" } })
    assert.are.equal(1, log_handles(sid))
    -- reaped after TTL idle seconds (the sweep runs every second at this TTL); listing does
    -- not count as activity
    assert.is_true(proc.wait_until(TTL + 10, function()
      return not http_client.request(server, "GET", "/v1/sessions", { key = key }).body:find(sid, 1, true)
    end))
    assert.are.same(base, settle(base))
    assert.are.equal(0, log_handles(sid))
  end)

  it("leaves nothing behind after SIGKILL, and a restart on the same state dir starts clean and works", function()
    local sid = egress.session(server, key, { "sink.test" })
    hold_tunnels(sid, 3, 30)
    local runsc_root = server.dir .. "/state/runsc"
    local function sandboxes()
      local n = 0
      for line in proc.output("ps -eo args="):gmatch("[^\n]+") do
        if line:find("runsc", 1, true) and line:find(runsc_root, 1, true) then n = n + 1 end
      end
      return n
    end
    assert.truthy(sandboxes() > 0)
    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(10, function() return not airlockd.alive(server) end))
    -- the sandbox dies with its launcher, and with it the last reference to its namespace
    assert.is_true(proc.wait_until(20, function() return sandboxes() == 0 end), "sandbox processes left")
    assert.are.same(host_before, egress.host_network())

    local env = require("support.egress_upstream").env(ctx.up)
    env.SANDBOX_SESSION_TTL = tostring(TTL)
    env.SANDBOX_EGRESS_LOG_DIR = log_dir
    local dir = server.dir
    server = airlockd.start({ env = env, dir = dir, tenants = server.tenants })
    ctx.server = server
    local base = egress.quiet_descriptors(server)
    assert.are.equal(1, base.net)
    local fresh = egress.session(server, key, { "pypi" })
    local r = egress.exec(server, key, fresh, "pip install --retries 1 airlock-egress-probe >/dev/null && python3 -c 'import airlock_egress_probe'")
    assert.are.equal(0, r.exit_code, r.output)
    assert.are.equal(200, http_client.delete(server, key, fresh).status)
    assert.are.same(base, settle(base))
    assert.are.same(host_before, egress.host_network())
  end)
end)
