-- The examples the README shows run for real against airlockd, as a user would run them.
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local q = proc.shell_quote

local lua = proc.lua_interpreter()
local is54 = _VERSION == "Lua 5.4" and type(jit) ~= "table"

local function run_example(server, file)
  return proc.run_capture(string.format("SANDBOX_API_URL=%s SANDBOX_API_KEY=%s %s %s",
    q(server.url), q(server.tenants.acme), lua, q(file)))
end

local function sessions_left(server)
  local airlock = require "airlock"
  local list = airlock.list_sessions{ base_url = server.url, api_key = server.tenants.acme }
  return #list
end

describe("examples", function()
  local server
  setup(function() server = airlockd.start() end)
  teardown(function() if server then airlockd.stop(server) end end)

  if is54 then
    it("quickstart.lua prints 65536 and 0, and deletes its session", function()
      local rc, out = run_example(server, "examples/quickstart.lua")
      assert.are.equal(0, rc, out)
      assert.are.equal("65536\n0\n", out)
      assert.are.equal(0, sessions_left(server))
    end)
  end

  it("host_loop.lua runs three sandboxes at once from one thread", function()
    local rc, out = run_example(server, "examples/host_loop.lua")
    assert.are.equal(0, rc, out)
    assert.are.equal("1\ttask 1\n2\ttask 2\n3\ttask 3\nframes while waiting: yes\n", out)
    assert.are.equal(0, sessions_left(server))
  end)
end)
