-- TLS against a real endpoint: nginx on loopback terminating TLS in front of airlockd, with
-- a private CA made by the spec (spec/support/tlsproxy.lua). Certificates are verified by
-- default; verify = "<ca file>" trusts a private CA; verify = false or
-- SANDBOX_API_INSECURE=1 turns verification off.
local airlock = require "airlock"
local core = require "airlock.core"
local airlockd = require "support.airlockd"
local tlsproxy = require "support.tlsproxy"
local proc = require "support.proc"


local expect_error = require "support.expect_error"

local function have(cmd)
  return proc.run("command -v " .. cmd .. " >/dev/null 2>&1")
end

describe("TLS", function()
  local srv, proxy, key

  setup(function()
    assert(have("nginx") and have("openssl"), "nginx and openssl are needed (make deps)")
    srv = airlockd.start()
    key = srv.tenants.acme
    proxy = tlsproxy.start(srv.port)
  end)

  teardown(function()
    local leftover, open
    if srv then
      local ok, sessions = pcall(airlock.list_sessions, { api_key = key, base_url = srv.url })
      leftover = ok and #sessions or tostring(sessions)
    end
    if proxy then
      assert.is_true(core.close_connections())
      for _ = 1, 40 do
        open = tlsproxy.active_connections(proxy)
        if open == 0 then break end
        proc.sleep(0.05)
      end
      tlsproxy.stop(proxy)
    end
    if srv then airlockd.stop(srv) end
    assert.are.equal(0, leftover)   -- no session left on the server
    assert.are.equal(0, open)       -- no client connection left open on nginx
  end)

  local function run_session(opts)
    return airlock.with(opts, function(sbx)
      sbx.files:write("tls.txt", "over tls")
      assert.are.equal("over tls", sbx.files:read("tls.txt"))
      local r = sbx:run("cat tls.txt")
      assert.are.equal("over tls", r.stdout)
      return sbx.tenant_id
    end)
  end

  it("verifies by default: an unknown CA is an APIConnectionError naming the problem", function()
    local err = expect_error("APIConnectionError", airlock.sandbox, { api_key = key, base_url = proxy.url })
    assert.is_nil(err.status)
    assert.is_truthy(err.message:find("Could not reach " .. proxy.url .. ": ", 1, true), err.message)
    assert.is_truthy(err.message:lower():find("certificate", 1, true), err.message)
    assert.is_nil(err.message:find(key, 1, true))
    -- a GET fails the same way, and is not retried (the answer would never change)
    local before = airlock.stats().retries
    err = expect_error("APIConnectionError", airlock.list_sessions, { api_key = key, base_url = proxy.url })
    assert.is_truthy(err.message:lower():find("certificate", 1, true), err.message)
    assert.are.equal(before, airlock.stats().retries)
  end)

  it("verify = <CA file> trusts the private CA: create, write, run, close", function()
    assert.are.equal("acme", run_session({ api_key = key, base_url = proxy.url, verify = proxy.ca }))
    -- the certificate names localhost too
    assert.are.equal("acme", run_session({ api_key = key, base_url = proxy.localhost_url, verify = proxy.ca }))
  end)

  it("verify = false turns verification off", function()
    assert.are.equal("acme", run_session({ api_key = key, base_url = proxy.url, verify = false }))
  end)

  it("SANDBOX_API_INSECURE=1 turns verification off (environment only)", function()
    -- the interpreter running this spec (lua5.4, luajit, or the ASan host of make asan-test)
    local lua = (arg and arg[-1]) or (rawget(_G, "jit") and "luajit") or "lua5.4"
    local script = proxy.dir .. "/insecure.lua"
    proc.write_file(script, [[
      local airlock = require "airlock"
      local id
      -- caught and printed: PUC Lua 5.1's interpreter cannot print an uncaught error object
      local ok, out = pcall(airlock.with, nil, function(sbx)
        id = sbx.session_id
        return sbx:run("echo insecure").stdout
      end)
      if not ok then io.write(tostring(out)) os.exit(1) end
      io.write(out, id)
    ]])
    local q = proc.shell_quote
    local cmd = string.format("SANDBOX_API_INSECURE=1 SANDBOX_API_URL=%s SANDBOX_API_KEY=%s %s %s 2>&1",
      q(proxy.url), q(key), q(lua), q(script))
    local out = proc.output(cmd)
    assert.is_truthy(out:match("^insecure\nsbx_%x+$"), out)
    -- and without it, the same environment fails verification
    cmd = cmd:gsub("^SANDBOX_API_INSECURE=1 ", "SANDBOX_API_INSECURE=0 ")
    out = proc.output(cmd)
    assert.is_truthy(out:find("APIConnectionError", 1, true), out)
  end)

  it("a certificate for another host fails, even with the right CA", function()
    local err = expect_error("APIConnectionError", airlock.sandbox,
      { api_key = key, base_url = proxy.wrong_url, verify = proxy.ca })
    local msg = err.message:lower()
    assert.is_truthy(msg:find("127.0.0.1", 1, true) and (msg:find("match", 1, true) or msg:find("name", 1, true)),
      err.message)
    -- with verification off it connects (the name check is part of verification)
    assert.are.equal("acme", run_session({ api_key = key, base_url = proxy.wrong_url, verify = false }))
  end)

  it("a CA path that does not exist is a clear error before any request", function()
    local before = core.stats().transfers
    local missing = proxy.dir .. "/no-such-ca.pem"
    local err = expect_error("ValidationError", airlock.sandbox,
      { api_key = key, base_url = proxy.url, verify = missing })
    assert.is_truthy(err.message:find("verify", 1, true), err.message)
    assert.is_truthy(err.message:find(missing, 1, true), err.message)
    assert.are.equal(before, core.stats().transfers)
    -- a file that is not a CA certificate fails at the first request, naming the problem
    local not_ca = proxy.dir .. "/nginx.conf"
    err = expect_error("APIConnectionError", airlock.sandbox,
      { api_key = key, base_url = proxy.url, verify = not_ca })
    assert.is_truthy(err.message:lower():find("cert", 1, true), err.message)
  end)
end)
