-- airlock.keys: settings and local checks, the requests it sends (misbehaving server), and a
-- full key-management round trip against airlockd with a key store.
local airlock = require "airlock"
local keys = require "airlock.keys"
local cjson = require "cjson"

local expect_error = require "support.expect_error"
local proc = require "support.proc"

local function env(t) return function(name) return t[name] end end

describe("airlock.keys settings", function()
  it("falls back to SANDBOX_API_KEY / SANDBOX_ADMIN_KEY and SANDBOX_API_URL", function()
    local c = keys.client(nil, env({ SANDBOX_API_URL = "http://h:1/", SANDBOX_API_KEY = "tk" }))
    assert.are.equal("http://h:1", c.base_url)
    assert.are.equal("/v1/keys", c.prefix)
    assert.are.equal(30, c._settings.timeout)
    assert.are.equal(3, c._settings.max_retries)
    c = keys.client({ admin = true }, env({ SANDBOX_API_URL = "http://h:1", SANDBOX_ADMIN_KEY = "ak" }))
    assert.are.equal("/v1/admin/keys", c.prefix)
    assert.are.equal("ak", c._settings.api_key)
    c = keys.client({ api_key = "x", base_url = "https://h", verify = false, timeout = 5 }, env({}))
    assert.is_false(c._settings.verify)
    assert.are.equal(5, c._settings.timeout)
  end)

  it("raises the exact missing-settings message before any request", function()
    local err = expect_error("SandboxError", keys.client, nil, env({ SANDBOX_API_URL = "http://h" }))
    assert.are.equal("Set base_url and api_key, or the SANDBOX_API_URL and SANDBOX_API_KEY " ..
      "environment variables.", err.message)
    assert.is_nil(err.status)
    -- the admin client never falls back to the tenant key
    err = expect_error("SandboxError", keys.client, { admin = true },
      env({ SANDBOX_API_URL = "http://h", SANDBOX_API_KEY = "tenant-key" }))
    assert.are.equal("Set base_url and api_key, or the SANDBOX_API_URL and SANDBOX_ADMIN_KEY " ..
      "environment variables.", err.message)
    expect_error("ValidationError", keys.client, { api_key = "k", base_url = "http://h", bogus = 1 })
    expect_error("ValidationError", keys.client, { api_key = "k", base_url = "http://h", admin = "yes" })
  end)

  it("refuses an admin create without a tenant, locally", function()
    local c = keys.client({ admin = true, api_key = "k", base_url = "http://127.0.0.1:9" })
    local err = expect_error("SandboxError", c.create, c, { name = "x" })
    assert.are.equal("SandboxError", err.name)
    assert.are.equal("Admins must say which tenant the key is for (tenant=...).", err.message)
    expect_error("ValidationError", c.revoke, c, "")
    expect_error("ValidationError", c.revoke, c, 12)
  end)
end)

describe("airlock.keys requests", function()
  local badserver = require "support.badserver"
  local srv

  setup(function() srv = badserver.start() end)
  teardown(function() if srv then badserver.stop(srv) end end)

  it("sends list, create and revoke like the reference client", function()
    local key = "ok:keys"
    local c = keys.client({ api_key = key, base_url = srv.url })
    c:list()
    local last = badserver.last(srv, key)
    assert.are.equal("GET", last.method)
    assert.are.equal("/v1/keys", last.path)
    assert.are.equal("", last.query)
    c:list({ tenant = "ignored" })   -- the tenant filter is the admin API's
    assert.are.equal("", badserver.last(srv, key).query)
    c:create({ name = "laptop" })
    last = badserver.last(srv, key)
    assert.are.equal("POST", last.method)
    assert.are.equal('{"name":"laptop"}', last.body)
    c:create()
    assert.are.equal('{"name":""}', badserver.last(srv, key).body)
    c:revoke("abc/d e")
    last = badserver.last(srv, key)
    assert.are.equal("DELETE", last.method)
    assert.are.equal("/v1/keys/abc%2Fd%20e", last.path)
    assert.are.equal(key, last.headers["x-api-key"])

    local admin = keys.client({ api_key = key, base_url = srv.url, admin = true })
    admin:list({ tenant = "a b&c" })
    last = badserver.last(srv, key)
    assert.are.equal("/v1/admin/keys", last.path)
    assert.are.equal("tenant=a+b%26c", last.query)
    admin:create({ tenant = "acme", name = "ci" })
    assert.are.same({ name = "ci", tenant = "acme" }, cjson.decode(badserver.last(srv, key).body))
    admin:revoke("k1")
    assert.are.equal("/v1/admin/keys/k1", badserver.last(srv, key).path)
  end)

  it("uses the same retry policy and error mapping", function()
    local c = keys.client({ api_key = "503:1", base_url = srv.url })
    c:list()
    assert.are.equal(2, badserver.count(srv, "503:1"))
    c = keys.client({ api_key = "status:409", base_url = srv.url })
    local err = expect_error("SandboxError", c.revoke, c, "k")
    assert.are.equal("SandboxError", err.name)
    assert.are.equal(409, err.status)
    assert.are.equal(1, badserver.count(srv, "status:409"))
    c = keys.client({ api_key = "429:1:3600", base_url = srv.url })
    err = expect_error("RateLimitError", c.create, c, { name = "x" })
    assert.are.equal(3600, err.retry_after)
    err = expect_error("APIConnectionError", keys.client({ api_key = "k", base_url = "http://127.0.0.1:9",
      max_retries = 0 }).list, keys.client({ api_key = "k", base_url = "http://127.0.0.1:9", max_retries = 0 }))
    assert.is_truthy(err.message:find("Could not reach http://127.0.0.1:9", 1, true))
  end)
end)

-- airlockd with a key store (SANDBOX_KEYSTORE) and an admin key (SANDBOX_ADMIN_KEY).
describe("airlock.keys against airlockd", function()
  local airlockd = require "support.airlockd"
  local srv, plain, admin_key, dir

  local function admin()
    return keys.client({ admin = true, api_key = admin_key, base_url = srv.url })
  end

  setup(function()
    admin_key = "adm_" .. airlockd.random_hex(20)
    dir = proc.make_temp_dir()
    plain = airlockd.start()
    -- a server that cannot start with its key store fails every test here
    srv = airlockd.start({ env = {
      SANDBOX_KEYSTORE = "sqlite:" .. dir .. "/keys.db", SANDBOX_ADMIN_KEY = admin_key } })
  end)

  teardown(function()
    if srv then airlockd.stop(srv) end
    if plain then airlockd.stop(plain) end
    if dir then proc.remove_tree(dir) end
  end)


  it("answers 501 for tenant keys when the key store is off", function()
    local c = keys.client({ api_key = plain.tenants.acme, base_url = plain.url })
    local err = expect_error("SandboxError", c.list, c)
    assert.are.equal("SandboxError", err.name)
    assert.are.equal(501, err.status)
    assert.are.equal("Self-service keys are not enabled on this server (SANDBOX_KEYSTORE).", err.message)
    err = expect_error("SandboxError", c.create, c, { name = "x" })
    assert.are.equal(501, err.status)
  end)

  it("round trip: admin issues a key, it runs a sandbox, the tenant rotates it", function()
    local a = admin()
    local rec = a:create({ tenant = "acme", name = "first" })
    assert.is_truthy(rec.api_key:match("^asb_[a-z2-7]+_[%w_%-]+$"), rec.api_key)
    assert.are.equal("acme", rec.tenant_id)
    assert.are.equal("first", rec.name)
    assert.is_true(rec.active)
    assert.is_truthy(rec.note:find("shown only once", 1, true))

    local opts = { api_key = rec.api_key, base_url = srv.url }
    airlock.with(opts, function(sbx)
      assert.are.equal("acme", sbx.tenant_id)
      sbx.files:write("k.txt", "key works")
      assert.are.equal("key works", sbx.files:read("k.txt"))
    end)

    local mine = keys.client(opts)
    local listed = mine:list()
    assert.are.equal(1, #listed)
    assert.are.equal(rec.key_id, listed[1].key_id)
    assert.is_nil(listed[1].api_key)
    -- the last active key cannot be revoked: 409
    local err = expect_error("SandboxError", mine.revoke, mine, rec.key_id)
    assert.are.equal("SandboxError", err.name)
    assert.are.equal(409, err.status)
    assert.is_truthy(err.message:find("last active key", 1, true))

    -- rotate: new key, revoke the old one with the new one
    local new = mine:create({ name = "second" })
    local rotated = keys.client({ api_key = new.api_key, base_url = srv.url })
    local revoked = rotated:revoke(rec.key_id)
    assert.is_false(revoked.active)
    assert.is_truthy(revoked.revoked_at)
    err = expect_error("AuthenticationError", airlock.sandbox, opts)
    assert.are.equal(401, err.status)
    assert.is_nil(tostring(err):find(rec.api_key, 1, true))
    expect_error("AuthenticationError", mine.list, mine)

    local active = {}
    for _, k in ipairs(a:list({ tenant = "acme" })) do active[k.key_id] = k.active end
    assert.are.same({ [rec.key_id] = false, [new.key_id] = true }, active)
    -- an admin may revoke a tenant's last key
    assert.is_false(a:revoke(new.key_id).active)
  end)

  it("keeps admin and tenant keys apart", function()
    local tenant_as_admin = keys.client({ admin = true, api_key = srv.tenants.acme, base_url = srv.url })
    local err = expect_error("AuthenticationError", tenant_as_admin.list, tenant_as_admin)
    assert.are.equal(401, err.status)
    local wrong = keys.client({ admin = true, api_key = "x" .. admin_key, base_url = srv.url })
    expect_error("AuthenticationError", wrong.list, wrong)
    -- the admin key is not a tenant key
    expect_error("AuthenticationError", airlock.sandbox, { api_key = admin_key, base_url = srv.url })
    -- no admin key configured: the admin API is not there
  end)

  it("answers 404 on the admin API when no admin key is configured", function()
    local off = keys.client({ admin = true, api_key = admin_key, base_url = plain.url })
    local err = expect_error("NotFoundError", off.list, off)
    assert.are.equal(404, err.status)
    assert.are.equal("The admin API is not enabled on this server.", err.message)
  end)

  it("maps key-store errors: bad tenant 400, unknown key 404", function()
    local a = admin()
    local err = expect_error("ValidationError", a.create, a, { tenant = "Bad Tenant!" })
    assert.are.equal(400, err.status)
    err = expect_error("NotFoundError", a.revoke, a, "zzzzzzzzzz")
    assert.are.equal(404, err.status)
  end)
end)
