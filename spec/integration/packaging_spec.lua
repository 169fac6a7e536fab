-- Packaging: the rockspec names every module and the SDK's own version; `make dist`, and
-- `luarocks pack rockspec/...` after it, make the same small .src.rock (the rockspec and the
-- release tarball) that installs offline into a fresh tree (`--deps-mode=none`: the declared
-- lua-cjson comes from Debian), and the installed SDK loads from that tree alone and reports
-- the rockspec's version; `luarocks make` in a checkout needs no network and, once LuaRocks
-- is told Debian provides lua-cjson, reports no missing dependency.
local proc = require "support.proc"
local q = proc.shell_quote
local run = proc.run_capture

local lua_version = _VERSION:match("%d+%.%d+")
local interpreter = proc.lua_interpreter()

-- The rockspec's fields, read as the Lua file it is.
local function load_rockspec(path)
  local text = assert(proc.read_file(path), "cannot read " .. path)
  local env = {}
  local chunk
  if setfenv then                                        -- luacheck: ignore 113
    chunk = assert(loadstring(text, path))               -- luacheck: ignore 113
    setfenv(chunk, env)                                  -- luacheck: ignore 113
  else
    chunk = assert(load(text, path, "t", env))
  end
  chunk()
  return env
end

local function rockspec_path()
  local version = require("airlock").VERSION
  return "rockspec/airlock-sandbox-" .. tostring(version) .. "-1.rockspec"
end

describe("the rockspec", function()
  it("carries the SDK's version (airlock.VERSION, the C core's) and declares lua-cjson", function()
    local airlock = require "airlock"
    assert.is_string(airlock.VERSION)
    local spec = load_rockspec(rockspec_path())
    assert.are.equal(airlock.VERSION .. "-1", spec.version)
    assert.are.equal(airlock.VERSION, require("airlock.core")._VERSION)
    -- loaded under a relative name (as inside a .src.rock): the release tarball beside it
    local name = "airlock-sandbox-" .. airlock.VERSION
    assert.are.same({ url = "file://" .. name .. ".tar.gz", dir = name }, spec.source)
    -- loaded under its absolute name in a checkout (as LuaRocks does): make dist's tarball
    local top = proc.output("pwd"):gsub("%s+$", "")
    assert.are.equal("file://" .. top .. "/build/dist/" .. name .. ".tar.gz",
      load_rockspec(top .. "/" .. rockspec_path()).source.url)
    local deps = table.concat(spec.dependencies, ",")
    assert.is_truthy(deps:find("lua-cjson", 1, true), deps)
  end)

  it("installs every Lua module of lua/", function()
    local spec = load_rockspec(rockspec_path())
    local mapped = {}
    for _, src in pairs(spec.build.modules) do
      if type(src) == "string" then mapped[src] = true end
    end
    local missing = {}
    for file in proc.output("find lua -name '*.lua' | sort"):gmatch("[^\n]+") do
      if not mapped[file] then missing[#missing + 1] = file end
    end
    assert.are.same({}, missing)
  end)
end)

-- Installs rock (a path) into tree with luarocks offline, loads the SDK from that tree alone
-- and checks what it reports. rock_version: "0.1.0-1".
local function install_and_load(rock, tree)
  -- any download would go to a proxy that is not there: offline or failing
  local offline = "http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 "
  local rc, out = run("cd " .. q(rock:match("^(.*)/")) .. " && " .. offline .. "luarocks --lua-version=" ..
    lua_version .. " install --deps-mode=none --tree=" .. q(tree) .. " ./" .. q(rock:match("[^/]+$")))
  assert.are.equal(0, rc, out)
  local rock_version = rock:match("airlock%-sandbox%-(.+)%.src%.rock$")
  assert.truthy(out:find("airlock-sandbox " .. rock_version .. " is now installed", 1, true), out)

  -- The dependency on lua-cjson is declared (and, with --deps-mode=none, not fetched).
  rc, out = run("luarocks --lua-version=" .. lua_version .. " --tree=" .. q(tree) ..
    " show --deps airlock-sandbox")
  assert.are.equal(0, rc, out)
  assert.truthy(out:find("lua-cjson", 1, true), out)

  -- Load from the rock tree only (plus the system paths for lua-cjson).
  local lpath = tree .. "/share/lua/" .. lua_version .. "/?.lua;" ..
    tree .. "/share/lua/" .. lua_version .. "/?/init.lua;;"
  local cpath = tree .. "/lib/lua/" .. lua_version .. "/?.so;;"
  local probe = [[local a = require "airlock"; local core = require "airlock.core"
    local tools = require "airlock.tools"; local t = require "airlock.transport".load("curl")
    print(a.VERSION, core._VERSION, t.name, #tools.openai_tools(), #require("airlock.mcp").list_tools())]]
  rc, out = run("cd / && LUA_PATH=" .. q(lpath) .. " LUA_CPATH=" .. q(cpath) .. " " ..
    interpreter .. " -e " .. q(probe))
  assert.are.equal(0, rc, out)
  local version, core_version, transport, ntools, nmcp = out:match("^(%S+)%s+(%S+)%s+(%S+)%s+(%d+)%s+(%d+)")
  assert.are.equal(rock_version, version and version .. "-1", out)
  assert.are.equal(version, core_version)
  assert.are.equal("curl", transport)
  assert.are.equal("4", ntools)
  assert.are.equal("12", nmcp) -- the reference's nine, run_python, snapshot and restore
  -- The MCP server script is installed as a command.
  assert.truthy(io.open(tree .. "/bin/airlock-mcp", "r"), "bin/airlock-mcp not installed")
end

-- A copy of the sources in work (so that nothing is built in the checkout), with `make dist`
-- run there; the path of its .src.rock.
local function dist_in(work)
  local rc, out = run("cp -r Makefile README.md SECURITY.md CONTRIBUTING.md rockspec lua bin docs examples "
    .. q(work) .. " && mkdir -p " .. q(work .. "/src") .. " && cp -r src/core " .. q(work .. "/src/"))
  assert.are.equal(0, rc, out)
  rc, out = run("cd " .. q(work) .. " && make -s dist BUILD=build")
  assert.are.equal(0, rc, out)
  local rock = out:match("dist: (%S+%.src%.rock)")
  assert.truthy(rock, out)
  return work .. "/" .. rock
end

-- The names in a zip file.
local function entries(zip)
  local names = {}
  for name in proc.output("unzip -Z1 " .. q(zip)):gmatch("[^\n]+") do names[#names + 1] = name end
  table.sort(names)
  return names
end

describe("make dist", function()
  local work

  before_each(function() work = proc.make_temp_dir() end)
  after_each(function() proc.remove_tree(work) end)

  it("makes a .src.rock of the rockspec and the release tarball that installs offline #slow", function()
    local rock = dist_in(work)
    local name = "airlock-sandbox-" .. require("airlock").VERSION
    assert.are.same({ name .. "-1.rockspec", name .. ".tar.gz" }, entries(rock))
    -- the tarball holds the SDK's files only (src/core, lua, bin, docs, examples, ...): no
    -- server, specs or benches
    local listed = proc.output("tar -tzf " .. q(work .. "/build/dist/" .. name .. ".tar.gz"))
    assert.truthy(listed:find(name .. "/src/core/core.c", 1, true), listed)
    assert.is_nil(listed:find(name .. "/src/server/", 1, true))
    assert.is_nil(listed:find(name .. "/spec/", 1, true))
    install_and_load(rock, work .. "/tree")
  end)
end)

describe("luarocks pack", function()
  local work

  before_each(function() work = proc.make_temp_dir() end)
  after_each(function() proc.remove_tree(work) end)

  it("packs rockspec/... after make dist into the same small rock, offline, that installs #slow", function()
    local dist_rock = dist_in(work)
    local out_dir = work .. "/packed"
    local rc, out = run("mkdir -p " .. q(out_dir) .. " && cd " .. q(out_dir) ..
      " && http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 luarocks --lua-version=" .. lua_version ..
      " pack " .. q(work .. "/" .. rockspec_path()))
    assert.are.equal(0, rc, out)
    local rock = out:match("Packed: (%S+%.src%.rock)")
    assert.truthy(rock, out)
    assert.are.same(entries(dist_rock), entries(rock))
    install_and_load(rock, work .. "/tree")
  end)
end)

describe("luarocks make", function()
  local work

  before_each(function() work = proc.make_temp_dir() end)
  after_each(function() proc.remove_tree(work) end)

  it("builds a checkout offline, with no missing dependency once LuaRocks knows Debian's lua-cjson #slow", function()
    -- README's one-time setting (`luarocks config rocks_provided.lua-cjson ...`), in a config of its own
    proc.write_file(work .. "/config.lua", 'rocks_provided = { ["lua-cjson"] = "2.1.0-1" }\n')
    local rc, out = run("cp -r rockspec lua bin docs examples " .. q(work) .. " && mkdir -p " .. q(work .. "/src") ..
      " && cp -r src/core " .. q(work .. "/src/") .. " && cd " .. q(work) .. " && LUAROCKS_CONFIG=" ..
      q(work .. "/config.lua") .. " http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 " ..
      "luarocks --lua-version=" .. lua_version .. " --tree=" .. q(work .. "/tree") .. " make " .. q(rockspec_path()))
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("is now installed", 1, true), out)
    assert.is_nil(out:find("Missing dependencies", 1, true), out)
    assert.truthy(out:find("lua-cjson >= 2.1.0 (2.1.0-1 provided by VM)", 1, true), out)
  end)
end)
