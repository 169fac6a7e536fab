-- luacheck: max line length 160
-- airlockd's HTTP behaviour against the contract (docs: /work/shared/contract/airlock-api.md
-- sections 1, 2 and 7): exact status codes, bodies and headers, observed with curl against
-- a real server on 127.0.0.1. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local cjson = require "cjson"

local read_file = proc.read_file
local write_file = proc.write_file
local q = proc.shell_quote
local sh = proc.run

-- The curl helper lives in spec/support/http_client.lua (shared with the red-team specs).
local http_client = require "support.http_client"
local http = http_client.request
local urlencode = http_client.urlencode

local function create(server, key, body)
  local r = http(server, "POST", "/v1/sessions", { key = key, body = body or "{}" })
  assert.are.equal(201, r.status, r.body)
  return r.json.session_id, r
end

-- The workspace on the host: the directory "w" on the session's own disk image, mounted at
-- <state>/workspaces/<id>.
local function workspace(server, id)
  return server.dir .. "/state/workspaces/" .. id .. "/w"
end

local function has_sandbox(server)
  -- the isolation backend: exec tests need it to have started
  return airlockd.log(server):find("isolation: ", 1, true) ~= nil
end

describe("airlockd HTTP API", function()
  local server, acme, other

  lazy_setup(function()
    -- at debug: the request lines are in the log too, so "never logs keys" sees them
    server = airlockd.start({ env = { SANDBOX_LOG_LEVEL = "debug" } })
    acme, other = server.tenants.acme, server.tenants.other
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("prints the listening line with the isolation backend", function()
    local log = airlockd.log(server)
    assert.truthy(log:find("airlockd: listening on http://127.0.0.1:" .. server.port .. " (isolation: ", 1, true), log)
  end)

  describe("healthz", function()
    it("needs no key and counts sessions of all tenants", function()
      local r = http(server, "GET", "/healthz")
      assert.are.equal(200, r.status)
      assert.are.equal("application/json", r.headers["content-type"])
      local before = r.json.active_sessions
      assert.are.equal(string.format('{"status":"healthy","active_sessions":%d}', before), r.body)
      local a = create(server, acme)
      local b = create(server, other)
      r = http(server, "GET", "/healthz", { key = "whatever" })
      assert.are.equal(before + 2, r.json.active_sessions)
      http(server, "DELETE", "/v1/sessions/" .. a, { key = acme })
      http(server, "DELETE", "/v1/sessions/" .. b, { key = other })
    end)
  end)

  describe("authentication", function()
    it("answers 401 with the exact detail for a missing, wrong or non-ASCII key", function()
      for _, key in ipairs({ false, "nope", acme .. "x", "k\195\169y" }) do
        local r = http(server, "GET", "/v1/sessions", { key = key or nil })
        assert.are.equal(401, r.status)
        assert.are.equal('{"detail":"Invalid or missing X-API-Key header"}', r.body)
        assert.is_nil(r.headers["www-authenticate"])
      end
    end)

    it("does not accept Authorization: Bearer on /v1", function()
      local r = http(server, "GET", "/v1/sessions", { headers = { "Authorization: Bearer " .. acme } })
      assert.are.equal(401, r.status)
    end)

    it("rejects invalid JSON before checking the key", function()
      local r = http(server, "POST", "/v1/sessions/sbx_000000000000/exec", { key = "bad", body = "{oops" })
      assert.are.equal(422, r.status)
      assert.are.equal('{"detail":[{"type":"json_invalid","loc":["body",1],"msg":"JSON decode error",' ..
        '"input":{},"ctx":{"error":"Expecting property name enclosed in double quotes"}}]}', r.body)
    end)

    it("checks the key before validating a parseable body", function()
      local r = http(server, "POST", "/v1/sessions/sbx_000000000000/exec", { key = "bad", body = "{}" })
      assert.are.equal(401, r.status)
    end)
  end)

  describe("json_invalid positions and messages follow Python's json module", function()
    local cases = {
      { "", nil },
      { " ", 1, "Expecting value" },
      { '{"command":', 11, "Expecting value" },
      { '{"a":1,}', 6, "Illegal trailing comma before end of object" },
      { '{"a" 1}', 5, "Expecting ':' delimiter" },
      { '{"a":1 "b":2}', 7, "Expecting ',' delimiter" },
      { '{} x', 3, "Extra data" },
      { '{"a":"\\q"}', 6, "Invalid \\escape" },
      { '{"a":"x', 5, "Unterminated string starting at" },
      { '{"\195\169":tru}', 5, "Expecting value" },
    }
    for _, c in ipairs(cases) do
      it("for " .. string.format("%q", c[1]), function()
        local r = http(server, "POST", "/v1/sessions", { key = acme, body = c[1] })
        assert.are.equal(422, r.status)
        if not c[2] then
          assert.are.equal('{"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]}', r.body)
        else
          local e = r.json.detail[1]
          assert.are.equal("json_invalid", e.type)
          assert.are.same({ "body", c[2] }, e.loc)
          assert.are.equal(c[3], e.ctx.error)
        end
      end)
    end

    it("answers 400 for a body that is not UTF-8", function()
      local r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"template":"\255"}' })
      assert.are.equal(400, r.status)
      assert.are.equal('{"detail":"There was an error parsing the body"}', r.body)
    end)
  end)

  describe("POST /v1/sessions", function()
    it("creates a session with the contract's fields", function()
      local before = os.time()
      local id, r = create(server, acme, '{"metadata":{"a":"b"},"unknown":1}')
      local after = os.time()
      assert.truthy(id:match("^sbx_[0-9a-f]{12}$") or id:match("^sbx_" .. ("[0-9a-f]"):rep(12) .. "$"))
      assert.are.equal("acme", r.json.tenant_id)
      assert.are.same({}, r.json.egress)
      assert.truthy(r.body:find('"egress":[]', 1, true))
      assert.are.equal(512, r.json.disk_quota_mb)
      assert.are.equal("ready", r.json.status)
      -- the time of the call (os.time counts whole seconds)
      assert.is_true(r.json.created_at >= before and r.json.created_at < after + 1, r.body)
      assert.truthy(r.body:match('"created_at":%d+%.%d+,'))
      local order = {}
      for k in r.body:gmatch('"([%w_]+)":') do order[#order + 1] = k end
      -- the contract's fields in its order, then ours (the session's template and size: sizing_spec;
      -- its state and on_idle: pause_spec)
      assert.are.same({ "session_id", "tenant_id", "egress", "disk_quota_mb", "created_at", "status",
                        "template", "memory_mb", "cpus", "disk_mb", "max_processes", "state", "on_idle" }, order)
      local st = sh("test -d " .. q(workspace(server, id)))
      assert.is_true(st)
      http(server, "DELETE", "/v1/sessions/" .. id, { key = acme })
    end)

    it("requires a body", function()
      local r = http(server, "POST", "/v1/sessions", { key = acme })
      assert.are.equal(422, r.status)
      assert.are.equal('{"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]}', r.body)
    end)

    it("refuses templates outside the allowlist", function()
      local r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"template":"ubuntu:22.04"}' })
      assert.are.equal(400, r.status)
      assert.are.equal("Template 'ubuntu:22.04' not permitted. Allowed: ['sandbox-base:latest', 'python:3.11-slim']",
        r.json.detail)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"template":"python:3.11-slim"}' })
      assert.are.equal(201, r.status)
      http(server, "DELETE", "/v1/sessions/" .. r.json.session_id, { key = acme })
    end)

    it("refuses egress without a tenant policy, presets expanded", function()
      local r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"egress":["evil.com"]}' })
      assert.are.equal(403, r.status)
      assert.are.equal('{"detail":"Egress not permitted for this tenant: [\'evil.com\']. Allowed: []"}', r.body)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"egress":[" PyPI. "]}' })
      assert.are.equal("Egress not permitted for this tenant: ['pypi.org', 'files.pythonhosted.org']. Allowed: []",
        r.json.detail)
    end)

    it("validates egress and metadata types like pydantic", function()
      local items = {}
      for i = 1, 21 do items[i] = '"h' .. i .. '.com"' end
      local r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"egress":[' .. table.concat(items, ",") .. "]}" })
      assert.are.equal(422, r.status)
      local e = r.json.detail[1]
      assert.are.equal("too_long", e.type)
      assert.are.same({ "body", "egress" }, e.loc)
      assert.are.equal("List should have at most 20 items after validation, not 21", e.msg)
      assert.are.same({ field_type = "List", max_length = 20, actual_length = 21 }, e.ctx)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"egress":"pypi"}' })
      assert.are.equal('{"detail":[{"type":"list_type","loc":["body","egress"],"msg":"Input should be a valid list","input":"pypi"}]}', r.body)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"egress":[1]}' })
      assert.are.equal('{"detail":[{"type":"string_type","loc":["body","egress",0],"msg":"Input should be a valid string","input":1}]}', r.body)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = '{"template":5}' })
      assert.are.equal("string_type", r.json.detail[1].type)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = '[]' })
      assert.are.equal("model_attributes_type", r.json.detail[1].type)
    end)
  end)

  describe("GET/DELETE sessions", function()
    it("lists only the tenant's sessions, newest first, without touching them", function()
      local a1 = create(server, acme)
      airlockd.sleep(0.05)
      local a2 = create(server, acme)
      local o1 = create(server, other)
      local r = http(server, "GET", "/v1/sessions", { key = acme })
      assert.are.equal(200, r.status)
      assert.are.equal("acme", r.json.tenant_id)
      local ids = {}
      for _, s in ipairs(r.json.sessions) do
        ids[#ids + 1] = s.session_id
        assert.are.equal("acme", s.tenant_id)
        assert.is_true(s.expires_at > s.created_at)
        assert.are.equal(512, s.disk_quota_mb)
        assert.are.same({}, s.egress)
      end
      assert.are.same({ a2, a1 }, ids)
      for _, id in ipairs({ a1, a2 }) do http(server, "DELETE", "/v1/sessions/" .. id, { key = acme }) end
      http(server, "DELETE", "/v1/sessions/" .. o1, { key = other })
    end)

    it("deletes with its own strings and wipes the workspace", function()
      local id = create(server, acme)
      local r = http(server, "DELETE", "/v1/sessions/" .. id, { key = other })
      assert.are.equal(403, r.status)
      assert.are.equal('{"detail":"Forbidden"}', r.body)
      assert.is_true(sh("test -d " .. q(workspace(server, id))))
      r = http(server, "DELETE", "/v1/sessions/" .. id, { key = acme })
      assert.are.equal(200, r.status)
      assert.are.equal('{"status":"terminated","session_id":"' .. id .. '"}', r.body)
      assert.is_false(sh("test -e " .. q(workspace(server, id))))
      r = http(server, "DELETE", "/v1/sessions/" .. id, { key = acme })
      assert.are.equal(404, r.status)
      assert.are.equal('{"detail":"Session not found"}', r.body)
      r = http(server, "GET", "/v1/sessions/" .. id .. "/read?path=a", { key = acme })
      assert.are.equal('{"detail":"Session not found or expired"}', r.body)
    end)
  end)

  describe("write and read", function()
    local id, ws
    lazy_setup(function()
      id = create(server, acme)
      ws = workspace(server, id)
    end)

    local function write(path, content, key)
      return http(server, "POST", "/v1/sessions/" .. id .. "/write",
        { key = key or acme, body = cjson.encode({ path = path, content = content }) })
    end

    local function read(path, key)
      return http(server, "GET", "/v1/sessions/" .. id .. "/read?path=" .. urlencode(path), { key = key or acme })
    end

    it("round-trips text, counts code points and creates parent directories", function()
      local r = write("pkg/sub/main.py", "h\195\169llo \226\156\147\n")
      assert.are.equal(200, r.status)
      assert.are.equal('{"status":"success","message":"Successfully wrote 8 characters to pkg/sub/main.py"}', r.body)
      r = read("pkg/sub/main.py")
      assert.are.equal(200, r.status)
      assert.are.equal('{"path":"pkg/sub/main.py","content":"h\195\169llo \226\156\147\\n"}', r.body)
      assert.are.equal("1000:1000", (io.popen("stat -c %u:%g " .. q(ws .. "/pkg/sub/main.py")):read("*l")))
      assert.are.equal("1000:1000", (io.popen("stat -c %u:%g " .. q(ws .. "/pkg/sub")):read("*l")))
    end)

    it("normalises CRLF and lone CR on read, not on write", function()
      write("crlf.txt", "a\r\nb\rc\n")
      assert.are.equal("a\r\nb\rc\n", read_file(ws .. "/crlf.txt"))
      assert.are.equal("a\nb\nc\n", read("crlf.txt").json.content)
    end)

    it("answers 200 with the exact text for a missing file", function()
      local r = read("nope dir/n\195\169pe.txt")
      assert.are.equal(200, r.status)
      assert.are.equal("Error: File 'nope dir/n\195\169pe.txt' does not exist.", r.json.content)
      assert.are.equal("nope dir/n\195\169pe.txt", r.json.path)
    end)

    it("needs the path query parameter", function()
      local r = http(server, "GET", "/v1/sessions/" .. id .. "/read", { key = acme })
      assert.are.equal(422, r.status)
      assert.are.equal('{"detail":[{"type":"missing","loc":["query","path"],"msg":"Field required","input":null}]}', r.body)
    end)

    it("validates write bodies", function()
      local r = http(server, "POST", "/v1/sessions/" .. id .. "/write", { key = acme, body = '{"path":1}' })
      assert.are.equal(422, r.status)
      assert.are.equal('{"detail":[{"type":"string_type","loc":["body","path"],"msg":"Input should be a valid string","input":1},' ..
        '{"type":"missing","loc":["body","content"],"msg":"Field required","input":{"path":1}}]}', r.body)
    end)

    it("refuses paths that leave the workspace", function()
      os.execute("ln -s /etc/passwd " .. q(ws .. "/passwd_link"))
      os.execute("ln -s /etc " .. q(ws .. "/etc_link"))
      os.execute("mkdir -p " .. q(ws .. "_evil") .. " && echo secret > " .. q(ws .. "_evil/x"))
      for _, p in ipairs({ "../escape.txt", "a/../../x", "../../etc/passwd", "/etc/passwd", "/workspace/hello.txt",
                           "passwd_link", "etc_link/hostname", "../" .. id .. "_evil/x" }) do
        local expected = "Access denied: symlink/path traversal outside workspace for '" .. p .. "'"
        local r = read(p)
        assert.are.equal(403, r.status, p)
        assert.are.equal(expected, r.json.detail)
        r = write(p, "x")
        assert.are.equal(403, r.status, p)
        assert.are.equal(expected, r.json.detail)
      end
      assert.are.equal("secret\n", read_file(ws .. "_evil/x"))
      os.execute("rm -rf " .. q(ws .. "_evil"))
    end)

    it("allows inward symlinks and .. that stays inside", function()
      write("real/target.txt", "inside")
      os.execute("ln -s real " .. q(ws .. "/inlink"))
      assert.are.equal("inside", read("inlink/target.txt").json.content)
      assert.are.equal("inside", read("real/../real/./target.txt").json.content)
      assert.are.equal(200, write("a/../b.txt", "b").status)
      assert.are.equal("b", read_file(ws .. "/b.txt"))
    end)

    it("answers 400 naming the parameter for a NUL byte in a path, on every files route", function()
      local base = "/v1/sessions/" .. id
      local query = "Invalid path: the query parameter 'path' contains a NUL byte, which no file name can."
      local body = "Invalid path: the body's field 'path' contains a NUL byte, which no file name can."
      local cases = {
        { query, http(server, "GET", base .. "/read?path=keep.txt%00.png", { key = acme }) },
        { query, http(server, "GET", base .. "/read?path=a%00b", { key = acme,
                                                                  headers = { "Accept: application/octet-stream" } }) },
        { query, http(server, "GET", base .. "/list?path=a%00b", { key = acme }) },
        { query, http(server, "POST", base .. "/write?path=a%00b", { key = acme, body = "x",
                                                                     content_type = "application/octet-stream" }) },
        { body, http(server, "POST", base .. "/write", { key = acme, body = '{"path":"a\\u0000b","content":"x"}' }) },
        { body, http(server, "POST", base .. "/write", { key = acme, body = '{"content":"x","path":"\\u0000"}' }) },
      }
      for i, c in ipairs(cases) do
        assert.are.same({ 400, { detail = c[1] } }, { c[2].status, c[2].json }, "case " .. i .. ": " .. c[2].body)
      end
      assert.is_nil(read_file(ws .. "/a"))
      assert.are.equal(200, read("keep.txt").status)
    end)

    it("answers a plain-text 500 for directories, empty paths and non-UTF-8 files", function()
      write_file(ws .. "/bin.dat", "\255\254")
      local cases = {
        function() return read("pkg") end,
        function() return read(".") end,
        function() return read("bin.dat") end,
        function() return write("", "x") end,
        function() return write("pkg", "x") end,
        function() return write("crlf.txt/below", "x") end,
      }
      for i, f in ipairs(cases) do
        local r = f()
        assert.are.equal(500, r.status, "case " .. i)
        assert.are.equal("Internal Server Error", r.body)
        assert.are.equal("text/plain; charset=utf-8", r.headers["content-type"])
      end
      assert.is_true(airlockd.alive(server))
    end)

    it("keeps other tenants out with the shared 403 text", function()
      for _, r in ipairs({ read("b.txt", other), write("x", "y", other) }) do
        assert.are.equal(403, r.status)
        assert.are.equal('{"detail":"Forbidden: Access denied to this session"}', r.body)
      end
      local r = http(server, "GET", "/v1/sessions/sbx_000000000000/read?path=x", { key = acme })
      assert.are.equal(404, r.status)
      assert.are.equal('{"detail":"Session not found or expired"}', r.body)
    end)

    it("reports a validation error before an unknown session", function()
      local r = http(server, "POST", "/v1/sessions/sbx_000000000000/write", { key = acme, body = "{}" })
      assert.are.equal(422, r.status)
    end)
  end)

  describe("routing", function()
    it("answers unknown routes with 404 Not Found", function()
      for _, p in ipairs({ "/", "/mcp", "/v1", "/v1/nothing", "/v1/sessions/x/y" }) do
        local r = http(server, "GET", p)
        assert.are.equal(404, r.status, p)
        assert.are.equal('{"detail":"Not Found"}', r.body)
      end
    end)

    it("answers a wrong method with 405 and Allow", function()
      local r = http(server, "PUT", "/v1/sessions", { key = acme })
      assert.are.equal(405, r.status)
      assert.are.equal('{"detail":"Method Not Allowed"}', r.body)
      assert.are.equal("POST", r.headers["allow"])
      r = http(server, "POST", "/v1/sessions/sbx_1", { key = acme })
      assert.are.equal("DELETE", r.headers["allow"])
      r = http(server, "POST", "/healthz")
      assert.are.equal(405, r.status)
      assert.truthy(r.headers["allow"]:find("GET", 1, true))
    end)

    it("redirects a trailing slash with 307 and an empty body", function()
      local r = http(server, "GET", "/v1/sessions/?x=1", { key = acme })
      assert.are.equal(307, r.status)
      assert.are.equal("http://127.0.0.1:" .. server.port .. "/v1/sessions?x=1", r.headers["location"])
      assert.are.equal("", r.body)
      r = http(server, "GET", "/v1/nothing/", { key = acme })
      assert.are.equal(404, r.status)
    end)

    it("serves HEAD on GET routes", function()
      local r = http(server, "HEAD", "/healthz")
      assert.are.equal(200, r.status)
    end)
  end)

  describe("account routes", function()
    it("reports usage with limits", function()
      local r = http(server, "GET", "/v1/usage", { key = other })
      assert.are.equal(200, r.status)
      assert.are.equal("other", r.json.tenant_id)
      assert.are.same({ max_sessions = 10, requests_per_minute = 120, max_concurrent_exec = 4 }, r.json.limits)
      assert.are.equal(0, r.json.commands_running)
      assert.is_number(r.json.requests_available)
      assert.truthy(r.body:find('^{"tenant_id":"other","limits":{"max_sessions":10,"requests_per_minute":120,' ..
        '"max_concurrent_exec":4},"sessions_open":%d+,"commands_running":0,"requests_available":%d+}$'))
    end)

    it("gives the egress policy, the egress log and the not-enabled answers", function()
      local r = http(server, "GET", "/v1/egress/policy", { key = acme })
      assert.are.equal('{"tenant_id":"acme","allowed":[]}', r.body)
      local id = create(server, acme)
      r = http(server, "GET", "/v1/sessions/" .. id .. "/egress?limit=0", { key = acme })
      assert.are.equal('{"session_id":"' .. id .. '","events":[]}', r.body)
      r = http(server, "GET", "/v1/sessions/" .. id .. "/egress?limit=abc", { key = acme })
      assert.are.equal(422, r.status)
      assert.are.same({ "query", "limit" }, r.json.detail[1].loc)
      r = http(server, "GET", "/v1/sessions/" .. id .. "/egress", { key = other })
      assert.are.equal(403, r.status)
      r = http(server, "GET", "/v1/audit?limit=1", { key = acme })
      assert.are.equal(501, r.status)
      assert.are.equal('{"detail":"The audit log is not enabled on this server (SANDBOX_AUDIT)."}', r.body)
      r = http(server, "GET", "/v1/keys", { key = acme })
      assert.are.equal(501, r.status)
      assert.are.equal('{"detail":"Self-service keys are not enabled on this server (SANDBOX_KEYSTORE)."}', r.body)
      r = http(server, "GET", "/v1/keys", {})
      assert.are.equal(401, r.status)
      r = http(server, "GET", "/v1/admin/keys", {})
      assert.are.equal(404, r.status)
      assert.are.equal('{"detail":"The admin API is not enabled on this server."}', r.body)
      http(server, "DELETE", "/v1/sessions/" .. id, { key = acme })
    end)
  end)

  describe("robustness", function()
    it("survives garbage requests", function()
      local port = server.port
      local garbage = {
        "GARBAGE\r\n\r\n",
        "GET /v1/sessions/\1\2\3/read?path=%ff%00 HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. acme .. "\r\n\r\n",
        "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n",
        "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        string.rep("A", 70000) .. "\r\n\r\n",
      }
      for _, g in ipairs(garbage) do
        local tmp = proc.temp_path()
        write_file(tmp, g)
        os.execute("timeout 5 bash -c " .. q("cat " .. q(tmp) .. " > /dev/tcp/127.0.0.1/" .. port) .. " 2>/dev/null")
        os.remove(tmp)
      end
      local r = http(server, "GET", "/v1/sessions/" .. string.rep("%ff", 300) .. "/read?path=" .. string.rep("%c3", 100),
        { key = acme })
      assert.are.equal(404, r.status)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = string.rep("[", 100000) })
      assert.truthy(r.status == 400 or r.status == 422)
      r = http(server, "POST", "/v1/sessions", { key = acme, body = "x=1", content_type = "application/x-www-form-urlencoded" })
      assert.are.equal(422, r.status)
      assert.are.equal("model_attributes_type", r.json.detail[1].type)
      assert.is_true(airlockd.alive(server))
      assert.are.equal(200, http(server, "GET", "/healthz").status)
    end)

    it("never logs keys", function()
      local log = airlockd.log(server)
      assert.is_nil(log:find(acme, 1, true))
      assert.is_nil(log:find(other, 1, true))
      assert.truthy(log:find("GET /healthz 200", 1, true))
    end)
  end)
end)

describe("airlockd limits and lifetime", function()
  it("refuses to start without a key or with duplicate keys, naming the variable", function()
    local bin = os.getenv("AIRLOCKD_BIN") or "build/airlockd"
    local function run(envs)
      local p = io.popen("env -i " .. envs .. " " .. q(bin) .. " --listen 127.0.0.1:0 --state-dir /tmp/airlockd-nostart 2>&1; echo rc=$?")
      local out = p:read("*a")
      p:close()
      return out
    end
    local out = run("")
    assert.truthy(out:find("SANDBOX_API_KEY", 1, true), out)
    assert.truthy(out:find("rc=2", 1, true), out)
    out = run("SANDBOX_API_KEYS=a:k1,b:k1")
    assert.truthy(out:find("SANDBOX_API_KEYS", 1, true) and out:find("rc=2", 1, true), out)
    out = run("SANDBOX_API_KEYS=a:k1 SANDBOX_TENANT_LIMITS='{\"a\":{\"max_sessions\":true}}'")
    assert.truthy(out:find("SANDBOX_TENANT_LIMITS", 1, true) and out:find("rc=2", 1, true), out)
    os.execute("rm -rf /tmp/airlockd-nostart")
  end)

  it("rate-limits per tenant with an integer Retry-After; bad keys use no tokens", function()
    local s = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = '{"acme":{"requests_per_minute":3}}' } })
    local ok, err = pcall(function()
      for _ = 1, 5 do http(s, "GET", "/v1/usage", { key = "bad" }) end
      for i = 1, 3 do assert.are.equal(200, http(s, "GET", "/v1/sessions", { key = s.tenants.acme }).status, i) end
      local r = http(s, "GET", "/v1/usage", { key = s.tenants.acme })
      assert.are.equal(429, r.status)
      -- the next token in 20 s at 3 a minute, less what refilled while the three ran (a loaded
      -- machine): whole seconds, the same in the header and the text
      local wait = tonumber(r.headers["retry-after"])
      assert.truthy(wait and wait == math.floor(wait) and wait >= 1 and wait <= 20, r.headers["retry-after"])
      assert.are.equal('{"detail":"Rate limit of 3 requests per minute exceeded; retry in ' .. wait .. ' s."}', r.body)
      assert.are.equal(200, http(s, "GET", "/v1/usage", { key = s.tenants.other }).status)
      assert.are.equal(200, http(s, "GET", "/healthz").status)
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("limits open sessions; refused creations use no slot; delete frees one", function()
    local s = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = '{"*":{"max_sessions":2}}' } })
    local ok, err = pcall(function()
      local key = s.tenants.acme
      local a = create(s, key)
      -- (a name no template can have: the contract's 400; a well-formed unknown one is a 404)
      assert.are.equal(400, http(s, "POST", "/v1/sessions", { key = key, body = '{"template":"ubuntu:22.04"}' }).status)
      create(s, key)
      local r = http(s, "POST", "/v1/sessions", { key = key, body = "{}" })
      assert.are.equal(429, r.status)
      assert.is_nil(r.headers["retry-after"])
      assert.are.equal('{"detail":"Session limit reached: 2 of 2 sessions are open. Delete one first."}', r.body)
      create(s, s.tenants.other)
      http(s, "DELETE", "/v1/sessions/" .. a, { key = key })
      create(s, key)
      assert.are.equal(2, http(s, "GET", "/v1/usage", { key = key }).json.sessions_open)
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("reaps idle sessions after SANDBOX_SESSION_TTL and wipes them", function()
    -- busy is touched every second, well within the TTL of 4 s however slow a call; idle is
    -- left alone for 6 s (the waits are the input: time passing, not a synchronisation)
    local s = airlockd.start({ env = { SANDBOX_SESSION_TTL = "4" } })
    local ok, err = pcall(function()
      local key = s.tenants.acme
      local idle = create(s, key)
      local busy = create(s, key)
      for _ = 1, 6 do
        airlockd.sleep(1)
        assert.are.equal(200, http(s, "GET", "/v1/sessions/" .. busy .. "/read?path=x", { key = key }).status)
      end
      local r = http(s, "GET", "/v1/sessions/" .. idle .. "/read?path=x", { key = key })
      assert.are.equal(404, r.status)
      assert.are.equal('{"detail":"Session not found or expired"}', r.body)
      assert.are.equal(404, http(s, "DELETE", "/v1/sessions/" .. idle, { key = key }).status)
      assert.is_true(proc.wait_until(10, function() return not sh("test -e " .. q(workspace(s, idle))) end))
      assert.are.equal(1, http(s, "GET", "/healthz").json.active_sessions)
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("counts a session's idle time from the end of its last call, not its start", function()
    -- a command longer than the TTL of 4 s: the session is not idle while it runs, and its idle
    -- time (last_accessed_at, expires_at) starts when the command ends
    local s = airlockd.start({ env = { SANDBOX_SESSION_TTL = "4" } })
    local ok, err = pcall(function()
      local key = s.tenants.acme
      local id = create(s, key)
      local before = os.time()
      local r = http_client.exec(s, key, id, "sleep 6", 30)
      assert.are.equal(200, r.status, r.body)
      local listed = http(s, "GET", "/v1/sessions", { key = key }).json.sessions
      assert.are.equal(1, #listed)
      assert.are.equal(id, listed[1].session_id)
      -- os.time counts whole seconds: the command ended at least 6 s after `before`
      assert.is_true(listed[1].last_accessed_at >= before + 5, cjson.encode(listed[1]))
      assert.are.equal(listed[1].last_accessed_at + 4, listed[1].expires_at)
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("enforces the disk quota on writes with the exact 413 text", function()
    local s = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "1" } })
    local ok, err = pcall(function()
      local key = s.tenants.acme
      local id, cr = create(s, key)
      assert.are.equal(1, cr.json.disk_quota_mb)
      local big = string.rep("x", 2 * 1024 * 1024)
      local r = http(s, "POST", "/v1/sessions/" .. id .. "/write", { key = key, body = cjson.encode({ path = "big.txt", content = big }) })
      assert.are.equal(413, r.status)
      assert.are.equal('{"detail":"Writing big.txt would use 2.0 MB of the workspace\'s 1 MB disk quota. Delete files first."}', r.body)
      assert.is_false(sh("test -e " .. q(workspace(s, id) .. "/big.txt")))
      r = http(s, "POST", "/v1/sessions/" .. id .. "/write", { key = key, body = cjson.encode({ path = "small.txt", content = "ok" }) })
      assert.are.equal(200, r.status)
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("expands egress presets against SANDBOX_EGRESS_POLICY", function()
    local s = airlockd.start({ env = { SANDBOX_EGRESS_POLICY = '{"acme":["pypi","*.example.com","api.openai.com"]}' } })
    local ok, err = pcall(function()
      local key = s.tenants.acme
      local r = http(s, "POST", "/v1/sessions", { key = key, body = '{"egress":["pypi","API.example.com.","*.a.example.com"]}' })
      assert.are.equal(201, r.status, r.body)
      assert.are.same({ "pypi.org", "files.pythonhosted.org", "api.example.com", "*.a.example.com" }, r.json.egress)
      r = http(s, "POST", "/v1/sessions", { key = key, body = '{"egress":["example.com","*.com","github.com"]}' })
      assert.are.equal(403, r.status)
      assert.are.equal("Egress not permitted for this tenant: ['example.com', '*.com', 'github.com']. " ..
        "Allowed: ['pypi.org', 'files.pythonhosted.org', '*.example.com', 'api.openai.com']", r.json.detail)
      r = http(s, "GET", "/v1/egress/policy", { key = key })
      assert.are.equal('{"tenant_id":"acme","allowed":["pypi.org","files.pythonhosted.org","*.example.com","api.openai.com"]}', r.body)
      r = http(s, "GET", "/v1/egress/policy", { key = s.tenants.other })
      assert.are.equal('{"tenant_id":"other","allowed":[]}', r.body)
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("keeps workspaces on SIGTERM: saved, unmounted, their images kept for the next start", function()
    local s = airlockd.start()
    local id = create(s, s.tenants.acme)
    local ws = workspace(s, id)
    assert.is_true(sh("test -d " .. q(ws)))
    os.execute("kill -TERM " .. s.pid)
    for _ = 1, 100 do
      if not airlockd.alive(s) then break end
      airlockd.sleep(0.05)
    end
    assert.is_false(airlockd.alive(s))
    assert.is_false(sh("test -e " .. q(ws))) -- its disk is no longer mounted
    assert.is_true(sh("test -f " .. q(s.dir .. "/state/images/" .. id .. ".img")))
    assert.truthy(read_file(s.dir .. "/state/sessions.json"):find(id, 1, true))
    assert.are.same({ mounts = {}, loops = {} }, airlockd.settled(s.dir))
    assert.truthy(airlockd.log(s):find("shutting down", 1, true))
    airlockd.stop(s)
  end)
end)

describe("airlockd exec", function()
  local server, key, id

  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = '{"other":{"max_concurrent_exec":1}}',
                                      SANDBOX_WORKSPACE_QUOTA_MB = "2" } })
    key = server.tenants.acme
    id = create(server, key)
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  local function exec(command, timeout, k, sid)
    local body = { command = command }
    if timeout then body.timeout_seconds = timeout end
    return http(server, "POST", "/v1/sessions/" .. (sid or id) .. "/exec", { key = k or key, body = cjson.encode(body) })
  end

  it("runs echo hi with the exact output text and field order", function()
    assert.is_true(has_sandbox(server))
    local r = exec("echo hi")
    assert.are.equal(200, r.status, r.body)
    assert.are.equal('{"command":"echo hi","output":"[STDOUT]:\\nhi\\n[EXIT CODE]: 0","stdout":"hi\\n","stderr":"",' ..
      '"exit_code":0,"timed_out":false,"oom_killed":false,"warnings":[]}', r.body)
  end)

  it("keeps files between commands and reports stderr and exit codes", function()
    assert.are.equal(200, exec("echo persisted > f.txt").status)
    local r = exec("cat f.txt; echo oops >&2; exit 3")
    assert.are.equal("[STDOUT]:\npersisted\n[STDERR]:\noops\n[EXIT CODE]: 3", r.json.output)
    assert.are.equal(3, r.json.exit_code)
    r = http(server, "GET", "/v1/sessions/" .. id .. "/read?path=f.txt", { key = key })
    assert.are.equal("persisted\n", r.json.content)
    assert.are.equal("[EXIT CODE]: 0", exec("").json.output)
  end)

  it("strips Unicode whitespace in output and replaces invalid UTF-8", function()
    local r = exec("printf '\\302\\240\\342\\200\\203 hi \\343\\200\\200\\n\\034'; printf '\\377x' >&2")
    assert.are.equal("\194\160\226\128\131 hi \227\128\128\n\028", r.json.stdout)
    assert.are.equal("[STDOUT]:\nhi\n[STDERR]:\n\239\191\189x\n[EXIT CODE]: 0", r.json.output)
    assert.are.equal("\239\191\189x", r.json.stderr)
  end)

  it("reports a timeout exactly", function()
    local r = exec("echo early; sleep 5", 1)
    assert.are.equal(200, r.status)
    assert.are.equal('{"command":"echo early; sleep 5","output":"[TIMEOUT]: Execution exceeded 1s limit.\\n[EXIT CODE]: -1",' ..
      '"stdout":"","stderr":"","exit_code":-1,"timed_out":true,"oom_killed":false,' ..
      '"warnings":["Execution exceeded 1s limit."]}', r.body)
  end)

  it("validates timeout_seconds like pydantic's lax int", function()
    local function body(b) return http(server, "POST", "/v1/sessions/" .. id .. "/exec", { key = key, body = b }) end
    local r = body('{"command":"true","timeout_seconds":0}')
    assert.are.equal('{"detail":[{"type":"greater_than_equal","loc":["body","timeout_seconds"],' ..
      '"msg":"Input should be greater than or equal to 1","input":0,"ctx":{"ge":1}}]}', r.body)
    r = body('{"command":"true","timeout_seconds":61}')
    assert.are.equal('{"detail":[{"type":"less_than_equal","loc":["body","timeout_seconds"],' ..
      '"msg":"Input should be less than or equal to 60","input":61,"ctx":{"le":60}}]}', r.body)
    r = body('{"command":"true","timeout_seconds":600}')
    assert.are.equal(422, r.status)
    r = body('{"command":"true","timeout_seconds":15.5}')
    assert.are.equal("int_from_float", r.json.detail[1].type)
    r = body('{"command":"true","timeout_seconds":"abc"}')
    assert.are.equal("int_parsing", r.json.detail[1].type)
    r = body('{"command":1}')
    assert.are.equal("string_type", r.json.detail[1].type)
    assert.are.equal(200, body('{"command":"true","timeout_seconds":"15"}').status)
    assert.are.equal(200, body('{"command":"true","timeout_seconds":15.0}').status)
    r = body("not json")
    assert.are.equal('{"detail":[{"type":"json_invalid","loc":["body",0],"msg":"JSON decode error","input":{},' ..
      '"ctx":{"error":"Expecting value"}}]}', r.body)
  end)

  it("limits concurrent commands per tenant without Retry-After, the limit also in X-Airlock-Exec-Limit", function()
    local okey = server.tenants.other
    local oid = create(server, okey)
    local done = proc.temp_path()
    os.execute("curl -s -H 'Content-Type: application/json' -H " .. q("X-API-Key: " .. okey) ..
      " --data-binary '{\"command\":\"sleep 3\"}' " .. q(server.url .. "/v1/sessions/" .. oid .. "/exec") ..
      " > " .. q(done) .. " 2>&1 &")
    local r
    for _ = 1, 40 do
      airlockd.sleep(0.1)
      r = exec("true", nil, okey, oid)
      if r.status == 429 then break end
    end
    assert.are.equal(429, r.status)
    assert.is_nil(r.headers["retry-after"])
    assert.are.equal('{"detail":"Too many commands running at once: 1 allowed. Wait for one to finish."}', r.body)
    -- the same number for clients, without reading the sentence (issue 17 item 3)
    assert.are.equal("1", r.headers["x-airlock-exec-limit"])
    local ok = exec("true")
    assert.are.equal(200, ok.status) -- other tenants are unaffected
    assert.is_nil(ok.headers["x-airlock-exec-limit"])
    for _ = 1, 100 do
      if (read_file(done) or ""):find("exit_code", 1, true) then break end
      airlockd.sleep(0.1)
    end
    assert.are.equal(200, exec("true", nil, okey, oid).status)
    os.remove(done)
  end)

  it("warns when the workspace is over quota and then refuses writes", function()
    -- a little over the 2 MB quota: the disk holds the quota and at most ~0.6 MB more
    local r = exec("head -c 2150000 /dev/zero > big.bin")
    assert.are.equal(0, r.json.exit_code)
    assert.are.equal(1, #r.json.warnings)
    assert.truthy(r.json.warnings[1]:match("^Workspace uses %d+%.%d MB, over its 2 MB disk quota%. Delete files before writing more%.$"),
      r.json.warnings[1])
    assert.truthy(r.json.output:find("[WARNING]: Workspace uses", 1, true))
    r = http(server, "POST", "/v1/sessions/" .. id .. "/write", { key = key, body = '{"path":"a.txt","content":"x"}' })
    assert.are.equal(413, r.status)
    r = exec("rm big.bin")
    assert.are.same({}, r.json.warnings)
    r = http(server, "POST", "/v1/sessions/" .. id .. "/write", { key = key, body = '{"path":"a.txt","content":"x"}' })
    assert.are.equal(200, r.status)
  end)

  it("uses the session lookup strings", function()
    local r = exec("true", nil, server.tenants.other)
    assert.are.equal('{"detail":"Forbidden: Access denied to this session"}', r.body)
    r = exec("true", nil, key, "sbx_000000000000")
    assert.are.equal('{"detail":"Session not found or expired"}', r.body)
  end)
end)

describe("exec_format (C unit test)", function()
  it("formats output and strips like Python", function()
    local out, ok = require("support.c_unit").run({ "spec/c/exec_format_test.c", "src/server/text/exec_format.c",
      "src/server/text/pystr.c", "src/server/text/utf8.c", "src/server/util/buf.c" })
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)

