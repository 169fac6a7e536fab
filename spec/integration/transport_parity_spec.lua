-- Transport parity (issue 17 item 2): the same calls, bounds and errors through the libcurl
-- transport and the libuv transport (on luv) give the same outcome, the one
-- support/parity.lua expects of every transport; spec/hosts/ngx_parity_spec.lua runs the
-- same cases through the cosocket transport in nginx. Also: an answer over the bound is sent
-- once (never retried), and the C core fails a kept body past max_response_bytes with the
-- same words as airlock.internal.http1. Runs on Lua 5.4, LuaJIT and 5.1.
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local tlsproxy = require "support.tlsproxy"
local parity = require "support.parity"
local luv = require "luv"   -- loaded with the file, as the other specs that use it do

describe("transport parity", function()
  local srv, bad, proxy

  setup(function()
    srv = airlockd.start()
    bad = badserver.start()
    proxy = tlsproxy.start(srv.port)
  end)
  teardown(function()
    if proxy then
      require("airlock").close_connections()
      tlsproxy.stop(proxy)
    end
    if bad then badserver.stop(bad) end
    if srv then airlockd.stop(srv) end
  end)

  local function run(tag)
    return parity.run({ url = srv.url, key = srv.tenants.acme, bad_url = bad.url, tag = tag,
      transport = tag, tls_url = proxy.localhost_url, ca = proxy.ca })
  end

  local function same_as_expected(tag, out)
    local expected = parity.expected(tag)
    for case, want in pairs(expected) do
      assert.are.same(want, out[case], tag .. ": " .. case)
    end
    -- an answer over the bound is final: one request each, never retried
    for _, mode in ipairs({ "big:" .. (parity.LOWERED + 1), "bigchunked:" .. (parity.LOWERED * 5),
                            "big:" .. (parity.DEFAULT + 1) }) do
      assert.are.equal(1, badserver.count(bad, mode .. ":" .. tag), tag .. ": " .. mode)
    end
  end

  it("the curl transport gives the expected outcome of every case", function()
    same_as_expected("curl", run("curl"))
  end)

  it("the uv transport gives the same", function()
    local uvt = require "airlock.transport.uv"
    uvt.install(luv, { default = false })
    local ok, out = pcall(run, "uv")
    assert.is_true(uvt.uninstall())
    luv.run("nowait")
    assert.is_true(ok, tostring(out))
    same_as_expected("uv", out)
  end)

  it("the C core bounds a kept body and says so; a streamed one is not bounded", function()
    local core = require "airlock.core"
    local url = bad.url .. "/healthz"
    local r = core.perform({ method = "GET", url = url, headers = { "X-API-Key: big:5000:core" },
      max_response_bytes = 4999 })
    assert.are.equal("the response body is larger than 4999 bytes", r.error)
    assert.is_true(r.too_large)
    r = core.perform({ method = "GET", url = url, headers = { "X-API-Key: big:5000:core" },
      max_response_bytes = 5000 })
    assert.are.equal(200, r.status)
    assert.are.equal(5000, #r.body)
    local req = core.request({ method = "GET", url = url, headers = { "X-API-Key: bigchunked:300000:core" },
      max_response_bytes = 1000, stream = true })
    local got = 0
    while not req:done() do
      core.step(100)
      got = got + #req:take()
    end
    got = got + #req:take()
    assert.are.equal(200, req:result().status)
    assert.are.equal(300000, got)
    assert.has_error(function() core.perform({ method = "GET", url = url, max_response_bytes = 0 }) end)
  end)

  it("airlock.stats() without an argument reports the automatic transport, with a name that one", function()
    local airlock = require "airlock"
    assert.are.equal("curl", airlock.stats().transport)
    assert.are.equal("curl", airlock.stats("curl").transport)
    local mine = { name = "mine", send = function() end, sleep = function() end,
                   stats = function() return { mine = 1 } end }
    local s = airlock.stats(mine)
    assert.are.equal("mine", s.transport)
    assert.are.equal(1, s.mine)
    assert.has_error(function() airlock.stats(42) end)
  end)
end)
