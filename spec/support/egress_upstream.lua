-- Starts spec/support/egress_upstream.py (loopback stand-ins for pypi.org,
-- files.pythonhosted.org, registry.npmjs.org, a stalled upstream and a DNS server; see its
-- header) and builds the environment an airlockd needs to use them: the test-only host map
-- and CA, the fake DNS, an egress policy. Lua 5.1-compatible.
local cjson = require "cjson"
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

local function script_path()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return (src:gsub("egress_upstream%.lua$", "egress_upstream.py"))
end

-- Returns the server: { dir, pid, port, and as text https, sink, closed, dns (ports), ca,
-- wheel, pip_package, npm_package }.
function M.start()
  local dir = proc.make_temp_dir()
  local server = proc.start_server({
    name = "egress_upstream", dir = dir, log = dir .. "/log", wait = 60, give_up_on_exit = true,
    command = string.format("python3 %s %s", q(script_path()), q(dir)),
  })
  local info = cjson.decode(assert(proc.read_file(dir .. "/info.json")))
  -- ports as text: lua-cjson decodes every number as a float on Lua 5.3+ ("8443.0")
  for k, v in pairs(info) do server[k] = type(v) == "number" and string.format("%d", v) or v end
  return server
end

M.stop = proc.stop_server

-- Host names the specs use, mapped by airlockd's test-only setting: the three registries to
-- the HTTPS stand-in, sink.test to the stalled upstream, refused.test to a closed port.
function M.test_map(up)
  local https = "127.0.0.1:" .. up.https
  return table.concat({
    "pypi.org=" .. https, "files.pythonhosted.org=" .. https, "registry.npmjs.org=" .. https,
    "sink.test=127.0.0.1:" .. up.sink, "refused.test=127.0.0.1:" .. up.closed,
  }, ",")
end

-- The environment of an airlockd that uses these stand-ins. policy: the "*" egress policy
-- (a list), default the presets and every test name.
function M.env(up, policy)
  policy = policy or { "pypi", "npm", "sink.test", "refused.test", "loopback.test", "metadata.test",
    "private.test", "v6loopback.test", "mapped.test", "mixed.test", "cgnat.test", "nxdomain.test",
    "*.wild.test", "10.9.8.7" }
  return {
    AIRLOCK_TEST_EGRESS = "1",
    AIRLOCK_TEST_EGRESS_MAP = M.test_map(up),
    AIRLOCK_TEST_EGRESS_CA = up.ca,
    SANDBOX_EGRESS_DNS = "127.0.0.1:" .. up.dns,
    SANDBOX_EGRESS_POLICY = cjson.encode({ ["*"] = policy }),
  }
end

return M
