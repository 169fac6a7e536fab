-- The cosocket transport (airlock.transport.ngx) in a real nginx with Debian's Lua module:
-- the SDK code a script runs (airlock.with, files, run, airlock.http, airlock.tools) runs
-- unchanged in content_by_lua without loading the C core; connections are kept alive and
-- reused across calls and requests (counted on the server), in pools that never mix hosts or
-- TLS settings; failures (garbage, truncation, resets, stalls, 429/503) end the way the curl
-- transport's do; chunked answers and the size bounds; phases without cosockets, host names
-- without a resolver and TLS verification fail with a message that says what to do.
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local http_client = require "support.http_client"
local proc = require "support.proc"
local tlsproxy = require "support.tlsproxy"
local nginx = require "support.hosts.nginx"
local ngx_eval = require "support.hosts.nginx_eval"

local LIMITS = '{"*": {"max_sessions": 64, "requests_per_minute": 100000, "max_concurrent_exec": 32}}'
-- bursts open dozens of sessions at once: small workspace disks keep them to a few hundred MB
-- of the host (each session's disk is allocated in full)
local SMALL_DISKS = "16"

local function contains(text, part)
  return type(text) == "string" and text:find(part, 1, true) ~= nil
end

describe("the cosocket transport in nginx", function()
  local server, bad, srv

  setup(function()
    server = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_WORKSPACE_QUOTA_MB = SMALL_DISKS } })
    bad = badserver.start()
    srv = nginx.start({
      env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme, BAD_URL = bad.url },
      server = ngx_eval.LOCATION .. [[
        location = /chunked {
          content_by_lua_block {
            ngx.header["Content-Type"] = "application/json"
            ngx.print('{"parts": [')
            ngx.flush(true)
            for i = 1, 50 do ngx.print(i, ","); ngx.flush(true) end
            ngx.print("0]}")
          }
        }
        location = /bigheader {
          content_by_lua_block { ngx.header["X-Big"] = string.rep("x", 70000); ngx.say("{}") }
        }
      ]],
    })
  end)

  teardown(function()
    local log = srv and nginx.stop(srv) or ""
    if bad then badserver.stop(bad) end
    if server then airlockd.stop(server) end
    nginx.assert_no_crashes(log)
    assert.are.equal(0, nginx.sleep0_warnings(log))
  end)

  it("runs a script's SDK code unchanged in content_by_lua, without the C core", function()
    local out = ngx_eval.eval(srv, [[
      local airlock = require "airlock"
      local http = require "airlock.http"
      local tools = require "airlock.tools"
      local out = airlock.with({}, function(sbx)
        sbx.files:write("hello.py", "print(6 * 7)")
        local r = sbx:run("python3 hello.py")
        return { stdout = r.stdout, exit_code = r.exit_code, read = sbx.files:read("hello.py"),
                 tool = tools.handle_tool_call(sbx, "run_command", '{"command": "echo from a tool"}') }
      end)
      local status, health = http.request{ url = os.getenv("SANDBOX_API_URL") .. "/healthz" }
      out.http = status .. " " .. health.status
      out.sessions = #airlock.list_sessions()
      out.transport = airlock.stats().transport
      out.core_loaded = package.loaded["airlock.core"] ~= nil
      return out
    ]])
    assert.are.same({ stdout = "42\n", exit_code = 0, read = "print(6 * 7)",
      tool = "[STDOUT]:\nfrom a tool\n[EXIT CODE]: 0", http = "200 healthy", sessions = 0,
      transport = "ngx", core_loaded = false }, out)
  end)

  it("reuses one connection for a session's calls and across requests (server-side count)", function()
    local code = [[
      local airlock = require "airlock"
      local before = airlock.stats()
      local sbx = airlock.sandbox{ base_url = os.getenv("BAD_URL"), api_key = "ok:ngx-keepalive" }
      for i = 1, 10 do sbx:run("echo " .. i) end
      sbx:close()
      local after = airlock.stats()
      return { connects = after.connects - before.connects, reused = after.reused - before.reused }
    ]]
    assert.are.same({ connects = 1, reused = 11 }, ngx_eval.eval(srv, code))
    assert.are.same({ connects = 0, reused = 12 }, ngx_eval.eval(srv, code))
    assert.are.equal(24, badserver.count(bad, "ok:ngx-keepalive"))
    assert.are.equal(1, badserver.connections(bad, "ok:ngx-keepalive"))
  end)

  it("keeps a pool per host: 127.0.0.1 and localhost never share a connection", function()
    local out = ngx_eval.eval(srv, [[
      local airlock = require "airlock"
      local port = os.getenv("BAD_URL"):match(":(%d+)$")
      local by_ip = airlock.attach("sbx_0123456789ab",
        { base_url = "http://127.0.0.1:" .. port, api_key = "ok:pool-ip" })
      local by_name = airlock.attach("sbx_0123456789ab",
        { base_url = "http://localhost:" .. port, api_key = "ok:pool-name" })
      local before = airlock.stats()
      for _ = 1, 4 do by_ip:usage(); by_name:usage() end
      local after = airlock.stats()
      return { connects = after.connects - before.connects, reused = after.reused - before.reused }
    ]])
    -- (the 127.0.0.1 pool may already hold a connection from the calls above)
    assert.are.equal(8, out.connects + out.reused)
    assert.is_true(out.connects <= 2)
    -- each pooled connection was last used by its own host's key: two connections, not one
    assert.are.equal(1, badserver.open(bad, "ok:pool-ip"))
    assert.are.equal(1, badserver.open(bad, "ok:pool-name"))
  end)

  -- One failing call against the misbehaving server: ok, error message, seconds taken.
  local function bad_call(key, call, opts)
    local t = os.time()
    local ok, err = ngx_eval.try(srv, string.format([[
      local airlock = require "airlock"
      local opts = { base_url = os.getenv("BAD_URL"), api_key = %q }
      for k, v in pairs(%s) do opts[k] = v end
      %s
    ]], key, opts or "{}", call))
    return ok, err, os.time() - t
  end

  local function open_after(key)
    local n
    for _ = 1, 40 do
      n = badserver.open(bad, key)
      if n == 0 then break end
      proc.sleep(0.05)
    end
    return n
  end

  it("ends garbage, truncated bodies and stalls in APIConnectionError and closes the connection", function()
    local ok, err = bad_call("garbage", "airlock.sandbox(opts)", "{ max_retries = 0 }")
    assert.is_false(ok)
    assert.is_true(contains(err, "APIConnectionError: Could not reach " .. bad.url
      .. ": not an HTTP response (it starts with \"THIS IS NOT HTTP??"), err)
    assert.are.equal(0, open_after("garbage"))

    ok, err = bad_call("truncated", "airlock.sandbox(opts)", "{ max_retries = 0 }")
    assert.is_false(ok)
    assert.is_true(contains(err, "the server closed the connection after 24 of 4096 body bytes"), err)
    assert.are.equal(1, badserver.count(bad, "truncated"))
    assert.are.equal(0, open_after("truncated"))

    local took
    ok, err, took = bad_call("stall", "airlock.sandbox(opts)", "{ timeout = 1 }")
    assert.is_false(ok)
    assert.is_true(contains(err, "timed out before answering (timeout 1000 ms)"), err)
    assert.is_true(took < 10, "a stalled POST took " .. took .. " s")
    assert.are.equal(1, badserver.count(bad, "stall"))   -- a POST that may have run is not sent again
    assert.are.equal(0, open_after("stall"))

    ok, err = bad_call("text500", "airlock.sandbox(opts)")
    assert.is_false(ok)
    assert.are.equal("SandboxError: Internal Server Error", err)
  end)

  it("retries GET after a dropped connection, never a POST; honours 429 and 503 with ngx.sleep", function()
    assert.is_true((bad_call("reset:1", "return airlock.attach('sbx_0123456789ab', opts):usage().method")))
    assert.are.equal(2, badserver.count(bad, "reset:1"))

    local ok, err = bad_call("reset:5", "airlock.sandbox(opts)")
    assert.is_false(ok)
    assert.is_true(contains(err, "APIConnectionError"), err)
    assert.are.equal(1, badserver.count(bad, "reset:5"))
    -- on a pooled connection that dies under a POST: not sent again either
    ok, err = bad_call("reset:6", [[
      airlock.attach("sbx_0123456789ab", { base_url = opts.base_url, api_key = "ok:prime" }):usage()
      return airlock.attach("sbx_0123456789ab", opts):run("echo once")
    ]])
    assert.is_false(ok)
    assert.is_true(contains(err, "(the POST was not sent again: it may have run)"), err)
    assert.are.equal(1, badserver.count(bad, "reset:6"))

    ok, err = bad_call("429:1:0", "return airlock.sandbox(opts).session_id")
    assert.is_true(ok, err)
    assert.are.equal(2, badserver.count(bad, "429:1:0"))
    ok, err = bad_call("503:1", "return airlock.sandbox(opts).session_id")
    assert.is_true(ok, err)
    assert.are.equal(2, badserver.count(bad, "503:1"))
  end)

  it("reads chunked answers and bounds header and body sizes", function()
    local out = ngx_eval.eval(srv, [[
      local http = require "airlock.http"
      local request = require "airlock.internal.request"
      local own = "http://127.0.0.1:" .. ngx.var.server_port
      local status, data, headers = http.request{ url = own .. "/chunked" }
      local out = { status = status, parts = #data.parts, te = headers["transfer-encoding"] }
      local ok, err = pcall(http.request, { url = own .. "/bigheader", max_retries = 0 })
      out.big_header = tostring(err)
      local saved = request.MAX_RESPONSE_BYTES
      request.MAX_RESPONSE_BYTES = 100
      ok, err = pcall(http.request, { url = own .. "/chunked", max_retries = 0 })
      request.MAX_RESPONSE_BYTES = saved
      out.big_body = tostring(err)
      return out
    ]])
    assert.are.equal(200, out.status)
    assert.are.equal(51, out.parts)
    assert.are.equal("chunked", out.te)
    assert.is_true(contains(out.big_header, "the response header is larger than 65536 bytes"), out.big_header)
    assert.is_true(contains(out.big_body, "the response body is larger than 100 bytes"), out.big_body)
  end)

  it("says how to resolve host names when nginx has no resolver (localhost needs none)", function()
    local ok, err = ngx_eval.try(srv, [[
      return require("airlock").attach("sbx_0123456789ab",
        { base_url = "http://airlock-test.invalid:9", max_retries = 0 }):health()
    ]])
    assert.is_false(ok)
    assert.is_true(contains(err, "cannot resolve \"airlock-test.invalid\": nginx has no resolver; add "
      .. "`resolver <DNS server address>;`"), err)
    local port = server.url:match(":(%d+)$")
    assert.are.equal("healthy", ngx_eval.eval(srv, [[
      local url = "http://localhost:]] .. port .. [["
      return require("airlock").attach("sbx_0123456789ab", { base_url = url }):health().status
    ]]))
  end)
end)

describe("the cosocket transport in phases without cosockets", function()
  local server

  setup(function() server = airlockd.start() end)
  teardown(function() if server then airlockd.stop(server) end end)

  it("raises an error naming the phase and the way out; a timer from there works", function()
    -- try(tag): one SDK call; its outcome goes to the shared dict under tag
    local TRY = [[
      function airlock_try(tag)
        local ok, err = pcall(function()
          return require("airlock").attach("sbx_0123456789ab"):health().status
        end)
        ngx.shared.probe:set(tag, ok and err or tostring(err))
      end
    ]]
    local results
    local log = nginx.with({
      env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme },
      shared_dicts = { probe = "1m" },
      http = "init_by_lua_block { " .. TRY .. " airlock_try('init') }\n" .. [[
        init_worker_by_lua_block {
          airlock_try("init_worker")
          ngx.timer.at(0, function() airlock_try("timer") end)
        }
      ]],
      server = [[
        location = /probe {
          set_by_lua_block $unused { airlock_try("set"); return "" }
          content_by_lua_block { airlock_try("content"); ngx.say("probed") }
          header_filter_by_lua_block { airlock_try("header_filter") }
          body_filter_by_lua_block { if ngx.arg[2] then airlock_try("body_filter") end }
          log_by_lua_block { airlock_try("log") }
        }
        location = /results {
          content_by_lua_block {
            local out = {}
            for _, k in ipairs(ngx.shared.probe:get_keys()) do out[k] = ngx.shared.probe:get(k) end
            ngx.say(require("cjson").encode(out))
          }
        }
      ]],
    }, function(srv)
      assert.are.equal("probed\n", http_client.request(srv, "GET", "/probe").body)
      proc.wait_until(10, function()
        results = require("cjson").decode(http_client.request(srv, "GET", "/results").body)
        return results.log ~= nil and results.timer ~= nil
      end, 0.1)
    end)
    nginx.assert_no_crashes(log)
    assert.are.equal("healthy", results.content)
    assert.are.equal("healthy", results.timer)
    for _, phase in ipairs({ "init", "init_worker", "set", "header_filter", "body_filter", "log" }) do
      local err = results[phase]
      assert.is_true(contains(err, "SandboxError: airlock: nginx has no cosockets in the " .. phase
        .. " phase (" .. phase .. "_by_lua*)"), phase .. ": " .. tostring(err))
      assert.is_true(contains(err, "ngx.timer.at(0, function() ... end)"), phase .. ": " .. tostring(err))
    end
    assert.is_true(contains(results.init, "init_by_lua runs in the master"), results.init)
  end)
end)

describe("the cosocket transport over TLS", function()
  local server, proxy, other_ca

  setup(function()
    server = airlockd.start()
    proxy = tlsproxy.start(server.port)
    other_ca = proxy.other_ca
  end)
  teardown(function()
    if proxy then tlsproxy.stop(proxy) end
    if server then airlockd.stop(server) end
  end)

  -- Runs fn(srv) in an nginx whose http block has `directives`.
  local function with_nginx(directives, fn)
    nginx.with({
      env = { SANDBOX_API_KEY = server.tenants.acme, TLS_URL = proxy.localhost_url, IP_URL = proxy.url,
              WRONG_URL = "https://localhost:" .. proxy.wrong_port, CA = proxy.ca },
      http = directives, server = ngx_eval.LOCATION,
    }, fn)
  end

  -- health() over TLS with the given verify (a Lua expression): ok, status or error. The
  -- CA file (env CA) is declared as the one lua_ssl_trusted_certificate names.
  local function health(srv, url_var, verify)
    return ngx_eval.try(srv, string.format([[
      require("airlock.transport.ngx").set_trusted_certificate(os.getenv("CA"))
      return require("airlock").attach("sbx_0123456789ab",
        { base_url = os.getenv(%q), verify = %s, max_retries = 1 }):health().status
    ]], url_var, verify))
  end

  it("verifies against lua_ssl_trusted_certificate, and says so when it is missing", function()
    with_nginx("", function(srv)
      local ok, err = health(srv, "TLS_URL", "nil")
      assert.is_false(ok)
      -- OpenSSL's reason ("20: unable to get local issuer certificate"), or, when
      -- lua-nginx-module reported the refused handshake as done, the transport's own words
      assert.is_true(contains(err, "TLS handshake with localhost:" .. proxy.port .. " failed: "), err)
      assert.is_true(contains(err, "nginx verifies against `lua_ssl_trusted_certificate` only"), err)
      -- a TLS failure is the same on every try: not retried
      assert.are.same({ retries = 0, requests = 1 }, ngx_eval.eval(srv,
        "local s = require('airlock').stats() return { retries = s.retries, requests = s.requests }"))
      assert.are.same({ true, "healthy" }, { health(srv, "TLS_URL", "false") })
    end)
  end)

  it("reports the failed verification on every new connection (50 in a row), never a closed one", function()
    -- lua-nginx-module loses the verification error of a handshake that completes without
    -- waiting (a few per cent of them): the transport tries such a handshake again
    with_nginx("", function(srv)
      local out = ngx_eval.eval(srv, [[
        local t = require "airlock.transport.ngx"
        local verified, other = 0, {}
        for _ = 1, 50 do
          local res, failure = t:send({ method = "GET", url = os.getenv("TLS_URL") .. "/healthz", headers = {} })
          local message = not res and failure.tls and failure.message
          if message and message:find("20: unable to get local issuer certificate", 1, true) then
            verified = verified + 1
          else
            other[#other + 1] = res and res.status or failure.message
          end
        end
        return { verified = verified, other = other }
      ]])
      assert.are.same({ verified = 50, other = {} }, out)
    end)
  end)

  it("accepts verify = the CA file that lua_ssl_trusted_certificate names, and checks host names", function()
    with_nginx("lua_ssl_trusted_certificate " .. proxy.ca .. ";", function(srv)
      assert.are.same({ true, "healthy" }, { health(srv, "TLS_URL", "nil") })
      assert.are.same({ true, "healthy" }, { health(srv, "TLS_URL", "os.getenv('CA')") })
      local ok, err = health(srv, "WRONG_URL", "true")
      assert.is_false(ok)
      assert.is_true(contains(err, "certificate host mismatch; the certificate is not for localhost")
        or contains(err, "the certificate may not be for localhost"), err)
      ok, err = health(srv, "IP_URL", "true")
      assert.is_false(ok)
      assert.is_true(contains(err, "nginx matches certificates against host names only"), err)
      -- one pool per verification setting: 4 calls, 2 handshakes
      local out = ngx_eval.eval(srv, [[
        local airlock = require "airlock"
        local before = airlock.stats()
        for _ = 1, 2 do
          for _, verify in ipairs({ true, false }) do
            airlock.attach("sbx_0123456789ab", { base_url = os.getenv("TLS_URL"), verify = verify }):health()
          end
        end
        local after = airlock.stats()
        return { handshakes = after.tls_handshakes - before.tls_handshakes, reused = after.reused - before.reused }
      ]])
      -- the verify = true pool is warm from the calls above; verify = false gets its own
      assert.are.same({ handshakes = 1, reused = 3 }, out)
    end)
  end)

  it("names the directive when the declared CA file is not the one nginx trusts", function()
    with_nginx("lua_ssl_trusted_certificate " .. other_ca .. ";", function(srv)
      local ok, err = health(srv, "TLS_URL", "os.getenv('CA')")
      assert.is_false(ok)
      assert.is_true(contains(err, "in nginx the server certificate is verified against the CA file of "
        .. "`lua_ssl_trusted_certificate`: check that it names " .. proxy.ca), err)
    end)
  end)
end)
