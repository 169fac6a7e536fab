-- The SDK's session sizes against a real airlockd (issue #24 item 4): airlock.sandbox{ memory_mb,
-- cpus, disk_mb, max_processes } reaches the server, the handle and sbx:info() show what the
-- session got, the sandbox enforces it, a size that is not a number fails before any request,
-- and one over the tenant's maximum is the server's ValidationError naming field and maximum.
local airlock = require "airlock"
local cjson = require "cjson"
local expect_error = require "support.expect_error"
local sdk_server = require "support.sdk_server"

describe("airlock SDK: session sizes", function()
  local sdk = sdk_server.new({ env = {
    SANDBOX_TENANT_LIMITS = cjson.encode({ ["*"] = { max_memory_mb = 1024, max_cpus = 2, max_disk_mb = 256 } }),
    SANDBOX_WORKSPACE_QUOTA_MB = "32" } })
  local with = sdk.with
  setup(sdk.start)
  teardown(sdk.stop)

  it("creates a sized session, shows its sizes and runs within them", function()
    local sbx = airlock.sandbox(with({ memory_mb = 1024, cpus = 2, disk_mb = 64, max_processes = 100 }))
    finally(function() sbx:close() end)
    assert.are.equal(1024, sbx.memory_mb)
    assert.are.equal(2, sbx.cpus)
    assert.are.equal(64, sbx.disk_mb)
    assert.are.equal(100, sbx.max_processes)
    assert.are.equal("sandbox-base:latest", sbx.template)
    local info = sbx:info()
    assert.are.equal(sbx.session_id, info.session_id)
    assert.are.same({ 1024, 2, 64, 100, "sandbox-base:latest" },
      { info.memory_mb, info.cpus, info.disk_mb, info.max_processes, info.template })
    local r = sbx:run('python3 -c "b = bytearray(700*1024*1024); print(len(b))"', { timeout = 60 })
    assert.are.equal(0, r.exit_code, r.output)
    assert.are.equal(tostring(700 * 1024 * 1024) .. "\n", r.stdout)
    local listed
    for _, s in ipairs((airlock.list_sessions(sdk.opts))) do
      if s.session_id == sbx.session_id then listed = s end
    end
    assert.are.same({ 1024, 2, 64, 100 }, { listed.memory_mb, listed.cpus, listed.disk_mb, listed.max_processes })
  end)

  it("a default session shows the defaults and is OOM-killed for the same array", function()
    local sbx = airlock.sandbox(sdk.opts)
    finally(function() sbx:close() end)
    assert.are.same({ 256, 1, 32, 64 }, { sbx.memory_mb, sbx.cpus, sbx.disk_mb, sbx.max_processes })
    local r = sbx:run('python3 -c "b = bytearray(700*1024*1024); print(len(b))"', { timeout = 60 })
    assert.is_true(r.oom_killed, r.output)
  end)

  it("refuses a size that is not a number before any request", function()
    for _, name in ipairs({ "memory_mb", "cpus", "disk_mb", "max_processes" }) do
      local err = expect_error("ValidationError", airlock.sandbox, with({ [name] = "1024" }))
      assert.truthy(tostring(err):find(name, 1, true), tostring(err))
      assert.is_nil(err.status) -- no request was made
    end
    expect_error("ValidationError", airlock.sandbox, with({ cpus = 0 / 0 }))
  end)

  it("a size over the tenant's maximum is the server's ValidationError naming the field and maximum", function()
    local err = expect_error("ValidationError", airlock.sandbox, with({ memory_mb = 4096 }))
    assert.are.equal(422, err.status)
    assert.truthy(tostring(err):find("memory_mb is over this tenant's maximum of 1024 MB", 1, true), tostring(err))
    err = expect_error("ValidationError", airlock.sandbox, with({ disk_mb = 16.5 }))
    assert.truthy(tostring(err):find("disk_mb should be a whole number", 1, true), tostring(err))
    assert.are.same({}, (airlock.list_sessions(sdk.opts)))
  end)
end)
