-- luacheck: max line length 160
-- airlockd's self-service keys (SANDBOX_KEYSTORE, contract 1.13), admin API
-- (SANDBOX_ADMIN_KEY, 1.14) and audit log (SANDBOX_AUDIT, 1.12): exact statuses and strings
-- with curl against real servers on 127.0.0.1, and the configuration refusals.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local cjson = require "cjson"

local http = http_client.request
local urlencode = http_client.urlencode
local q = proc.shell_quote

local NOTE = "Store this key now: it is shown only once and can't be recovered."
local BAD_TENANT = "Tenant names are 1-63 chars of lowercase letters, digits, '-' or '_'."
local LAST_KEY = "This is the tenant's last active key; create a new one before revoking it."
local NO_KEYSTORE = '{"detail":"Self-service keys are not enabled on this server (SANDBOX_KEYSTORE)."}'
local NO_AUDIT = '{"detail":"The audit log is not enabled on this server (SANDBOX_AUDIT)."}'
local NO_ADMIN = '{"detail":"The admin API is not enabled on this server."}'
local BAD_ADMIN = '{"detail":"Invalid or missing admin key"}'
local BAD_KEY = '{"detail":"Invalid or missing X-API-Key header"}'
local ADMIN_ON_TENANT = '{"detail":"Invalid or missing X-API-Key header: this is the admin key, which opens only ' ..
  'the /v1/admin/ routes (GET /v1/admin/sessions lists every tenant\'s sessions)."}'
local TENANT_ON_ADMIN = '{"detail":"Invalid or missing admin key: this is a tenant\'s key; the admin routes ' ..
  '(/v1/admin/..., /metrics) need the admin key (SANDBOX_ADMIN_KEY)."}'

local read_file = proc.read_file
local tmpdir = proc.make_temp_dir
local binary = airlockd.binary

-- Runs airlockd with env (plus a static key) for at most 10 s; returns exit status, output.
local function run_with(env)
  local dir = tmpdir()
  local words = { "SANDBOX_API_KEYS=acme:static_acme_key_1234" }
  for k, v in pairs(env) do words[#words + 1] = k .. "=" .. q(v) end
  local rc, out = proc.run_capture(string.format("env %s timeout 10 %s --listen 127.0.0.1:0 --state-dir %s",
    table.concat(words, " "), q(binary()), q(dir .. "/state")))
  proc.remove_tree(dir)
  return rc, out
end

local function body(t) return cjson.encode(t) end

-- Code points in a UTF-8 string (Lua 5.1 has no utf8 library).
local function ulen(s)
  local _, n = s:gsub("[^\128-\191]", "")
  return n
end

local RECORD_FIELDS = { "active", "created_at", "key_id", "name", "prefix", "revoked_at", "tenant_id" }

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

local function check_record(rec, tenant, name)
  assert.are.same(RECORD_FIELDS, sorted_keys(rec))
  assert.is_truthy(rec.key_id:match("^[a-z2-7]+$") and #rec.key_id == 10, rec.key_id)
  assert.are.equal(tenant, rec.tenant_id)
  if name then assert.are.equal(name, rec.name) end
  assert.are.equal("asb_" .. rec.key_id .. "_\226\128\166", rec.prefix)
  assert.are.equal("number", type(rec.created_at))
end

describe("airlockd without key store, admin key or audit log", function()
  local server, acme

  lazy_setup(function()
    server = airlockd.start()
    acme = server.tenants.acme
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("answers 501 on every /v1/keys route after authentication", function()
    for _, case in ipairs({ { "GET", "/v1/keys" }, { "POST", "/v1/keys", "{}" }, { "DELETE", "/v1/keys/abcdefghij" } }) do
      local r = http(server, case[1], case[2], { key = acme, body = case[3] })
      assert.are.equal(501, r.status, case[1] .. " " .. case[2])
      assert.are.equal(NO_KEYSTORE, r.body)
      r = http(server, case[1], case[2], { key = "wrong", body = case[3] })
      assert.are.equal(401, r.status)
      assert.are.equal(BAD_KEY, r.body)
    end
  end)

  it("answers 404 on every admin route, whatever the key", function()
    for _, case in ipairs({ { "GET", "/v1/admin/keys" }, { "POST", "/v1/admin/keys", '{"tenant":"acme"}' },
                            { "DELETE", "/v1/admin/keys/abcdefghij" } }) do
      for _, key in ipairs({ acme, "x", false }) do
        local r = http(server, case[1], case[2], { key = key or nil, body = case[3] })
        assert.are.equal(404, r.status)
        assert.are.equal(NO_ADMIN, r.body)
      end
    end
  end)

  it("answers 501 on /v1/audit after authentication, and validates limit first", function()
    local r = http(server, "GET", "/v1/audit", { key = acme })
    assert.are.equal(501, r.status)
    assert.are.equal(NO_AUDIT, r.body)
    r = http(server, "GET", "/v1/audit", { key = "wrong" })
    assert.are.equal(401, r.status)
    r = http(server, "GET", "/v1/audit?limit=abc", { key = acme })
    assert.are.equal(422, r.status)
    assert.are.equal("int_parsing", r.json.detail[1].type)
  end)
end)

describe("airlockd configuration of keys and audit", function()
  local function refused(env, ...)
    local rc, out = run_with(env)
    assert.are.equal(2, rc, out)
    assert.is_truthy(out:find("invalid configuration", 1, true), out)
    for _, word in ipairs({ ... }) do
      assert.is_truthy(out:find(word, 1, true), "expected '" .. word .. "' in: " .. out)
    end
    return out
  end

  local long_admin = string.rep("A", 40)

  it("refuses a store other than sqlite:<path>, naming the variable", function()
    refused({ SANDBOX_AUDIT = "postgres:x" }, "SANDBOX_AUDIT")
    refused({ SANDBOX_AUDIT = "sqlite:" }, "SANDBOX_AUDIT")
    refused({ SANDBOX_KEYSTORE = "dynamodb:keys" }, "SANDBOX_KEYSTORE")
    refused({ SANDBOX_KEYSTORE = "/tmp/keys.db" }, "SANDBOX_KEYSTORE")
  end)

  it("refuses a bad retention period", function()
    for _, v in ipairs({ "abc", "0", "-3", "1.5" }) do
      refused({ SANDBOX_AUDIT = "sqlite:/tmp/x.db", SANDBOX_AUDIT_RETENTION_DAYS = v }, "SANDBOX_AUDIT_RETENTION_DAYS")
    end
  end)

  it("refuses an admin key shorter than 32 characters", function()
    local out = refused({ SANDBOX_KEYSTORE = "sqlite:/tmp/never.db", SANDBOX_ADMIN_KEY = string.rep("a", 31) },
      "SANDBOX_ADMIN_KEY", "32")
    assert.is_nil(out:find(string.rep("a", 31), 1, true), "the key itself is never printed")
  end)

  it("refuses an admin key without a key store, naming both variables", function()
    local out = refused({ SANDBOX_ADMIN_KEY = long_admin }, "SANDBOX_ADMIN_KEY", "SANDBOX_KEYSTORE")
    assert.is_nil(out:find(long_admin, 1, true))
  end)

  it("refuses an admin key that is also a tenant key", function()
    refused({ SANDBOX_KEYSTORE = "sqlite:/tmp/never.db", SANDBOX_API_KEYS = "acme:" .. long_admin,
              SANDBOX_ADMIN_KEY = long_admin }, "SANDBOX_ADMIN_KEY")
  end)

  it("refuses a store file it cannot open", function()
    for var, file in pairs({ SANDBOX_AUDIT = "audit.db", SANDBOX_KEYSTORE = "keys.db" }) do
      local rc, out = run_with({ [var] = "sqlite:/nonexistent/dir/" .. file })
      assert.are.equal(1, rc, out)
      assert.is_truthy(out:find(var .. ": cannot open /nonexistent/dir/" .. file, 1, true), out)
    end
  end)

  it("starts with a key store as the only key source", function()
    local dir = tmpdir()
    local srv = airlockd.start({ tenants = {}, env = { SANDBOX_KEYSTORE = "sqlite:" .. dir .. "/k.db" } })
    local r = http(srv, "GET", "/v1/keys", { key = "asb_aaaaaaaaaa_" .. string.rep("x", 43) })
    airlockd.stop(srv)
    proc.remove_tree(dir)
    assert.are.equal(401, r.status)
  end)

  it("still needs some key source", function()
    local p = assert(io.popen("env -u SANDBOX_API_KEY SANDBOX_API_KEYS= timeout 10 " .. q(binary()) ..
      " --listen 127.0.0.1:0 --state-dir /tmp/airlockd-nokeys-$$ 2>&1; echo rc=$?", "r"))
    local out = p:read("*a")
    p:close()
    assert.are.equal("2", out:match("rc=(%d+)"), out)
    assert.is_truthy(out:find("SANDBOX_KEYSTORE", 1, true), out)
  end)
end)

describe("airlockd with key store, admin key and audit log", function()
  local server, dir, admin, acme, other

  local function adm(method, path, b, key)
    return http(server, method, "/v1/admin/keys" .. (path or ""), { key = key == nil and admin or key or nil, body = b })
  end

  local function issue(tenant, name)
    local r = adm("POST", nil, body({ tenant = tenant, name = name }))
    assert.are.equal(201, r.status, r.body)
    return r.json
  end

  lazy_setup(function()
    dir = tmpdir()
    admin = "adm_" .. airlockd.random_hex(20)
    server = airlockd.start({ env = {
      SANDBOX_KEYSTORE = "sqlite:" .. dir .. "/keys.db",
      SANDBOX_AUDIT = "sqlite:" .. dir .. "/audit.db",
      SANDBOX_AUDIT_RETENTION_DAYS = "30",
      SANDBOX_ADMIN_KEY = admin,
      SANDBOX_TENANT_LIMITS = '{"*":{"max_sessions":3},"special":{"max_sessions":7}}',
      SANDBOX_EGRESS_POLICY = '{"*":["pypi"],"acme":[]}',
    } })
    acme, other = server.tenants.acme, server.tenants.other
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
    if dir then proc.remove_tree(dir) end
  end)

  describe("admin API", function()
    it("needs the admin key: 401 for a missing, wrong or tenant key", function()
      for _, key in ipairs({ false, "wrong", acme, admin .. "x" }) do
        for _, m in ipairs({ "GET", "POST", "DELETE" }) do
          local r = adm(m, m == "DELETE" and "/abcdefghij" or nil, m == "POST" and '{"tenant":"acme"}' or nil, key)
          assert.are.equal(401, r.status, m)
          -- a tenant's key is told what it is (ours, after the contract's text)
          assert.are.equal(key == acme and TENANT_ON_ADMIN or BAD_ADMIN, r.body)
        end
      end
    end)

    it("the admin key is not a tenant key", function()
      for _, path in ipairs({ "/v1/sessions", "/v1/keys", "/v1/audit", "/v1/usage" }) do
        local r = http(server, "GET", path, { key = admin })
        assert.are.equal(401, r.status)
        assert.are.equal(ADMIN_ON_TENANT, r.body)
      end
    end)

    it("is not rate limited", function()
      for _ = 1, 130 do
        local r = adm("GET", "?tenant=nobody")
        assert.are.equal(200, r.status)
        assert.are.equal('{"keys":[]}', r.body)
      end
    end)

    it("creates keys: 201 with the key shown once, name stripped or 'unnamed'", function()
      local r = adm("POST", nil, body({ tenant = "newco", name = "  build bot \n" }))
      assert.are.equal(201, r.status)
      local rec = r.json
      assert.is_truthy(rec.api_key:match("^asb_[a-z2-7]+_[A-Za-z0-9_%-]+$"), rec.api_key)
      assert.are.equal(4 + 10 + 1 + 43, #rec.api_key)
      assert.are.equal("asb_" .. rec.key_id .. "_", rec.api_key:sub(1, 15))
      assert.are.equal(NOTE, rec.note)
      assert.is_true(rec.active)
      assert.are.equal(cjson.null, rec.revoked_at)
      rec.api_key, rec.note = nil, nil
      check_record(rec, "newco", "build bot")
      assert.are.equal("unnamed", issue("newco").name)
      assert.are.equal("unnamed", issue("newco", "   ").name)
      assert.are.equal(string.rep("é", 100), issue("newco", string.rep("é", 100)).name)
    end)

    it("validates the body: 422 without tenant, for a long name, for a non-object", function()
      local r = adm("POST", nil, '{"name":"x"}')
      assert.are.equal(422, r.status)
      assert.are.equal("missing", r.json.detail[1].type)
      assert.are.same({ "body", "tenant" }, r.json.detail[1].loc)
      r = adm("POST", nil, body({ tenant = "newco", name = string.rep("n", 101) }))
      assert.are.equal(422, r.status)
      assert.are.equal("string_too_long", r.json.detail[1].type)
      r = adm("POST", nil, "[]")
      assert.are.equal(422, r.status)
      r = adm("POST", nil, '{"tenant":5}')
      assert.are.equal(422, r.status)
      assert.are.equal("string_type", r.json.detail[1].type)
    end)

    it("answers 400 for a bad tenant name", function()
      for _, t in ipairs({ "", "Acme", "-acme", "_a", "a b", "a/b", "é", string.rep("a", 64) }) do
        local r = adm("POST", nil, body({ tenant = t }))
        assert.are.equal(400, r.status, t)
        assert.are.equal(cjson.encode({ detail = BAD_TENANT }):gsub("\\/", "/"), r.body)
      end
      assert.are.equal(201, adm("POST", nil, body({ tenant = "0" .. string.rep("a-_", 20) .. "zz" })).status)
    end)

    it("lists keys, all or by tenant, oldest first, without secrets", function()
      local a = issue("listco", "one")
      local b = issue("listco", "two")
      local r = adm("GET", "?tenant=listco")
      assert.are.equal(200, r.status)
      assert.are.same({ "keys" }, sorted_keys(r.json))
      assert.are.equal(2, #r.json.keys)
      assert.are.equal(a.key_id, r.json.keys[1].key_id)
      assert.are.equal(b.key_id, r.json.keys[2].key_id)
      for _, rec in ipairs(r.json.keys) do check_record(rec, "listco") end
      r = adm("GET")
      assert.are.equal(200, r.status)
      local seen = {}
      for _, rec in ipairs(r.json.keys) do seen[rec.key_id] = rec.tenant_id end
      assert.are.equal("listco", seen[a.key_id])
      for _, secret in ipairs({ a.api_key, b.api_key, a.api_key:sub(16) }) do
        assert.is_nil(r.body:find(secret, 1, true))
      end
      assert.is_nil(r.body:find("hash", 1, true))
      assert.is_nil(r.body:find("%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x"))
    end)

    it("revokes any key, even a tenant's last one; 404 for an unknown key", function()
      local rec = issue("lastco")
      local r = adm("DELETE", "/" .. rec.key_id)
      assert.are.equal(200, r.status)
      check_record(r.json, "lastco")
      assert.is_false(r.json.active)
      assert.are.equal("number", type(r.json.revoked_at))
      assert.are.equal(401, http(server, "GET", "/v1/keys", { key = rec.api_key }).status)
      local again = adm("DELETE", "/" .. rec.key_id)
      assert.are.equal(200, again.status)
      assert.are.equal(r.body, again.body)
      r = adm("DELETE", "/nosuchkey0")
      assert.are.equal(404, r.status)
      assert.are.equal([[{"detail":"No key 'nosuchkey0'."}]], r.body)
    end)

    it("refuses an 11th active key with 409, and a revoked one frees a slot", function()
      local first
      for i = 1, 10 do
        local rec = issue("manyco", "k" .. i)
        first = first or rec
      end
      local want = [[{"detail":"Tenant 'manyco' already has 10 active keys (max 10). Revoke one first."}]]
      local r = adm("POST", nil, body({ tenant = "manyco" }))
      assert.are.equal(409, r.status)
      assert.are.equal(want, r.body)
      r = http(server, "POST", "/v1/keys", { key = first.api_key, body = "{}" })
      assert.are.equal(409, r.status)
      assert.are.equal(want, r.body)
      assert.are.equal(200, adm("DELETE", "/" .. first.key_id).status)
      assert.are.equal(201, adm("POST", nil, body({ tenant = "manyco" })).status)
    end)
  end)

  describe("tenant keys", function()
    it("round trip: admin issues a key, the tenant uses it at once, rotates, the old key gets 401", function()
      local k1 = issue("rotco", "first")
      local r = http(server, "GET", "/v1/keys", { key = k1.api_key })
      assert.are.equal(200, r.status)
      assert.are.same({ "keys", "tenant_id" }, sorted_keys(r.json))
      assert.are.equal("rotco", r.json.tenant_id)
      assert.are.equal(1, #r.json.keys)
      local s = http(server, "POST", "/v1/sessions", { key = k1.api_key, body = "{}" })
      assert.are.equal(201, s.status)
      assert.are.equal("rotco", s.json.tenant_id)

      r = http(server, "POST", "/v1/keys", { key = k1.api_key, body = body({ name = " second " }) })
      assert.are.equal(201, r.status)
      local k2 = r.json
      assert.are.equal(NOTE, k2.note)
      assert.are.equal("second", k2.name)
      assert.are.equal("rotco", k2.tenant_id)
      assert.are_not.equal(k1.key_id, k2.key_id)

      r = http(server, "DELETE", "/v1/keys/" .. k1.key_id, { key = k2.api_key })
      assert.are.equal(200, r.status)
      check_record(r.json, "rotco", "first")
      assert.is_false(r.json.active)
      assert.are.equal("number", type(r.json.revoked_at))
      for _, path in ipairs({ "/v1/keys", "/v1/sessions", "/v1/sessions/" .. s.json.session_id .. "/read?path=x" }) do
        r = http(server, "GET", path, { key = k1.api_key })
        assert.are.equal(401, r.status)
        assert.are.equal(BAD_KEY, r.body)
      end
      -- the session belongs to the tenant, not to the key
      r = http(server, "GET", "/v1/sessions", { key = k2.api_key })
      assert.are.equal(s.json.session_id, r.json.sessions[1].session_id)

      r = http(server, "GET", "/v1/keys", { key = k2.api_key })
      assert.are.equal(2, #r.json.keys)
      assert.is_false(r.json.keys[1].active)
      assert.is_true(r.json.keys[2].active)
      for _, secret in ipairs({ k1.api_key, k2.api_key, k2.api_key:sub(16) }) do
        assert.is_nil(r.body:find(secret, 1, true))
      end
      assert.is_nil(r.body:find("hash", 1, true))

      -- revoking a revoked key returns it unchanged
      local again = http(server, "DELETE", "/v1/keys/" .. k1.key_id, { key = k2.api_key })
      assert.are.equal(200, again.status)
      assert.is_false(again.json.active)
      -- the last active key stays
      r = http(server, "DELETE", "/v1/keys/" .. k2.key_id, { key = k2.api_key })
      assert.are.equal(409, r.status)
      assert.are.equal(cjson.encode({ detail = LAST_KEY }), r.body)
      assert.are.equal(200, http(server, "GET", "/v1/keys", { key = k2.api_key }).status)
    end)

    it("a static-key tenant's only self-service key is its last key; static keys are not listed", function()
      local r = http(server, "GET", "/v1/keys", { key = acme })
      assert.are.equal(200, r.status)
      assert.are.equal('{"tenant_id":"acme","keys":[]}', r.body)
      r = http(server, "POST", "/v1/keys", { key = acme, body = "{}" })
      assert.are.equal(201, r.status)
      assert.are.equal("unnamed", r.json.name)
      local id = r.json.key_id
      r = http(server, "DELETE", "/v1/keys/" .. id, { key = acme })
      assert.are.equal(409, r.status)
      assert.are.equal(cjson.encode({ detail = LAST_KEY }), r.body)
    end)

    it("another tenant's key or an unknown id is 404", function()
      local theirs = issue("otherco")
      for _, id in ipairs({ theirs.key_id, "zzzzzzzzzz", "x%27y" }) do
        local r = http(server, "DELETE", "/v1/keys/" .. id, { key = acme })
        assert.are.equal(404, r.status)
        local shown = id:gsub("%%27", "'")
        assert.are.equal(cjson.encode({ detail = "No key '" .. shown .. "' for this tenant." }), r.body)
      end
      assert.is_true(adm("GET", "?tenant=otherco").json.keys[1].active)
    end)

    it("validates the create body", function()
      local r = http(server, "POST", "/v1/keys", { key = acme, body = body({ name = string.rep("x", 101) }) })
      assert.are.equal(422, r.status)
      assert.are.same({ "body", "name" }, r.json.detail[1].loc)
      r = http(server, "POST", "/v1/keys", { key = acme })
      assert.are.equal(422, r.status)
      assert.are.equal("missing", r.json.detail[1].type)
    end)

    it("rejects forged, truncated and non-ASCII asb_ keys", function()
      local rec = issue("forgeco")
      local k = rec.api_key
      local last = k:sub(-1) == "A" and "B" or "A"
      for _, bad in ipairs({ k:sub(1, -2), k .. "x", k:sub(1, -2) .. last, k:upper(), "asb_" .. rec.key_id .. "_",
                             k:sub(1, -2) .. "\195\169" }) do
        local r = http(server, "GET", "/v1/keys", { key = bad })
        assert.are.equal(401, r.status, bad)
      end
      assert.are.equal(200, http(server, "GET", "/v1/keys", { key = k }).status)
    end)

    it("tenants created by keys get the '*' limits and egress, or their own entries", function()
      local rec = issue("starco")
      local r = http(server, "GET", "/v1/usage", { key = rec.api_key })
      assert.are.equal(200, r.status)
      assert.are.equal("starco", r.json.tenant_id)
      assert.are.same({ max_sessions = 3, requests_per_minute = 120, max_concurrent_exec = 4 }, r.json.limits)
      r = http(server, "GET", "/v1/egress/policy", { key = rec.api_key })
      assert.are.equal('{"tenant_id":"starco","allowed":["pypi.org","files.pythonhosted.org"]}', r.body)
      local sp = issue("special")
      r = http(server, "GET", "/v1/usage", { key = sp.api_key })
      assert.are.equal(7, r.json.limits.max_sessions)
      -- a static tenant keeps its configuration when it uses a self-service key
      r = http(server, "POST", "/v1/keys", { key = other, body = "{}" })
      assert.are.equal(201, r.status)
      local okey = r.json.api_key
      r = http(server, "GET", "/v1/egress/policy", { key = okey })
      assert.are.equal('{"tenant_id":"other","allowed":["pypi.org","files.pythonhosted.org"]}', r.body)
      r = http(server, "GET", "/v1/egress/policy", { key = acme })
      assert.are.equal('{"tenant_id":"acme","allowed":[]}', r.body)
    end)

    it("never writes keys or their hashes' secrets to the log or the secret to the store", function()
      local rec = issue("secretco")
      assert.are.equal(200, http(server, "GET", "/v1/keys", { key = rec.api_key }).status)
      local log = airlockd.log(server)
      assert.is_nil(log:find(rec.api_key, 1, true))
      assert.is_nil(log:find(admin, 1, true))
      local db = read_file(dir .. "/keys.db") or ""
      local wal = read_file(dir .. "/keys.db-wal") or ""
      local secret = rec.api_key:sub(16)
      assert.is_nil(db:find(secret, 1, true))
      assert.is_nil(wal:find(secret, 1, true))
      assert.is_truthy((db .. wal):find(rec.key_id, 1, true), "the store holds the key id")
    end)
  end)

  describe("audit log", function()
    local function audit(key, query)
      return http(server, "GET", "/v1/audit" .. (query or ""), { key = key })
    end

    local function exec(key, id, command, timeout)
      local r = http_client.exec(server, key, id, command, timeout)
      assert.are.equal(200, r.status, r.body)
      return r.json
    end

    local sid
    lazy_setup(function()
      local r = http(server, "POST", "/v1/sessions", { key = acme, body = "{}" })
      assert.are.equal(201, r.status, r.body)
      sid = r.json.session_id
      exec(acme, sid, "echo one")
      exec(acme, sid, "exit 3")
      exec(acme, sid, "sleep 5", 1)
    end)

    it("records exec commands, newest first, with the documented fields only", function()
      local r = audit(acme)
      assert.are.equal(200, r.status)
      assert.are.same({ "entries", "next", "retention_days", "tenant_id" }, sorted_keys(r.json))
      assert.are.equal("acme", r.json.tenant_id)
      assert.are.equal(30, r.json.retention_days)
      assert.are.equal(cjson.null, r.json.next)
      local e = r.json.entries
      assert.is_true(#e >= 3)
      assert.are.equal("sleep 5", e[1].command)
      assert.are.equal("exit 3", e[2].command)
      assert.are.equal("echo one", e[3].command)
      assert.are.same({ "actor", "command", "detail", "duration_s", "exit_code", "kind", "oom_killed", "session_id",
                        "timed_out", "truncated", "ts" }, sorted_keys(e[1]))
      assert.is_nil(r.body:find('"sk"', 1, true))
      assert.is_nil(r.body:find("expires_at", 1, true))
      for i = 1, 3 do
        assert.are.equal("static key", e[i].actor)
        assert.are.equal("exec", e[i].kind)
        assert.are.equal(sid, e[i].session_id)
        assert.is_false(e[i].truncated)
        assert.is_false(e[i].oom_killed)
        assert.are.equal(cjson.null, e[i].detail)
        assert.are.equal("number", type(e[i].duration_s))
        assert.is_true(e[i].duration_s > 0 and e[i].duration_s < 30)
        assert.is_true(math.abs(e[i].ts - os.time()) < 600)
      end
      assert.is_true(e[1].ts >= e[2].ts and e[2].ts >= e[3].ts)
      assert.are.equal(-1, e[1].exit_code)
      assert.is_true(e[1].timed_out)
      assert.are.equal(3, e[2].exit_code)
      assert.is_false(e[2].timed_out)
      assert.are.equal(0, e[3].exit_code)
    end)

    it("pages with limit, next and a percent-encoded before", function()
      local r = audit(acme, "?limit=1")
      assert.are.equal(1, #r.json.entries)
      assert.are.equal("sleep 5", r.json.entries[1].command)
      local cursor = r.json.next
      assert.is_truthy(cursor:match("^%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d#%x%x%x%x%x%x%x%x$"), cursor)
      r = audit(acme, "?limit=1&before=" .. urlencode(cursor))
      assert.are.equal("exit 3", r.json.entries[1].command)
      r = audit(acme, "?limit=1&before=" .. urlencode(r.json.next))
      assert.are.equal("echo one", r.json.entries[1].command)
      r = audit(acme, "?limit=2&before=" .. urlencode(cursor))
      assert.are.equal(2, #r.json.entries)
      assert.are.equal(cjson.null, r.json.next)
      -- a cursor older than everything gives an empty page
      r = audit(acme, "?before=" .. urlencode("00000000000000000001#00000000"))
      assert.are.equal('{"tenant_id":"acme","entries":[],"next":null,"retention_days":30}', r.body)
    end)

    it("clamps limit to 1..500 and answers 422 for a non-integer", function()
      assert.are.equal(1, #audit(acme, "?limit=0").json.entries)
      assert.are.equal(1, #audit(acme, "?limit=-7").json.entries)
      assert.are.equal(3, #audit(acme, "?limit=100000").json.entries)
      assert.are.equal(2, #audit(acme, "?limit=2.0").json.entries)
      for _, bad in ipairs({ "abc", "1.5", "" }) do
        local r = audit(acme, "?limit=" .. bad)
        assert.are.equal(422, r.status, bad)
        assert.are.same({ "query", "limit" }, r.json.detail[1].loc)
      end
    end)

    it("is per tenant", function()
      local r = audit(other)
      assert.are.equal(200, r.status)
      assert.are.equal('{"tenant_id":"other","entries":[],"next":null,"retention_days":30}', r.body)
      assert.are.equal(401, audit("nope").status)
    end)

    it("names the self-service key as the actor and keeps 2000 characters of a long command", function()
      local rec = issue("auditco")
      local s = http(server, "POST", "/v1/sessions", { key = rec.api_key, body = "{}" })
      assert.are.equal(201, s.status)
      local long = ": " .. string.rep("\195\169", 2100)
      exec(rec.api_key, s.json.session_id, long)
      local r = audit(rec.api_key)
      assert.are.equal(1, #r.json.entries)
      local e = r.json.entries[1]
      assert.are.equal("key " .. rec.key_id, e.actor)
      assert.are.equal("auditco", r.json.tenant_id)
      assert.is_true(e.truncated)
      assert.are.equal(2000, ulen(e.command))
      assert.are.equal(long:sub(1, #e.command), e.command)
      -- the static-key tenant's history is untouched
      assert.are.equal(3, #audit(acme).json.entries)
    end)

    it("keeps entries across a restart and prunes those past the retention period", function()
      -- the sqlite3 tool ages an entry (scripts/install-deps.sh installs it: its absence fails)
      local aged = os.execute("sqlite3 " .. q(dir .. "/audit.db") .. " " ..
        q("UPDATE audit SET ts_us = ts_us - 31*86400*1000000 WHERE command = 'echo one'"))
      assert.is_truthy(aged == true or aged == 0, "sqlite3 could not age the audit entry")
      -- expired entries are hidden at once and deleted at the next start
      local r = audit(acme)
      assert.are.equal(2, #r.json.entries)
      local env = {
        SANDBOX_KEYSTORE = "sqlite:" .. dir .. "/keys.db", SANDBOX_AUDIT = "sqlite:" .. dir .. "/audit.db",
        SANDBOX_AUDIT_RETENTION_DAYS = "30", SANDBOX_ADMIN_KEY = admin,
      }
      local again = airlockd.start({ tenants = server.tenants, env = env })
      r = http(again, "GET", "/v1/audit", { key = acme })
      airlockd.stop(again)
      assert.are.equal(200, r.status)
      assert.are.equal(2, #r.json.entries)
      assert.are.equal("exit 3", r.json.entries[2].command)
      local p = io.popen("sqlite3 " .. q(dir .. "/audit.db") .. " " .. q("SELECT COUNT(*) FROM audit WHERE command = 'echo one'"))
      local n = p:read("*a")
      p:close()
      assert.are.equal("0", n:match("%d+"))
    end)
  end)
end)
