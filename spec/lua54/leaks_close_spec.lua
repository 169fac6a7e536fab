-- Lua 5.4 only (uses <close>): to-be-closed sandboxes leave no session behind, whether the
-- block ends normally, by an error, by break/return, or the error is the SDK's own.
local airlock = require "airlock"
local airlockd = require "support.airlockd"

local LIMITS = '{"*":{"max_sessions":200,"requests_per_minute":100000}}'

describe("<close> leaves no session behind", function()
  local srv, opts
  local created = 0

  setup(function()
    srv = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = LIMITS }, lean = true }) -- (no command runs here)
    opts = { api_key = srv.tenants.acme, base_url = srv.url }
  end)

  teardown(function()
    if srv then
      local ok, sessions = pcall(airlock.list_sessions, opts)
      airlockd.stop(srv)
      assert.is_true(ok, tostring(sessions))
      assert.are.equal(0, #sessions)
      assert.are.equal(20, created)
    end
  end)

  it("normal end of the block, break and return (10)", function()
    for i = 1, 10 do
      local function scoped()
        local sbx <close> = airlock.sandbox(opts)
        created = created + 1
        if i % 3 == 0 then return sbx.session_id end   -- leaves through return
        sbx.files:write("a.txt", "x")
        return nil
      end
      scoped()
      for j = 1, 3 do
        if i > 5 then break end
        local sbx <close> = airlock.sandbox(opts)      -- leaves through break
        created = created + 1
        assert.is_truthy(sbx.session_id)
        if j == 1 then break end
      end
    end
    assert.are.equal(0, #airlock.list_sessions(opts))
  end)

  it("an error in the block, plain or from the SDK (5)", function()
    for i = 1, 5 do
      local ok, err = pcall(function()
        local sbx <close> = airlock.sandbox(opts)
        created = created + 1
        if i % 2 == 0 then sbx:run("true", { timeout = 0 }) end   -- ValidationError
        error("block failed", 0)
      end)
      assert.is_false(ok)
      if i % 2 == 0 then assert.is_true(airlock.is(err, "ValidationError"), tostring(err))
      else assert.are.equal("block failed", err) end
    end
    assert.are.equal(0, #airlock.list_sessions(opts))
  end)
end)
