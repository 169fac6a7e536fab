-- What a new user meets following the docs (issue 27 item 6), run as written against a real
-- airlockd: docs/fleet.md's quick-start lines in a shell without LUA_PATH, with-airlockd.sh from
-- another directory, api.md's 401 example, and a base_url copied with its /v1.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local proc = require "support.proc"

local q = proc.shell_quote
local ROOT = proc.repo_root()

describe("a first use, as the docs say", function()
  local server

  setup(function() server = airlockd.start() end)
  teardown(function() if server then airlockd.stop(server) end end)

  it("runs docs/fleet.md's quick start (fleet.json's router, the example) in a shell with no LUA_PATH", function()
    local doc = assert(proc.read_file(ROOT .. "/docs/fleet.md"))
    local block = assert(doc:match("## One machine: `scripts/fleet.sh`.-```sh\n(.-)```"), "no quick-start block")
    local lines = {}
    for line in block:gmatch("[^\n]+") do
      -- the lines that set up and run the example (up, cat, down and make need a real fleet)
      if not line:match("fleet%.sh") and not line:match("^make ") and not line:match("^cat ") then
        lines[#lines + 1] = line
      end
    end
    assert.are.equal(2, #lines, block)
    -- a fleet directory whose router is this airlockd
    local dir = proc.make_temp_dir()
    proc.write_file(dir .. "/fleet.json", '{"router":"' .. server.url .. '"}')
    local script = table.concat(lines, "\n"):gsub("/tmp/fleet", dir)
    local rc, out = proc.run_capture(string.format("cd %s && env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 " ..
      "-u LUA_CPATH_5_4 KEY=%s bash -c %s", q(ROOT), q(server.tenants.acme), q(script)))
    proc.remove_tree(dir)
    assert.are.equal(0, rc, out)
    assert.are.equal("65536\n0\n", out)
  end)

  it("runs with-airlockd.sh's command in the caller's directory, a relative script path included", function()
    local dir = proc.make_temp_dir()
    proc.write_file(dir .. "/my_script.lua", 'local airlock = require "airlock"\n' ..
      'print(#airlock.list_sessions(), (io.open("here.txt"):read("*a")))\n')
    proc.write_file(dir .. "/here.txt", "the caller's directory")
    local rc, out = proc.run_capture(string.format("cd %s && AIRLOCKD_BIN=%s %s %s my_script.lua", q(dir),
      q(airlockd.binary():sub(1, 1) == "/" and airlockd.binary() or ROOT .. "/" .. airlockd.binary()),
      q(ROOT .. "/scripts/with-airlockd.sh"), "lua5.4")) -- as README shows it (the script sets the 5.4 core's path)
    proc.remove_tree(dir)
    assert.are.equal(0, rc, out)
    assert.are.equal("0\tthe caller's directory\n", out)
  end)

  it("gives the AuthenticationError api.md shows for a wrong key", function()
    local doc = assert(proc.read_file(ROOT .. "/docs/api.md"))
    local status, message = doc:match('pcall%(airlock%.sandbox, { api_key = "wrong" }%).-%-%- (%d+)  ([^\n]+)')
    assert.truthy(status, "no 401 example in docs/api.md")
    local airlock = require "airlock"
    local ok, err = pcall(airlock.sandbox, { api_key = "wrong", base_url = server.url })
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "AuthenticationError"), tostring(err))
    assert.are.same({ tonumber(status), message }, { err.status, err.message })
  end)

  it("takes a base_url copied with its /v1", function()
    local airlock = require "airlock"
    for _, url in ipairs({ server.url .. "/v1", server.url .. "/v1/" }) do
      local sbx = airlock.sandbox({ api_key = server.tenants.acme, base_url = url })
      assert.are.equal(server.url, sbx.base_url)
      assert.are.equal("ok\n", sbx:run("echo ok").stdout)
      sbx:close()
    end
  end)

  it("shows in README's Troubleshooting the errors of the wrong Lua that a user sees", function()
    local readme = assert(proc.read_file(ROOT .. "/README.md"))
    local trouble = assert(readme:match("## Troubleshooting\n(.-)\n## "), "no Troubleshooting section")
    local paths = string.format("LUA_PATH=%s LUA_CPATH=%s", q(ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;"),
      q(ROOT .. "/build/?.so;;"))
    -- `lua` being 5.3 (the examples use 5.4's <close>)
    local _, out = proc.run_capture(string.format("cd %s && %s lua5.3 examples/quickstart.lua", q(ROOT), paths))
    local said = assert(out:match("^lua5%.3: (examples/quickstart%.lua:%d+: [^\n]+)"), out)
    assert.truthy(trouble:find("`lua: " .. said .. "`", 1, true), said)
    -- LuaJIT loading the 5.4 core of build/
    _, out = proc.run_capture(string.format("%s luajit -e 'require \"airlock.core\"'", paths))
    said = assert(out:match("(undefined symbol: [%w_]+)"), out)
    assert.truthy(trouble:find("error loading module 'airlock.core' from file '.../build/airlock/core.so': ... " ..
      "undefined\n  " .. said:gsub("^undefined ", ""), 1, true), said)
  end)

  -- (once: under Lua 5.4; it runs spec/unit again on Lua 5.3, one job of scripts/test.sh)
  if _VERSION == "Lua 5.4" and type(jit) ~= "table" then
    it("shows make test's progress, N of M jobs, as each job ends", function()
      local rc, out = proc.run_capture(string.format("cd %s && scripts/test.sh --only=lua53", q(ROOT)))
      assert.are.equal(0, rc, out)
      assert.truthy(out:find("== 1 of 1: lua53: busted spec/unit (", 1, true), out)
    end)
  end
end)
