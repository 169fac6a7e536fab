-- luacheck: max line length 160
-- Egress end to end and offline (issue 12, contract 1.2, 1.7, 1.9, 2.8): a real airlockd whose
-- proxy reaches loopback stand-ins of pypi.org, files.pythonhosted.org and registry.npmjs.org
-- through the test-only host map and CA (support.egress_upstream), with real pip and npm in
-- real gVisor sandboxes. Lua 5.1-compatible.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local egress = require "support.egress"
local http_client = require "support.http_client"
local proc = require "support.proc"
local upstream = require "support.egress_upstream"

local PIP = "pip install --retries 1 --timeout 10 airlock-egress-probe"
local NPM = "npm install --no-audit --no-fund --no-update-notifier airlock-egress-probe"

local function is_allow(e, host)
  return e.decision == "allow" and e.host == host and e.port == 443 and e.ip == "127.0.0.1" and
    type(e.bytes_up) == "number" and e.bytes_up > 0 and type(e.bytes_down) == "number" and e.bytes_down > 0
end

describe("egress end to end", function()
  local ctx, server, key, log_dir

  lazy_setup(function()
    log_dir = proc.make_temp_dir() .. "/egress logs"
    ctx = egress.start({ env = { SANDBOX_EGRESS_LOG_DIR = log_dir } })
    server, key = ctx.server, ctx.key
  end)

  lazy_teardown(function()
    if ctx then egress.stop(ctx) end
    proc.remove_tree((log_dir:gsub("/egress logs$", "")))
  end)

  it("pip installs a wheel with egress {'pypi'} and the package imports; the log has the two allowed tunnels", function()
    local sid = egress.session(server, key, { "pypi" })
    local r = egress.exec(server, key, sid, PIP .. " && python3 -c 'import airlock_egress_probe as m; print(m.VALUE)'")
    assert.are.equal(0, r.exit_code, r.output)
    assert.truthy(r.stdout:find("Successfully installed airlock-egress-probe-0.1.0\negress works\n", 1, true), r.output)
    -- the package landed in the workspace and imports in a later command too
    assert.are.equal("egress works\n", egress.exec(server, key, sid, "python3 -c 'import airlock_egress_probe as m; print(m.VALUE)'").stdout)
    local events = egress.events(server, key, sid)
    assert.are.equal(2, #events, cjson.encode(events))
    -- logged as each tunnel closed: when pip exits, in no fixed order
    if events[1].host ~= "pypi.org" then events[1], events[2] = events[2], events[1] end
    assert.is_true(is_allow(events[1], "pypi.org"), cjson.encode(events[1]))
    assert.is_true(is_allow(events[2], "files.pythonhosted.org"), cjson.encode(events[2]))
    for _, e in ipairs(events) do
      assert.are.equal(sid, e.session)
      assert.are.equal("acme", e.tenant)
      assert.is_nil(e.reason)
      assert.is_nil(e.ips)
      assert.are.equal("number", type(e.duration_ms))
      assert.are.equal(e.ts, tonumber(string.format("%.3f", e.ts))) -- 3 decimals
      local keys = {}
      for k in pairs(e) do keys[#keys + 1] = k end
      table.sort(keys)
      assert.are.same({ "bytes_down", "bytes_up", "decision", "duration_ms", "host", "ip", "port", "session", "tenant", "ts" }, keys)
    end
  end)

  it("npm installs a package with egress {'npm'} and node requires it", function()
    local sid = egress.session(server, key, { "npm" })
    local r = egress.exec(server, key, sid, NPM .. " && node -e 'console.log(require(\"airlock-egress-probe\"))'")
    assert.are.equal(0, r.exit_code, r.output)
    assert.truthy(r.stdout:find("npm egress works\n", 1, true), r.output)
    local events = egress.events(server, key, sid)
    assert.truthy(#events >= 1, cjson.encode(events))
    for _, e in ipairs(events) do assert.is_true(is_allow(e, "registry.npmjs.org"), cjson.encode(e)) end
  end)

  it("pip without the pypi preset and npm without the npm preset fail with the proxy's 403 and a deny event", function()
    local sid = egress.session(server, key, { "npm" })
    local r = egress.exec(server, key, sid, PIP)
    assert.are_not.equal(0, r.exit_code)
    assert.truthy(r.stderr:find("Tunnel connection failed: 403 Forbidden", 1, true), r.output)
    local events = egress.events(server, key, sid)
    assert.truthy(#events >= 1)
    for _, e in ipairs(events) do
      assert.are.same({ decision = "deny", host = "pypi.org", port = 443, reason = "host not on allowlist", session = sid,
        tenant = "acme", ts = e.ts, duration_ms = e.duration_ms }, e)
    end

    sid = egress.session(server, key, { "pypi" })
    r = egress.exec(server, key, sid, NPM)
    assert.are_not.equal(0, r.exit_code)
    assert.truthy(r.stderr:find("E403", 1, true), r.output)
    assert.truthy(r.stderr:find("403 Forbidden - GET https://registry.npmjs.org/airlock-egress-probe", 1, true), r.output)
    events = egress.events(server, key, sid)
    assert.truthy(#events >= 1)
    for _, e in ipairs(events) do
      assert.are.same({ "deny", "registry.npmjs.org", "host not on allowlist" }, { e.decision, e.host, e.reason })
    end
  end)

  it("keeps the JSON lines in SANDBOX_EGRESS_LOG_DIR, the same events the API returns, after the session too", function()
    local sid = egress.session(server, key, { "pypi" })
    egress.exec(server, key, sid, "curl -sS -o /dev/null https://pypi.org/simple/airlock-egress-probe/; sleep 1; curl -sS https://example.org/ 2>&1; true")
    local events = egress.events(server, key, sid)
    assert.are.same({ "allow", "deny" }, { events[1].decision, events[2].decision })
    local path = log_dir .. "/" .. sid .. ".jsonl"
    local lines = {}
    for line in (proc.read_file(path) or ""):gmatch("[^\n]+") do lines[#lines + 1] = cjson.decode(line) end
    assert.are.same(events, lines)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    assert.truthy(proc.read_file(path)) -- the file outlives the session
    local r = http_client.request(server, "GET", "/v1/sessions/" .. sid .. "/egress", { key = key })
    assert.are.equal(404, r.status) -- the route needs a live session
  end)

  it("answers ?limit= as the contract says: default 200, clamped to 1..1000, oldest first, 422 for a non-integer", function()
    local sid = egress.session(server, key, { "pypi" })
    egress.exec(server, key, sid, "for i in 1 2 3 4 5; do curl -sS https://deny$i.example/ >/dev/null 2>&1; done; true")
    local all = egress.events(server, key, sid)
    assert.are.equal(5, #all)
    for i, e in ipairs(all) do assert.are.equal("deny" .. i .. ".example", e.host) end
    assert.are.same({ all[4], all[5] }, egress.events(server, key, sid, 2))
    assert.are.same({ all[5] }, egress.events(server, key, sid, 0))
    assert.are.same({ all[5] }, egress.events(server, key, sid, -7))
    assert.are.same(all, egress.events(server, key, sid, 100000))
    local r = http_client.request(server, "GET", "/v1/sessions/" .. sid .. "/egress?limit=ten", { key = key })
    assert.are.equal(422, r.status)
    assert.are.equal("int_parsing", r.json.detail[1].type)
    r = http_client.request(server, "GET", "/v1/sessions/" .. sid .. "/egress", { key = ctx.other })
    assert.are.equal(403, r.status)
    assert.are.equal('{"detail":"Forbidden: Access denied to this session"}', r.body)
  end)

  it("gives a session without egress no network at all: --network=none, no proxy variables, an empty log", function()
    local sid = egress.session(server, key, {})
    local r = egress.exec(server, key, sid, "env | grep -ci proxy; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; " ..
      "curl -sS --max-time 5 https://pypi.org/ 2>&1; true")
    assert.are.equal("0\nlo\ncurl: (6) Could not resolve host: pypi.org\n", r.stdout)
    assert.are.same({}, egress.events(server, key, sid))
  end)

  it("gives an egress sandbox eth0 10.0.2.1/31 and lo only, and the contract's proxy settings with a signed pass", function()
    local sid = egress.session(server, key, { "pypi" })
    local r = egress.exec(server, key, sid, "env | grep -i _proxy= | sort; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort; " ..
      "ip -4 -o addr show eth0 | awk '{print $4}'; ip route | grep -v ' dev lo '; ip route | grep -c default")
    local pass = r.stdout:match("HTTPS_PROXY=http://" .. sid .. ":(%x+)@10%.0%.2%.0:3128\n")
    assert.truthy(pass, r.stdout)
    assert.are.equal(32, #pass)
    local url = "http://" .. sid .. ":" .. pass .. "@10.0.2.0:3128"
    assert.are.equal("HTTPS_PROXY=" .. url .. "\nHTTP_PROXY=" .. url .. "\nhttp_proxy=" .. url .. "\nhttps_proxy=" .. url ..
      "\neth0\nlo\n10.0.2.1/31\n10.0.2.0/31 dev eth0 proto unspec scope link \n0\n", r.stdout)
    -- the same pass on the next run (it is the session's), never in airlockd's log
    assert.truthy(egress.exec(server, key, sid, "echo $HTTPS_PROXY").stdout:find(pass, 1, true))
    assert.is_nil(airlockd.log(server):find(pass, 1, true))
  end)
end)

describe("egress settings", function()
  local function start_fails(env)
    local ok, err = pcall(airlockd.start, { env = env })
    if ok then airlockd.stop(err) end
    assert.is_false(ok)
    return tostring(err)
  end

  it("refuses the test-only host map and CA unless AIRLOCK_TEST_EGRESS=1", function()
    local err = start_fails({ AIRLOCK_TEST_EGRESS_MAP = "pypi.org=127.0.0.1:4443" })
    assert.truthy(err:find("airlockd: invalid configuration: AIRLOCK_TEST_EGRESS_MAP is a test-only setting " ..
      "(it bypasses DNS and the address checks and trusts a private CA); refused unless AIRLOCK_TEST_EGRESS=1", 1, true), err)
    err = start_fails({ AIRLOCK_TEST_EGRESS_CA = "/etc/ssl/certs/ca-certificates.crt", AIRLOCK_TEST_EGRESS = "0" })
    assert.truthy(err:find("AIRLOCK_TEST_EGRESS_CA is a test-only setting", 1, true), err)
    err = start_fails({ AIRLOCK_TEST_EGRESS = "yes" })
    assert.truthy(err:find("AIRLOCK_TEST_EGRESS: must be 1 or 0, got 'yes'", 1, true), err)
    err = start_fails({ AIRLOCK_TEST_EGRESS = "1", AIRLOCK_TEST_EGRESS_MAP = "pypi.org=localhost:4443" })
    assert.truthy(err:find("AIRLOCK_TEST_EGRESS_MAP: each entry must look like host=ip:port, got 'pypi.org=localhost:4443'", 1, true), err)
  end)

  it("refuses bad SANDBOX_EGRESS_DNS and bounds with a message naming the variable", function()
    local err = start_fails({ SANDBOX_EGRESS_DNS = "not an address" })
    assert.truthy(err:find("SANDBOX_EGRESS_DNS: expected ip[:port][,ip[:port]...], got 'not an address'", 1, true), err)
    err = start_fails({ SANDBOX_EGRESS_MAX_TUNNELS = "0" })
    assert.truthy(err:find("SANDBOX_EGRESS_MAX_TUNNELS: must be a whole number of tunnels from 1 to 100000, got '0'", 1, true), err)
    err = start_fails({ SANDBOX_EGRESS_IDLE_SECONDS = "5s" })
    assert.truthy(err:find("SANDBOX_EGRESS_IDLE_SECONDS: must be a whole number of seconds from 1 to 86400, got '5s'", 1, true), err)
    err = start_fails({ SANDBOX_EGRESS_MAX_TUNNELS_TOTAL = "900000" })
    assert.truthy(err:find("SANDBOX_EGRESS_MAX_TUNNELS_TOTAL=900000 needs 1801024 open files", 1, true), err)
  end)

  it("works without the test-only setting: names resolve through SANDBOX_EGRESS_DNS and loopback answers are refused", function()
    local up = upstream.start()
    local server = airlockd.start({ env = { SANDBOX_EGRESS_DNS = "127.0.0.1:" .. up.dns,
      SANDBOX_EGRESS_POLICY = cjson.encode({ ["*"] = { "loopback.test" } }) } })
    local ok, err = pcall(function()
      assert.is_nil(airlockd.log(server):find("TEST-ONLY", 1, true))
      local sid = egress.session(server, server.tenants.acme, { "loopback.test" })
      local r = egress.exec(server, server.tenants.acme, sid, "curl -sS https://loopback.test/ 2>&1; true")
      assert.are.equal("curl: (56) CONNECT tunnel failed, response 403\n", r.stdout)
      local e = egress.events(server, server.tenants.acme, sid)[1]
      assert.are.same({ "deny", "loopback.test", "resolves to a private or reserved address", { "127.0.0.1" } },
        { e.decision, e.host, e.reason, e.ips })
    end)
    airlockd.stop(server)
    upstream.stop(up)
    assert(ok, err)
  end)
end)
