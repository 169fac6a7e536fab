-- A host with more commands than the server has places: 75 commands spawned at once against
-- an airlockd that runs 4 at a time all succeed, with no retries allowed (max_retries = 0),
-- because the SDK keeps them in a client-side line (the limit learned from the server's
-- "too many commands" answer, or given as max_concurrent_exec).
local airlock = require "airlock"
local airlockd = require "support.airlockd"

local function clock() return require("socket").gettime() end

local LIMITS = '{"*":{"max_concurrent_exec":4,"max_sessions":20,"requests_per_minute":100000}}'

describe("the client-side line for commands", function()
  local srv, opts

  setup(function()
    srv = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = LIMITS } })
    opts = { api_key = srv.tenants.acme, base_url = srv.url, max_retries = 0 }
  end)
  teardown(function() if srv then airlockd.stop(srv) end end)

  local function run_all(n, run_opts)
    local sandboxes = {}
    for i = 1, 5 do sandboxes[i] = airlock.sandbox(opts) end
    local list = {}
    for i = 1, n do
      list[i] = airlock.spawn(function()
        local r = sandboxes[i % 5 + 1]:run("echo " .. i, run_opts)
        return r.stdout, r.exit_code
      end)
    end
    local t = clock()
    while airlock.poll(50) > 0 do
      assert.is_true(clock() - t < 240, "the commands did not finish")
    end
    for _, sbx in ipairs(sandboxes) do sbx:close() end
    return list
  end

  it("75 commands spawned at once against 4 places all succeed", function()
    local before = airlock.stats()
    local list = run_all(75)
    for i, task in ipairs(list) do
      local ok, stdout, code = task:result()
      assert.is_true(ok, tostring(stdout))
      assert.are.equal(i .. "\n", stdout)
      assert.are.equal(0, code)
    end
    local after = airlock.stats()
    assert.is_true(after.server_full > before.server_full, "the limit was learned from the server")
    assert.are.equal(0, after.commands_running)
    assert.are.equal(0, after.commands_waiting)
    assert.are.equal(before.retries, after.retries)     -- no retry was needed (none allowed)
  end)

  it("with max_concurrent_exec = 4 nothing is refused", function()
    opts.max_concurrent_exec = 4
    finally(function() opts.max_concurrent_exec = nil end)
    local before = airlock.stats()
    local list = run_all(12)
    for _, task in ipairs(list) do assert.is_true((task:result())) end
    assert.are.equal(before.server_full, airlock.stats().server_full)
  end)
end)
