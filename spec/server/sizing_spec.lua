-- luacheck: max line length 160
-- Sessions sized to their work (issue #24 item 4): POST /v1/sessions takes memory_mb, cpus,
-- disk_mb and max_processes, each within the tenant's maxima (SANDBOX_TENANT_LIMITS), and the
-- sandbox enforces them as it does the defaults: the memory cgroup (a 1 GB session holds a 700 MB
-- array, a default one is OOM-killed for it), the CFS quota (read from the session sandbox's
-- host cgroup), gVisor's process limit and the workspace image's size. GET /v1/sessions/{id} and
-- the list show the template and the sizes, and they survive a restart; the disk counts against
-- SANDBOX_DISK_TOTAL_MB; SANDBOX_SESSION_* set the default size. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local cjson = require "cjson"

local http = http_client.request

local LIMITS = cjson.encode({ ["*"] = { max_memory_mb = 1024, max_cpus = 2, max_disk_mb = 256, max_processes = 128 } })
local ENV = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_WORKSPACE_QUOTA_MB = "32", SANDBOX_EXEC_MODE = "session" }

local function create(server, key, body)
  local r = http_client.create(server, key, cjson.encode(body))
  assert.are.equal(201, r.status, r.body)
  return r.json.session_id, r.json
end

local function get(server, key, id)
  return http(server, "GET", "/v1/sessions/" .. id, { key = key })
end

local function listed(server, key)
  local r = http(server, "GET", "/v1/sessions", { key = key })
  assert.are.equal(200, r.status, r.body)
  local by = {}
  for _, s in ipairs(r.json.sessions) do by[s.session_id] = s end
  return by
end

local function shape(s)
  return { template = s.template, memory_mb = s.memory_mb, cpus = s.cpus, disk_mb = s.disk_mb,
           max_processes = s.max_processes }
end

-- The CFS quota (µs per 100 ms) of the session's own sandbox, from its host cgroup (this
-- server's root, its tenant's group, the sandbox named after the session): cgroup v1's
-- cpu.cfs_quota_us, or v2's cpu.max ("max" = -1); nil while there is none.
local function cfs_quota(id)
  local v1 = proc.output("cat /sys/fs/cgroup/cpu/airlockd-*/*/" .. id .. "*/cpu.cfs_quota_us 2>/dev/null")
  local v2 = proc.output("cat /sys/fs/cgroup/airlockd-*/*/" .. id .. "*/cpu.max 2>/dev/null")
  if v2:match("^max") then return -1 end
  return tonumber(v1:match("^%s*(%-?%d+)") or v2:match("^(%d+) "))
end

-- fn(server, key) on an airlockd of its own started with env (key: tenant acme's); the server
-- is stopped whatever fn does.
local function on_own_server(env, fn)
  local server = airlockd.start({ env = env })
  local ok, err = pcall(fn, server, server.tenants.acme)
  airlockd.stop(server)
  assert(ok, err)
end

describe("session sizes", function()
  local server

  setup(function()
    server = airlockd.start({ env = ENV })
  end)

  teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("a 1024 MB session holds a 700 MB array; a default session is OOM-killed for it", function()
    local key = server.tenants.acme
    local big = create(server, key, { memory_mb = 1024 })
    local small = create(server, key, {})
    local cmd = 'python3 -c "b = bytearray(700*1024*1024); print(len(b))"'
    local r = http_client.exec(server, key, big, cmd, 60)
    assert.are.equal(200, r.status, r.body)
    assert.are.equal(0, r.json.exit_code, r.body)
    assert.are.equal(tostring(700 * 1024 * 1024) .. "\n", r.json.stdout)
    assert.is_false(r.json.oom_killed)
    local m = http_client.exec(server, key, big, "grep MemTotal /proc/meminfo")
    assert.truthy(m.json.stdout:find("MemTotal:%s+1048576 kB"), m.body)
    r = http_client.exec(server, key, small, cmd, 60)
    assert.are.equal(200, r.status, r.body)
    assert.is_true(r.json.oom_killed, r.body)
    assert.are.equal(137, r.json.exit_code)
    for _, id in ipairs({ big, small }) do http_client.delete(server, key, id) end
  end)

  it("cpus sets the sandbox's CFS quota: 2 CPUs, 0.5, and the default 1", function()
    local key = server.tenants.acme
    local want = { [2] = 200000, [0.5] = 50000, [1] = 100000 }
    for cpus, quota in pairs(want) do
      local id = create(server, key, cpus == 1 and {} or { cpus = cpus })
      assert.are.equal(cpus, get(server, key, id).json.cpus)
      -- a new session's first command may run in a spare booted ahead (no quota until its
      -- command) while the session's own sandbox boots: commands until the own one has run one
      local seen
      assert.is_true(proc.wait_until(30, function()
        local r = http_client.exec(server, key, id, "true")
        assert.are.equal(0, r.json.exit_code, r.body)
        seen = cfs_quota(id)
        return seen == quota
      end, 0.5), "cfs_quota_us of " .. id .. " for cpus " .. cpus .. ": " .. tostring(seen))
      http_client.delete(server, key, id)
    end
  end)

  -- cmd prints stdout in the session larger and fails with refusal in its stderr in smaller;
  -- both sessions are deleted after.
  local function runs_only_in(key, larger, smaller, cmd, timeout, stdout, refusal)
    local r = http_client.exec(server, key, larger, cmd, timeout)
    assert.are.equal(0, r.json.exit_code, r.body)
    assert.are.equal(stdout, r.json.stdout)
    r = http_client.exec(server, key, smaller, cmd, timeout)
    assert.are_not.equal(0, r.json.exit_code, r.body)
    assert.truthy(r.json.stderr:find(refusal, 1, true), r.body)
    for _, id in ipairs({ larger, smaller }) do http_client.delete(server, key, id) end
  end

  it("max_processes = 128 runs 100 sleeping processes; the default 64 cannot", function()
    local key = server.tenants.acme
    local many = create(server, key, { max_processes = 128 })
    local few = create(server, key, {})
    local cmd = "python3 -c \"import subprocess; ps = [subprocess.Popen(['sleep', '30']) for _ in range(100)]; "
      .. "print(len(ps)); [p.kill() for p in ps]\""
    runs_only_in(key, many, few, cmd, 30, "100\n", "Resource temporarily unavailable")
  end)

  it("disk_mb = 128 takes a 100 MB file; a 64 MB disk cannot", function()
    local key = server.tenants.acme
    local roomy, json = create(server, key, { disk_mb = 128 })
    assert.are.equal(128, json.disk_quota_mb)
    assert.are.equal(128, json.disk_mb)
    local tight = create(server, key, { disk_mb = 64 })
    local cmd = "head -c 100000000 /dev/zero > big && stat -c %s big"
    runs_only_in(key, roomy, tight, cmd, 60, "100000000\n", "No space left on device")
  end)

  it("refuses a size over the tenant's maximum, naming the field and the maximum", function()
    local key = server.tenants.acme
    local over = {
      { "memory_mb", 1025, "1024 MB", "max_memory_mb" },
      { "cpus", 2.5, "2", "max_cpus" },
      { "disk_mb", 257, "256 MB", "max_disk_mb" },
      { "max_processes", 129, "128", "max_processes" },
    }
    for _, case in ipairs(over) do
      local field, value, max, limit = case[1], case[2], case[3], case[4]
      local r = http_client.create(server, key, cjson.encode({ [field] = value }))
      assert.are.equal(422, r.status, r.body)
      local e = r.json.detail[1]
      assert.are.same({ "body", field }, e.loc)
      assert.are.equal("less_than_equal", e.type)
      assert.are.equal(field .. " is over this tenant's maximum of " .. max .. " (" .. limit .. " in SANDBOX_TENANT_LIMITS)", e.msg)
    end
    assert.are.same({}, listed(server, key)) -- nothing was made
  end)

  it("refuses wrong types, zero, negatives, fractions and huge numbers with a 422 naming the field", function()
    local key = server.tenants.acme
    local bad = {
      { "memory_mb", "1024", "int_type" }, { "memory_mb", true, "int_type" }, { "memory_mb", 0, "greater_than_equal" },
      { "memory_mb", -5, "greater_than_equal" }, { "memory_mb", 512.5, "int_from_float" },
      { "memory_mb", 1e300, "less_than_equal" }, { "memory_mb", 64, "greater_than_equal" },
      { "cpus", "2", "float_type" }, { "cpus", 0, "greater_than_equal" }, { "cpus", 0.25, "multiple_of" },
      { "cpus", -1, "greater_than_equal" }, { "disk_mb", { 1 }, "int_type" }, { "disk_mb", 1.5, "int_from_float" },
      { "disk_mb", 8, "greater_than_equal" }, { "max_processes", 1e18, "less_than_equal" },
      { "max_processes", 100.5, "int_from_float" }, { "max_processes", false, "int_type" },
    }
    for _, case in ipairs(bad) do
      local field, value, kind = case[1], case[2], case[3]
      local r = http_client.create(server, key, cjson.encode({ [field] = value }))
      assert.are.equal(422, r.status, field .. "=" .. cjson.encode(value) .. ": " .. r.body)
      assert.are.same({ "body", field }, r.json.detail[1].loc)
      assert.are.equal(kind, r.json.detail[1].type, r.body)
      assert.truthy(r.json.detail[1].msg:find(field, 1, true), r.body)
    end
    -- an integer past 64 bits (as Python reads it: a number) is over the maximum too
    local huge = http_client.create(server, key, '{"max_processes": 99999999999999999999}')
    assert.are.equal(422, huge.status, huge.body)
    assert.are.same({ "body", "max_processes" }, huge.json.detail[1].loc)
    assert.are.equal("less_than_equal", huge.json.detail[1].type)
    -- every bad field is named at once
    local r = http_client.create(server, key, '{"memory_mb": "x", "cpus": 9, "disk_mb": 0, "max_processes": 1.5}')
    assert.are.equal(422, r.status, r.body)
    assert.are.equal(4, #r.json.detail)
    -- null is as if left out
    local id, json = create(server, key, { memory_mb = cjson.null })
    assert.are.equal(256, json.memory_mb)
    http_client.delete(server, key, id)
    assert.are.same({}, listed(server, key))
  end)

  it("GET /v1/sessions/{id} and the list show the template and the sizes", function()
    local key, other = server.tenants.acme, server.tenants.other
    local plain = create(server, key, {})
    local sized = create(server, key, { template = "python:3.11-slim", memory_mb = 512, cpus = 1.5, disk_mb = 64,
                                        max_processes = 100 })
    local defaults = { template = "sandbox-base:latest", memory_mb = 256, cpus = 1, disk_mb = 32, max_processes = 64 }
    local asked = { template = "python:3.11-slim", memory_mb = 512, cpus = 1.5, disk_mb = 64, max_processes = 100 }
    local g = get(server, key, plain)
    assert.are.equal(200, g.status, g.body)
    assert.are.same(defaults, shape(g.json))
    assert.are.equal(plain, g.json.session_id)
    assert.are.equal("acme", g.json.tenant_id)
    assert.are.equal(32, g.json.disk_quota_mb)
    assert.are.same(asked, shape(get(server, key, sized).json))
    local by = listed(server, key)
    assert.are.same(defaults, shape(by[plain]))
    assert.are.same(asked, shape(by[sized]))
    assert.are.equal(403, get(server, other, sized).status)
    assert.are.equal(404, get(server, key, "sbx_000000000000").status)
    -- a GET is not a use: the idle clock does not move
    local before = by[sized].last_accessed_at
    assert.are.equal(before, get(server, key, sized).json.last_accessed_at)
    for _, id in ipairs({ plain, sized }) do http_client.delete(server, key, id) end
  end)

  it("keeps the template and sizes across a restart, and enforces them after it", function()
    local key = server.tenants.acme
    local id = create(server, key, { template = "python:3.11-slim", memory_mb = 1024, cpus = 2, disk_mb = 64,
                                     max_processes = 100 })
    local before = get(server, key, id).json
    os.execute("kill -TERM " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end), "airlockd did not stop")
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = ENV, wait = 60 })
    local after = get(server, key, id)
    assert.are.equal(200, after.status, after.body)
    assert.are.same(shape(before), shape(after.json))
    assert.are.same(shape(before), shape(listed(server, key)[id]))
    local m = http_client.exec(server, key, id, "grep MemTotal /proc/meminfo; df -k --output=size /workspace | tail -1")
    assert.truthy(m.json.stdout:find("MemTotal:%s+1048576 kB"), m.body)
    local kb = tonumber(m.json.stdout:match("\n%s*(%d+)\n$"))
    assert.truthy(kb and kb >= 64 * 1024 and kb < 80 * 1024, m.body)
    local seen
    assert.is_true(proc.wait_until(10, function()
      seen = cfs_quota(id)
      return seen == 200000
    end), "cfs_quota_us after the restart: " .. tostring(seen))
    http_client.delete(server, key, id)
  end)
end)

describe("session sizes with a sandbox per command (SANDBOX_EXEC_MODE=command)", function()
  it("every command's sandbox, cold or booted ahead, has the session's memory and process limit", function()
    on_own_server({ SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "command" }, function(server, key)
      local id = create(server, key, { memory_mb = 1024, max_processes = 100 })
      -- the first command runs cold, the next ones in a sandbox booted ahead for the session
      for i = 1, 3 do
        local r = http_client.exec(server, key, id, "grep MemTotal /proc/meminfo; ulimit -u")
        assert.are.equal(0, r.json.exit_code, r.body)
        assert.truthy(r.json.stdout:find("MemTotal:%s+1048576 kB\n100\n$"), "command " .. i .. ": " .. r.body)
      end
    end)
  end)
end)

describe("the server's default session size (SANDBOX_SESSION_MEMORY_MB, _CPUS, _MAX_PROCESSES)", function()
  it("gives sessions that ask for nothing, and the spares made for them, that size", function()
    on_own_server({ SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session",
      SANDBOX_SESSION_MEMORY_MB = "512", SANDBOX_SESSION_CPUS = "0.5", SANDBOX_SESSION_MAX_PROCESSES = "100",
      SANDBOX_WARM_NEW = "1" }, function(server, key)
      create(server, key, {}) -- leaves a spare booting for the next create
      for _, case in ipairs({ { {}, 512, 0.5, 100, "524288" }, { { memory_mb = 256, cpus = 1, max_processes = 64 }, 256, 1, 64, "262144" } }) do
        local id, json = create(server, key, case[1])
        assert.are.same({ case[2], case[3], case[4] }, { json.memory_mb, json.cpus, json.max_processes })
        -- the first command runs in the spare (when adopted) or in the session's own sandbox
        for _ = 1, 2 do
          local r = http_client.exec(server, key, id, "grep MemTotal /proc/meminfo")
          assert.truthy(r.json.stdout:find("MemTotal:%s+" .. case[5] .. " kB"), r.body)
        end
      end
    end)
  end)
end)

describe("a session's disk counts against the server's disk budget (SANDBOX_DISK_TOTAL_MB)", function()
  it("refuses a disk that does not fit with the capacity 503, and still makes one that does", function()
    on_own_server({ SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_DISK_TOTAL_MB = "300",
      SANDBOX_WORKSPACE_QUOTA_MB = "32", SANDBOX_WARM_NEW = "0" }, function(server, key)
      local big = create(server, key, { disk_mb = 200 }) -- an image of ~215 MB
      local r = http_client.create(server, key, cjson.encode({ disk_mb = 200 }))
      assert.are.equal(503, r.status, r.body)
      assert.are.equal("All sandbox workspaces are in use; try again shortly.", r.json.detail)
      local small = create(server, key, {}) -- 32 MB fits beside it
      for _, id in ipairs({ big, small }) do assert.are.equal(200, http_client.delete(server, key, id).status) end
      create(server, key, { disk_mb = 200 }) -- room again once the first is gone
    end)
  end)
end)
