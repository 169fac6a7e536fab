-- Transport parity in nginx (issue 17 item 2): support/parity.lua's cases (the same calls,
-- bounds and errors as spec/integration/transport_parity_spec.lua runs through curl and uv)
-- through the cosocket transport in a real nginx, with the same expected outcome. verify =
-- "ca.pem" works there once the host declares the file lua_ssl_trusted_certificate names;
-- any other CA file raises a ValidationError at the call, before any connection.
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local tlsproxy = require "support.tlsproxy"
local nginx = require "support.hosts.nginx"
local ngx_eval = require "support.hosts.nginx_eval"
local parity = require "support.parity"

describe("transport parity: the cosocket transport in nginx", function()
  local server, bad, proxy, srv

  setup(function()
    server = airlockd.start()
    bad = badserver.start()
    proxy = tlsproxy.start(server.port)
    srv = nginx.start({
      env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme, BAD_URL = bad.url,
              TLS_URL = proxy.localhost_url, CA = proxy.ca, OTHER_CA = proxy.other_ca },
      http = "lua_ssl_trusted_certificate " .. proxy.ca .. ";",
      server = ngx_eval.LOCATION,
    })
  end)
  teardown(function()
    if srv then nginx.assert_no_crashes(nginx.stop(srv)) end
    if proxy then tlsproxy.stop(proxy) end
    if bad then badserver.stop(bad) end
    if server then airlockd.stop(server) end
  end)

  it("refuses verify = a CA file nginx was not declared to trust, at the call", function()
    local ok, err = ngx_eval.try(srv, [[
      return require("airlock").attach("sbx_0123456789ab",
        { base_url = os.getenv("TLS_URL"), verify = os.getenv("CA"), max_retries = 0 }):health()
    ]])
    assert.is_false(ok)
    assert.truthy(err:find('verify = "' .. proxy.ca .. '" cannot be honoured in nginx', 1, true), err)
    assert.truthy(err:find("the SDK was not told which file that is", 1, true), err)
    assert.truthy(err:find('set_trusted_certificate("' .. proxy.ca .. '")', 1, true), err)
    -- declared: another file is still refused, before any connection
    local out = ngx_eval.eval(srv, [[
      local t = require "airlock.transport.ngx"
      t.set_trusted_certificate(os.getenv("CA"))
      local before = t:stats().connects
      local ok, e = pcall(function()
        return require("airlock").attach("sbx_0123456789ab",
          { base_url = os.getenv("TLS_URL"), verify = os.getenv("OTHER_CA"), max_retries = 0 }):health()
      end)
      t.set_trusted_certificate(nil)
      return { ok = ok, class = e.name, message = e.message, connects = t:stats().connects - before }
    ]])
    assert.is_false(out.ok)
    assert.are.equal("ValidationError", out.class)
    assert.truthy(out.message:find("that is " .. proxy.ca .. ", another file", 1, true), out.message)
    assert.are.equal(0, out.connects)
  end)

  it("gives the expected outcome of every parity case", function()
    local out = ngx_eval.eval(srv, string.format([[
      require("airlock.transport.ngx").set_trusted_certificate(os.getenv("CA"))
      local out = require("support.parity").run({ url = os.getenv("SANDBOX_API_URL"),
        key = os.getenv("SANDBOX_API_KEY"), bad_url = os.getenv("BAD_URL"), tag = %q,
        tls_url = os.getenv("TLS_URL"), ca = os.getenv("CA") })
      require("airlock.transport.ngx").set_trusted_certificate(nil)
      return out
    ]], "ngx"), 300)
    for case, want in pairs(parity.expected("ngx")) do
      assert.are.same(want, out[case], "ngx: " .. case)
    end
    for _, mode in ipairs({ "big:" .. (parity.LOWERED + 1), "bigchunked:" .. (parity.LOWERED * 5),
                            "big:" .. (parity.DEFAULT + 1) }) do
      assert.are.equal(1, badserver.count(bad, mode .. ":ngx"), mode)
    end
  end)
end)
