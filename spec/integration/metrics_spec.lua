-- luacheck: max line length 160
-- sbx:metrics() (issue #27, an airlockd extension): the session's live figures through the
-- SDK against a real airlockd, blocking and inside tasks; errors as for every session call.
-- The same call on the uv and ngx transports is a case of spec/support/parity.lua. Runs on
-- Lua 5.4, 5.1 and LuaJIT.
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local expect_error = require "support.expect_error"

local FIELDS = { "commands_run", "cpu_seconds", "disk_quota_bytes", "disk_used_bytes", "memory_bytes", "memory_limit_bytes",
  "memory_peak_bytes", "processes", "running_commands", "sampled_at", "sandboxes", "session_id", "state", "tenant_id" }

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

describe("sbx:metrics()", function()
  local srv, opts

  setup(function()
    srv = airlockd.start()
    opts = { api_key = srv.tenants.acme, base_url = srv.url }
  end)

  teardown(function()
    if srv then airlockd.stop(srv) end
  end)

  it("answers the session's figures, blocking: commands counted, a written file on its disk", function()
    airlock.with(opts, function(sbx)
      local m = sbx:metrics()
      assert.are.same(FIELDS, sorted_keys(m))
      assert.are.equal(sbx.session_id, m.session_id)
      assert.are.equal("acme", m.tenant_id)
      assert.are.equal(0, m.commands_run)
      sbx:run("head -c 3000000 /dev/zero > three.bin")
      sbx:run("true")
      local after = sbx:metrics()
      assert.are.equal(2, after.commands_run)
      assert.are.equal(0, after.running_commands)
      assert.is_true(after.disk_used_bytes >= m.disk_used_bytes + 2900000,
        string.format("%d before, %d after", m.disk_used_bytes, after.disk_used_bytes))
      assert.is_true(after.cpu_seconds > 0)
      assert.is_true(after.memory_peak_bytes > 0)
    end)
  end)

  it("works inside tasks, two sessions at once", function()
    local tasks = {}
    for i = 1, 2 do
      tasks[i] = airlock.spawn(function()
        return airlock.with(opts, function(sbx)
          sbx:run("true")
          local m = sbx:metrics()
          return m.session_id == sbx.session_id, m.commands_run
        end)
      end)
    end
    local rounds = 0
    while airlock.poll(50) > 0 and rounds < 2400 do rounds = rounds + 1 end
    for i = 1, 2 do
      local ok, own, ran = tasks[i]:result()
      assert.is_true(ok, tostring(own))
      assert.is_true(own)
      assert.are.equal(1, ran)
    end
  end)

  it("raises NotFoundError for a session of another tenant or none, SandboxError before start", function()
    local theirs = airlock.sandbox({ api_key = srv.tenants.other, base_url = srv.url })
    local err = expect_error("NotFoundError", function()
      return airlock.attach(theirs.session_id, opts):metrics()
    end)
    assert.are.equal(404, err.status)
    theirs:close()
    expect_error("NotFoundError", function() return airlock.attach("sbx_000000000000", opts):metrics() end)
    local unstarted = airlock.sandbox({ api_key = srv.tenants.acme, base_url = srv.url, start = false })
    expect_error("SandboxError", function() return unstarted:metrics() end)
  end)
end)
