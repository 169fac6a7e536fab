-- luacheck: max line length 160
-- Robustness (issue #3 item 8): airlockd keeps serving while commands run, answers malformed
-- HTTP and junk with a 4xx (or the contract's plain 500) and never crashes, and survives a
-- 15-second randomised-request run (AIRLOCK_FUZZ_SEED repeats one) with its session count exact. Loopback only.
-- The only time bounds here are generous ones that prove "did not wait for the commands".
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local fuzz = require "support.fuzz"
local host_state = require "support.host_state"
local proc = require "support.proc"

local http = http_client.request

describe("airlockd robustness", function()
  local server, key

  lazy_setup(function()
    server = airlockd.start({ env = {
      SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000,"max_sessions":30}}',
      -- the fuzzer opens up to 60 sessions: small disks keep that to ~1.2 GB of the host's
      SANDBOX_WORKSPACE_QUOTA_MB = "16",
    } })
    key = server.tenants.acme
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  local function alive()
    assert.is_true(airlockd.alive(server))
    local status, _, body = fuzz.request(server, "GET", "/healthz")
    assert.are.equal(200, status)
    return body
  end

  it("serves file and usage calls while four commands of one tenant run", function()
    local id = http_client.create(server, key).json.session_id
    local jobs = {}
    -- each command runs until the spec writes go (50 s at most): the calls below happen while
    -- they run, however long the calls take
    for i = 1, 4 do
      jobs[i] = http_client.exec_async(server, key, id, http_client.until_go(50) .. "echo done " .. i, 60)
    end
    -- wait until all four hold their slots (a probe racing them could take one), then a fifth is
    -- refused; counted by airlockd, so in either SANDBOX_EXEC_MODE (in session mode the four run
    -- in the session's one sandbox, not in four `runsc run`s)
    local function running()
      local _, _, usage = fuzz.request(server, "GET", "/v1/usage", key)
      return usage:find('"commands_running":4', 1, true) ~= nil
    end
    assert.truthy(proc.wait_until(60, running, 0.05))
    local fifth = http_client.exec(server, key, id, "true")
    assert.are.equal('{"detail":"Too many commands running at once: 4 allowed. Wait for one to finish."}', fifth.body)
    for i = 1, 5 do
      local status = fuzz.request(server, "POST", "/v1/sessions/" .. id .. "/write", key,
        '{"path":"during' .. i .. '.txt","content":"x"}')
      assert.are.equal(200, status)
      status = fuzz.request(server, "GET", "/v1/sessions/" .. id .. "/read?path=during" .. i .. ".txt", key)
      assert.are.equal(200, status)
      local _, _, usage = fuzz.request(server, "GET", "/v1/usage", key)
      assert.truthy(usage:find('"commands_running":4', 1, true), usage)
    end
    for i = 1, 4 do assert.is_false(jobs[i].done(), "exec " .. i .. " finished before the file calls") end
    assert.are.equal(200, http_client.write(server, key, id, "go", "").status)
    for i = 1, 4 do
      local r = jobs[i].wait(60)
      assert.are.equal("done " .. i .. "\n", r and r.stdout)
    end
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)

  describe("malformed HTTP over a raw socket", function()
    local k
    before_each(function() k = server.tenants.acme end)

    local function post(headers_and_body)
      return "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. k .. "\r\n" .. headers_and_body
    end

    -- status: the exact answer, or false for "connection closed without an answer"
    local cases = {
      { "a garbage request line", function() return "GARBAGE\r\n\r\n" end, false },
      { "NUL bytes", function() return "\0\0\0\0\r\n\r\n" end, false },
      { "binary junk as method and path", function() return "\1\2\3 \255\254 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" end, 404 },
      { "an unknown HTTP version", function() return "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n" end, 505 },
      { "a 300 KB header", function() return "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " .. string.rep("a", 300000) .. "\r\n\r\n" end, 431 },
      { "20000 headers", function() return "GET /healthz HTTP/1.1\r\nHost: x\r\n" .. string.rep("X-A: b\r\n", 20000) .. "\r\n" end, 431 },
      { "a 300 KB request line", function() return "GET /" .. string.rep("a", 300000) .. " HTTP/1.1\r\nHost: x\r\n\r\n" end, 414 },
      { "a truncated body", function() return post("Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":") end, false },
      { "an invalid chunk size", function() return post("Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n") end, 400 },
      { "an overflowing chunk size", function() return post("Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nabc\r\n") end, 413 },
      { "a negative Content-Length", function() return post("Content-Length: -5\r\n\r\n") end, 400 },
      { "a Content-Length beyond 64 bits", function() return post("Content-Length: 99999999999999999999\r\n\r\n") end, 413 },
      { "a 1 GB Content-Length", function() return post("Content-Length: 999999999\r\n\r\n") end, 413 },
      -- (the client keeps its side open: libmicrohttpd may take a half-closed client whose
      -- request it has not read yet as gone, and that flaked on the original server too)
      { "binary junk in the path and query", function()
        return "GET /v1/sessions/\1\2\255/read?path=\255 HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. k .. "\r\nConnection: close\r\n\r\n" end, 404,
        "keep open" },
      -- a raw NUL ends the target where MHD parses it (HTTP framing: spec/server/http_framing_spec.lua)
      { "a raw NUL in the query", function()
        return "GET /v1/sessions/x/read?path=\0 HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. k .. "\r\nConnection: close\r\n\r\n" end, 400,
        "keep open" },
      { "a binary key", function() return "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nX-API-Key: \255\254\1\r\nConnection: close\r\n\r\n" end, 401 },
    }
    for _, c in ipairs(cases) do
      it("answers " .. c[1] .. " with " .. (c[3] and tostring(c[3]) or "a closed connection") .. " and stays up", function()
        local status, raw = fuzz.raw(server, c[2](), 10, c[4] ~= "keep open")
        if c[3] then
          assert.are.equal(c[3], status, raw)
        else
          assert.is_nil(status, raw)
        end
        alive()
      end)
    end

    it("answers JSON garbage and huge bodies with 4xx (or the plain 500)", function()
      local bodies = {
        { "{", 422 }, { "[1,2", 422 }, { "\255\254", 400 }, { string.rep("[", 100000), 400 },
        { string.rep('{"a":', 50000), 400 }, { "null", 422 }, { '"str"', 422 },
        -- numbers beyond a double (Python would parse them as inf): the contract's plain 500
        { "1e999999", 500 }, { '{"template":1e400}', 500 },
      }
      for _, b in ipairs(bodies) do
        local status, raw, body = fuzz.request(server, "POST", "/v1/sessions", k, b[1])
        assert.are.equal(b[2], status, raw)
        if status == 500 then assert.are.equal("Internal Server Error", body) end
      end
      -- 20 MB of junk where JSON is expected: over the route's 1 MiB cap (README "Limits")
      local status = fuzz.request(server, "POST", "/v1/sessions", k, string.rep("\1junk", 4 * 1024 * 1024))
      assert.are.equal(413, status)
      status = fuzz.request(server, "POST", "/v1/sessions", k, string.rep("\1junk", 200 * 1024))
      assert.are.equal(422, status)
      -- a body over the 64 MB cap, actually sent
      local id = http_client.create(server, k).json.session_id
      local big = '{"path":"big.txt","content":"' .. string.rep("x", 65 * 1024 * 1024) .. '"}'
      local st, _, body = fuzz.request(server, "POST", "/v1/sessions/" .. id .. "/write", k, big)
      assert.are.equal(413, st)
      assert.are.equal('{"detail":"Request body too large"}', body)
      assert.are.equal(200, http_client.delete(server, k, id).status)
      alive()
    end)

    it("answers junk paths, ids and methods through the normal client", function()
      local id = http_client.create(server, k).json.session_id
      for _, p in ipairs({ "%ff%fe", "%2e%2e/%2e%2e/etc/passwd" }) do
        local r = http(server, "GET", "/v1/sessions/" .. id .. "/read?path=" .. p, { key = k })
        assert.truthy(r.status == 403 or r.status == 500 or r.status == 200, p .. " -> " .. r.status)
        if r.status == 500 then assert.are.equal("Internal Server Error", r.body) end
      end
      -- a NUL byte is a 400 naming the parameter (docs/server.md), as every other bad path
      for _, p in ipairs({ "%00", "a%00b" }) do
        local r = http(server, "GET", "/v1/sessions/" .. id .. "/read?path=" .. p, { key = k })
        assert.are.equal(400, r.status, p .. " -> " .. r.body)
        assert.truthy(r.body:find("'path' contains a NUL byte", 1, true), r.body)
      end
      -- 300 levels: over the documented depth, refused before any filesystem work
      local deep = http(server, "GET", "/v1/sessions/" .. id .. "/read?path=" .. string.rep("a/", 300) .. "f", { key = k })
      assert.are.equal(400, deep.status)
      assert.are.equal('{"detail":"Path too deep: at most 256 directory levels, also once symlinks are resolved."}', deep.body)
      assert.are.equal(404, http(server, "GET", "/v1/sessions/" .. string.rep("%ff", 300) .. "/read?path=x", { key = k }).status)
      assert.are.equal(405, http(server, "PATCH", "/v1/sessions", { key = k }).status)
      assert.are.equal(200, http_client.delete(server, k, id).status)
      alive()
    end)
  end)

  it("survives 15 seconds of random requests, slow and oversized clients among them, with its session count exact", function()
    local before = tonumber(alive():match('"active_sessions":(%d+)'))
    local seed = tonumber(os.getenv("AIRLOCK_FUZZ_SEED") or "")
    local stats = fuzz.run(server, { keys = server.tenants, seconds = 15, max_requests = 20000, seed = seed, hostile = true })
    local counts = {}
    for s, n in pairs(stats.by_status) do counts[#counts + 1] = tostring(s) .. "=" .. n end
    table.sort(counts)
    print(string.format("fuzz: seed %d, %d requests: %s; %d slow clients, %d of them cut", stats.seed, stats.requests,
      table.concat(counts, " "), stats.slow_opened, stats.slow_cut))
    assert.are.same({}, stats.unexpected)
    assert.truthy(stats.requests >= 100, stats.requests)
    local open = 0
    for _ in pairs(stats.open) do open = open + 1 end
    local body = alive()
    assert.are.equal(string.format('{"status":"healthy","active_sessions":%d}', before + open), body)
    for id, owner in pairs(stats.open) do
      assert.are.equal(200, http_client.delete(server, owner, id).status, id)
    end
    assert.are.equal(string.format('{"status":"healthy","active_sessions":%d}', before), alive())
    -- nothing of the fuzzer's left on disk either: every workspace disk is a session's, or a
    -- tenant's spare (made ahead for its next create, its sandbox waiting frozen), one per
    -- tenant at most
    local sessions, ntenants = {}, 0
    for _, tenant_key in pairs(server.tenants) do
      ntenants = ntenants + 1
      for _, item in ipairs(http_client.request(server, "GET", "/v1/sessions", { key = tenant_key }).json.sessions) do
        sessions[item.session_id] = true
      end
    end
    local root = host_state.cgroup_root(server.dir .. "/state")
    local extras, not_spare
    proc.wait_until(60, function()
      extras, not_spare = {}, nil
      local waiting = table.concat(host_state.waiting_sandboxes(root), "\n")
      local p = io.popen("ls " .. airlockd.shell_quote(server.dir .. "/state/workspaces"))
      for name in p:lines() do
        if not sessions[name] then
          extras[#extras + 1] = name
          if not waiting:find("/" .. name .. "-", 1, true) then not_spare = name end
        end
      end
      p:close()
      return not_spare == nil
    end, 0.2)
    assert.is_nil(not_spare, "a workspace disk of no session and no spare: " .. tostring(not_spare))
    assert.truthy(#extras <= ntenants, table.concat(extras, " "))
  end)
end)
