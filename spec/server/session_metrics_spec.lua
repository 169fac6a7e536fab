-- luacheck: max line length 160
-- Per-session live figures (issue #27, ours): GET /v1/sessions/{id}/metrics for the tenant's
-- own sessions and GET /v1/admin/sessions for the admin key, read from the sandboxes' cgroups
-- and the workspace's disk. Each figure is shown to move with known work (memory allocated, a
-- busy loop, a file written, commands counted, a command running), in the default session mode
-- and in command mode, where each command's sandbox is released with it and its figures must
-- outlive it. No timing assertions: waits are bounded and say what they last saw. Loopback only.
-- Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local eventually = require "support.eventually"
local http_client = require "support.http_client"
local proc = require "support.proc"
local cjson = require "cjson"

local http = http_client.request
local q = proc.shell_quote
local MB = 1024 * 1024

local TENANT_ON_ADMIN = "Invalid or missing admin key: this is a tenant's key; the admin routes (/v1/admin/..., /metrics) " ..
  "need the admin key (SANDBOX_ADMIN_KEY)."
local ADMIN_ON_TENANT = "Invalid or missing X-API-Key header: this is the admin key, which opens only the /v1/admin/ routes " ..
  "(GET /v1/admin/sessions lists every tenant's sessions)."

local METRIC_FIELDS = { "commands_run", "cpu_seconds", "disk_quota_bytes", "disk_used_bytes", "memory_bytes", "memory_limit_bytes",
  "memory_peak_bytes", "processes", "running_commands", "sampled_at", "sandboxes", "session_id", "state", "tenant_id" }
local ADMIN_FIELDS = { "age_s", "commands_run", "cpu_seconds", "cpus", "created_at", "disk_mb", "disk_quota_bytes", "disk_used_bytes",
  "id", "last_accessed_at", "last_command", "live", "max_processes", "memory_bytes", "memory_limit_bytes", "memory_mb",
  "memory_peak_bytes", "node", "processes", "running", "running_commands", "sandboxes", "state", "template", "tenant" }

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

local function create(server, tenant, body)
  local r = http(server, "POST", "/v1/sessions", { key = server.tenants[tenant], body = body or "{}" })
  assert.are.equal(201, r.status, r.body)
  return r.json.session_id
end

local function exec(server, id, command, timeout)
  local r = http(server, "POST", "/v1/sessions/" .. id .. "/exec",
    { key = server.tenants.acme, body = cjson.encode({ command = command, timeout_seconds = timeout or 60 }) })
  assert.are.equal(200, r.status, r.body)
  assert.are.equal(0, r.json.exit_code, r.body)
  return r.json
end

local function metrics(server, id, tenant)
  local r = http(server, "GET", "/v1/sessions/" .. id .. "/metrics", { key = server.tenants[tenant or "acme"] })
  assert.are.equal(200, r.status, r.body)
  return r.json
end

-- 50 MB of bytes actually written (a zeroed allocation could stay unbacked), held for a moment.
local ALLOCATE = "python3 -c 'x = b\"\\x01\" * (50 * 1024 * 1024); import time; time.sleep(0.2); print(len(x))'"
-- CPU work of a fixed size (not a wall-clock loop: a loaded machine gives it less CPU per second).
local BUSY = "python3 -c 'i = 0\nwhile i < 10000000: i += 1\nprint(i)'"
-- Runs until the spec writes `go` into the workspace (a minute at most): it is running for
-- sure while the spec looks, however slow the machine.
local UNTIL_GO = http_client.until_go(60)

for _, mode in ipairs({ "session", "command" }) do
  describe("per-session figures (SANDBOX_EXEC_MODE=" .. mode .. ")", function()
    local server, id

    lazy_setup(function()
      server = airlockd.start_with_admin({ env = { SANDBOX_EXEC_MODE = mode } })
      id = create(server, "acme")
    end)

    lazy_teardown(function()
      if server then airlockd.stop(server) end
    end)

    it("answers every field for a fresh session: nothing run yet, the sizes of today", function()
      local m = metrics(server, id)
      assert.are.same(METRIC_FIELDS, sorted_keys(m))
      assert.are.equal(id, m.session_id)
      assert.are.equal("acme", m.tenant_id)
      assert.are.equal(0, m.commands_run)
      assert.are.equal(0, m.running_commands)
      assert.are.equal("idle", m.state)
      assert.are.equal(256 * MB, m.memory_limit_bytes)
      assert.are.equal(512 * MB, m.disk_quota_bytes)
      assert.is_true(m.disk_used_bytes < 5 * MB, tostring(m.disk_used_bytes))
    end)

    it("memory_peak_bytes shows a command that allocated 50 MB", function()
      exec(server, id, "true")
      local before = metrics(server, id).memory_peak_bytes
      assert.are.equal(tostring(50 * MB) .. "\n", exec(server, id, ALLOCATE).stdout)
      local after = metrics(server, id)
      assert.is_true(after.memory_peak_bytes >= 40 * MB, string.format("peak %d", after.memory_peak_bytes))
      assert.is_true(after.memory_peak_bytes >= before + 40 * MB,
        string.format("peak %d before, %d after", before, after.memory_peak_bytes))
      assert.is_true(after.memory_peak_bytes >= after.memory_bytes)
    end)

    it("cpu_seconds grows by a busy loop's CPU time", function()
      local before = metrics(server, id).cpu_seconds
      assert.are.equal("10000000\n", exec(server, id, BUSY).stdout)
      local after = metrics(server, id).cpu_seconds
      assert.is_true(after >= before + 0.3, string.format("%.3f s before, %.3f s after", before, after))
    end)

    it("disk_used_bytes grows by a 5 MB file", function()
      local before = metrics(server, id).disk_used_bytes
      exec(server, id, "head -c 5000000 /dev/urandom > five.bin")
      local after = metrics(server, id).disk_used_bytes
      assert.is_true(after >= before + 4900000, string.format("%d before, %d after", before, after))
    end)

    it("counts the commands run, and shows one running with its text in the admin listing", function()
      local before = metrics(server, id).commands_run
      for _ = 1, 3 do exec(server, id, "true") end
      assert.are.equal(before + 3, metrics(server, id).commands_run)
      -- a command left running (curl bounded by --max-time) while the figures are read
      local body = cjson.encode({ command = UNTIL_GO, timeout_seconds = 60 })
      os.execute(string.format("curl -s --max-time 60 -o /dev/null -H %s -H 'Content-Type: application/json' -d %s %s &",
        q("X-API-Key: " .. server.tenants.acme), q(body), q(server.url .. "/v1/sessions/" .. id .. "/exec")))
      eventually(function()
        local m = metrics(server, id)
        return m.running_commands == 1 and m.state == "running", cjson.encode(m)
      end, { timeout = 60, what = "a running command", step = 0.2 })
      local r = http(server, "GET", "/v1/admin/sessions", { key = server.admin })
      assert.are.equal(200, r.status, r.body)
      local row
      for _, s in ipairs(r.json.sessions) do if s.id == id then row = s end end
      assert.is_truthy(row, r.body)
      assert.are.equal(1, #row.running, r.body)
      assert.are.equal(UNTIL_GO, row.running[1].command)
      assert.is_true(math.abs(row.running[1].started_at - os.time()) < 600, tostring(row.running[1].started_at))
      assert.are.equal("true", row.last_command.command) -- the one before, while this one runs
      r = http(server, "POST", "/v1/sessions/" .. id .. "/write",
        { key = server.tenants.acme, body = cjson.encode({ path = "go", content = "" }) })
      assert.are.equal(200, r.status, r.body)
      eventually(function()
        local m = metrics(server, id)
        return m.running_commands == 0 and m.commands_run == before + 4, cjson.encode(m)
      end, { timeout = 90, what = "the command ended", step = 0.2 })
      r = http(server, "GET", "/v1/admin/sessions", { key = server.admin })
      for _, s in ipairs(r.json.sessions) do if s.id == id then row = s end end
      assert.are.same({ "command", "ended_at", "exit_code" }, sorted_keys(row.last_command))
      assert.are.equal(UNTIL_GO, row.last_command.command)
      assert.are.equal(0, row.last_command.exit_code)
      assert.are.equal("idle", row.state)
    end)

    it("answers 404 for another tenant's session and for an unknown id", function()
      local r = http(server, "GET", "/v1/sessions/" .. id .. "/metrics", { key = server.tenants.other })
      assert.are.equal(404, r.status)
      assert.are.equal('{"detail":"Session not found or expired"}', r.body)
      r = http(server, "GET", "/v1/sessions/sbx_000000000000/metrics", { key = server.tenants.acme })
      assert.are.equal(404, r.status)
      r = http(server, "GET", "/v1/sessions/" .. id .. "/metrics", { key = "wrong" })
      assert.are.equal(401, r.status)
    end)

    it("the admin listing shows the sessions of two tenants with their figures; a tenant's key is refused", function()
      local other = create(server, "other", cjson.encode({ memory_mb = 512, cpus = 0.5, max_processes = 32 }))
      local r = http(server, "GET", "/v1/admin/sessions", { key = server.admin })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal(cjson.null, r.json.node)
      local by_id, place = {}, {}
      for i, s in ipairs(r.json.sessions) do
        assert.are.same(ADMIN_FIELDS, sorted_keys(s))
        by_id[s.id], place[s.id] = s, i
      end
      assert.is_true(place[other] < place[id], "newest first: " .. r.body)
      assert.are.equal("acme", by_id[id].tenant)
      assert.are.equal("other", by_id[other].tenant)
      for _, s in ipairs({ by_id[id], by_id[other] }) do
        assert.are.equal("sandbox-base:latest", s.template)
        assert.are.equal(512, s.disk_mb)
        assert.are.equal(512 * MB, s.disk_quota_bytes)
        assert.is_true(s.live)
        assert.is_true(s.age_s >= 0)
      end
      -- each session's own size: the default one, and the one asked for at create
      assert.are.same({ 256, 1, 64, 256 * MB }, { by_id[id].memory_mb, by_id[id].cpus, by_id[id].max_processes,
        by_id[id].memory_limit_bytes })
      assert.are.same({ 512, 0.5, 32, 512 * MB }, { by_id[other].memory_mb, by_id[other].cpus, by_id[other].max_processes,
        by_id[other].memory_limit_bytes })
      local m = metrics(server, other, "other")
      assert.are.equal(512 * MB, m.memory_limit_bytes)
      assert.is_true(by_id[id].commands_run >= 7)
      assert.are.equal(0, by_id[other].commands_run)
      assert.are.equal(cjson.null, by_id[other].last_command)
      assert.is_true(by_id[id].cpu_seconds >= 0.3)
      if mode == "session" then -- its own sandbox lives between commands: read live in the listing's one pass
        assert.is_true(by_id[id].sandboxes >= 1 and by_id[id].memory_bytes > 0 and by_id[id].processes > 0, r.body)
      end
      -- a tenant's key on the admin route, and the admin key on a tenant's route, are told so
      r = http(server, "GET", "/v1/admin/sessions", { key = server.tenants.acme })
      assert.are.equal(401, r.status)
      assert.are.equal(TENANT_ON_ADMIN, r.json.detail)
      r = http(server, "GET", "/v1/sessions", { key = server.admin })
      assert.are.equal(401, r.status)
      assert.are.equal(ADMIN_ON_TENANT, r.json.detail)
      -- a session deleted leaves the listing
      assert.are.equal(200, http(server, "DELETE", "/v1/sessions/" .. other, { key = server.tenants.other }).status)
      r = http(server, "GET", "/v1/admin/sessions", { key = server.admin })
      for _, s in ipairs(r.json.sessions) do assert.are_not.equal(other, s.id) end
    end)
  end)
end
