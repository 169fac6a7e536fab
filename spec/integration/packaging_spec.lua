-- The rock builds and installs offline (`luarocks make --deps-mode=none`), and the installed
-- module loads from the rock tree alone.
local proc = require "support.proc"
local q = proc.shell_quote
local run = proc.run_capture

local lua_version = _VERSION:match("%d+%.%d+")
local interpreter = proc.lua_interpreter()

describe("the rockspec", function()
  local work

  before_each(function()
    work = proc.make_temp_dir()
    assert(os.execute("mkdir -p " .. q(work .. "/src")))
  end)

  after_each(function()
    proc.remove_tree(work)
  end)

  it("builds and installs offline, and the installed module loads #slow", function()
    -- A copy of the sources, so the build leaves nothing in the checkout.
    local rc, out = run("cp -r src/core " .. q(work .. "/src/") ..
      " && cp -r lua bin rockspec docs examples " .. q(work))
    assert.are.equal(0, rc, out)
    local tree = work .. "/tree"
    rc, out = run("cd " .. q(work) .. " && luarocks --lua-version=" .. lua_version ..
      " make --deps-mode=none --tree=" .. q(tree) .. " rockspec/airlock-sandbox-scm-1.rockspec")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("airlock-sandbox scm-1 is now installed", 1, true), out)

    -- Load from the rock tree only (plus the system paths for lua-cjson).
    local lpath = tree .. "/share/lua/" .. lua_version .. "/?.lua;" ..
      tree .. "/share/lua/" .. lua_version .. "/?/init.lua;;"
    local cpath = tree .. "/lib/lua/" .. lua_version .. "/?.so;;"
    local probe = [[local a = require "airlock"; local core = require "airlock.core"
      local tools = require "airlock.tools"
      print(a.VERSION, package.searchpath("airlock.core", package.cpath), #tools.openai_tools())]]
    rc, out = run("cd / && LUA_PATH=" .. q(lpath) .. " LUA_CPATH=" .. q(cpath) .. " " ..
      interpreter .. " -e " .. q(probe))
    assert.are.equal(0, rc, out)
    local version, so, ntools = out:match("^(%S+)%s+(%S+)%s+(%d+)")
    assert.truthy(version, out)
    assert.are.equal(tree .. "/lib/lua/" .. lua_version .. "/airlock/core.so", so)
    assert.are.equal("3", ntools)
    -- The MCP server script is installed as a command.
    assert.truthy(io.open(tree .. "/bin/airlock-mcp", "r"), "bin/airlock-mcp not installed")
  end)
end)
