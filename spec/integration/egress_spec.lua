-- luacheck: max line length 150
-- The SDK's egress surface against an airlockd whose proxy reaches offline stand-ins of the
-- registries (support.egress): sbx:egress_log() and sbx:egress_policy(), a package installed
-- through airlock.tools' run_command, and bin/airlock-mcp's egress_log tool showing the real
-- events. Lua 5.1-compatible (no <close>).
local cjson = require "cjson"
local airlock = require "airlock"
local tools = require "airlock.tools"
local egress = require "support.egress"
local proc = require "support.proc"

local PIP = "pip install --retries 1 airlock-egress-probe"

describe("the SDK's egress against airlockd", function()
  local ctx, opts

  setup(function()
    ctx = egress.start({ policy = { "pypi", "npm" } })
    opts = { base_url = ctx.server.url, api_key = ctx.key }
  end)
  teardown(function()
    if ctx then egress.stop(ctx) end
  end)

  it("installs a package with egress {'pypi'}, and egress_log() returns the real events, pypi.org first", function()
    local sbx = airlock.sandbox({ base_url = opts.base_url, api_key = opts.api_key, egress = { "pypi" } })
    local ok, err = pcall(function()
      assert.same({ "pypi.org", "files.pythonhosted.org" }, sbx.egress)
      assert.same({ "pypi.org", "files.pythonhosted.org", "registry.npmjs.org" }, sbx:egress_policy())
      assert.same({}, sbx:egress_log())
      local r = sbx:run(PIP .. " && python3 -c 'import airlock_egress_probe as m; print(m.VALUE)'", { timeout = 60 })
      assert.equal(0, r.exit_code, r.output)
      assert.truthy(r.stdout:find("egress works\n", 1, true))
      -- two tunnels, logged as they closed (pip's exit closes them in no fixed order)
      local events = sbx:egress_log()
      assert.equal(2, #events)
      table.sort(events, function(a, b) return a.host > b.host end)
      assert.same({ "allow", "pypi.org", 443, sbx.session_id, "acme" },
        { events[1].decision, events[1].host, events[1].port, events[1].session, events[1].tenant })
      assert.equal("files.pythonhosted.org", events[2].host)
      assert.truthy(events[2].bytes_down > 1000)
      local last = sbx:egress_log()[2]
      assert.same({ last }, sbx:egress_log({ limit = 1 }))
      assert.same({ last }, sbx:egress_log(1))
      -- a denied attempt
      r = sbx:run("curl -sS https://registry.npmjs.org/ 2>&1", { timeout = 30 })
      assert.equal("curl: (56) CONNECT tunnel failed, response 403\n", r.stdout)
      last = sbx:egress_log({ limit = 1 })[1]
      assert.same({ "deny", "registry.npmjs.org", "host not on allowlist" }, { last.decision, last.host, last.reason })
    end)
    sbx:close()
    assert(ok, err)
  end)

  it("lets a model install a package through airlock.tools' run_command", function()
    local sbx = airlock.sandbox({ base_url = opts.base_url, api_key = opts.api_key, egress = { "pypi" } })
    local ok, err = pcall(function()
      local out = tools.handle_tool_call(sbx, "run_command",
        { command = PIP .. " >/dev/null && python3 -c 'import airlock_egress_probe as m; print(m.VALUE)'", timeout_seconds = 60 })
      assert.equal("[STDOUT]:\negress works\n[EXIT CODE]: 0", out)
      local hosts = {}
      for i, e in ipairs(sbx:egress_log()) do hosts[i] = e.decision .. " " .. e.host end
      table.sort(hosts)
      assert.same({ "allow files.pythonhosted.org", "allow pypi.org" }, hosts)
    end)
    sbx:close()
    assert(ok, err)
  end)

  it("shows the real events in bin/airlock-mcp's egress_log tool", function()
    local state_dir = proc.make_temp_dir()
    local function call(id, name, args)
      return cjson.encode({ jsonrpc = "2.0", id = id, method = "tools/call", params = { name = name, arguments = args } })
    end
    local input = table.concat({
      cjson.encode({ jsonrpc = "2.0", id = 0, method = "initialize",
        params = { protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "spec", version = "1" } } }),
      call(1, "egress_log", { limit = 50 }),
      call(2, "run_command", { command = PIP .. " >/dev/null; curl -s https://registry.npmjs.org/ >/dev/null; true", timeout_seconds = 60 }),
      call(3, "egress_log", { limit = 50 }),
    }, "\n") .. "\n"
    local in_path = state_dir .. "/in"
    proc.write_file(in_path, input)
    local env = string.format("SANDBOX_API_URL=%s SANDBOX_API_KEY=%s AIRLOCK_STATE_DIR=%s AIRLOCK_EGRESS=pypi",
      proc.shell_quote(opts.base_url), proc.shell_quote(opts.api_key), proc.shell_quote(state_dir))
    local out = proc.output(string.format("env %s %s %s < %s 2>&1", env, proc.lua_interpreter(),
      proc.shell_quote(proc.repo_root() .. "/bin/airlock-mcp"), proc.shell_quote(in_path)))
    proc.remove_tree(state_dir)
    local answers = {}
    for line in out:gmatch("[^\n]+") do
      local msg = cjson.decode(line)
      answers[msg.id] = msg
    end
    local function text(id) return answers[id].result.content[1].text end
    assert.equal("No outbound connections yet.", text(1), out)
    local lines = {}
    for line in text(3):gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.equal(3, #lines, text(3))
    local pip = { lines[1], lines[2] } -- in the order pip's tunnels closed
    table.sort(pip)
    assert.matches("^allow  files%.pythonhosted%.org  [%d,]+ bytes in$", pip[1])
    assert.matches("^allow  pypi%.org  [%d,]+ bytes in$", pip[2])
    assert.equal("deny   registry.npmjs.org  (host not on allowlist)", lines[3])
  end)
end)
