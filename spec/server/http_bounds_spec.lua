-- luacheck: max line length 160
-- Hostile HTTP clients against a real airlockd (issue #8, deliverable 2; README "Limits"):
-- keys checked from the headers before any body byte, per-route body caps, the body memory
-- budget and its per-tenant share, connections bounded in total and per client address,
-- absolute header / body / response deadlines, and paths bounded before any filesystem work.
-- Slow clients come from 127.0.0.2 and up (spec/support/slow_clients.lua); the spec's own
-- requests from 127.0.0.1. No timing is asserted: only generous bounds (curl --max-time) that
-- prove "did not wait for the attackers". Memory from /proc/<pid>/status. Loopback only.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local slow_clients = require "support.slow_clients"
local proc = require "support.proc"
local socket = require "socket"
local cjson = require "cjson"

local http = http_client.request
local q = proc.shell_quote

local LIMITS = '{"*":{"requests_per_minute":100000,"max_sessions":50}}'
local MB = 1024 * 1024

-- A field of /proc/<pid>/status in kB (VmHWM, VmRSS, Threads as a count).
local function status_field(server, field)
  local s = proc.read_file("/proc/" .. server.pid .. "/status") or ""
  return tonumber(s:match(field .. ":%s*(%d+)"))
end

-- A raw connection from address `from` (127.0.0.x) to the server.
local function connect(server, from)
  local c = socket.tcp()
  assert(c:bind(from or "127.0.0.1", 0))
  c:settimeout(10)
  assert(c:connect("127.0.0.1", server.port))
  return c
end

-- Reads one response from c (until the headers and Content-Length bytes, or the end).
-- Returns status, lower-cased headers and body.
local function read_response(c, timeout)
  c:settimeout(timeout or 10)
  local head = {}
  local status
  while true do
    local line, err = c:receive("*l")
    if not line then return nil, err end
    if not status then status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)")) end
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.*)$")
    if k then head[k:lower()] = v end
  end
  local body = ""
  local n = tonumber(head["content-length"] or "")
  if n and n > 0 then body = c:receive(n) or "" end
  return status, head, body
end

local function request_head(method, path, key, extra)
  local lines = { method .. " " .. path .. " HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json" }
  if key then lines[#lines + 1] = "X-API-Key: " .. key end
  for _, l in ipairs(extra or {}) do lines[#lines + 1] = l end
  return table.concat(lines, "\r\n") .. "\r\n\r\n"
end

-- curl from address `from`: status code and body.
local function curl(server, path, opts)
  opts = opts or {}
  local out = proc.temp_path()
  local cmd = string.format("curl -s -o %s -w '%%{http_code}' --max-time %d %s %s %s %s", q(out), opts.max_time or 5,
    opts.from and ("--interface " .. opts.from) or "", opts.key and ("-H " .. q("X-API-Key: " .. opts.key)) or "",
    opts.args or "", q(server.url .. path))
  local code = tonumber(proc.output(cmd))
  local body = proc.read_file(out) or ""
  os.remove(out)
  return code, body
end

describe("airlockd against hostile HTTP clients", function()
  local server, key, other

  lazy_setup(function()
    server = airlockd.start({ env = {
      SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_HEADER_TIMEOUT = "3", SANDBOX_TRANSFER_TIMEOUT = "3",
      SANDBOX_MIN_TRANSFER_RATE_KB = "1024", SANDBOX_BODY_MEMORY_MB = "100",
    } })
    key, other = server.tenants.acme, server.tenants.other
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("refuses four 60 MB bodies with a wrong key from their headers: airlockd's memory stays flat", function()
    local body = proc.temp_path()
    proc.write_file(body, '{"path":"big.txt","content":"' .. string.rep("a", 60 * MB) .. '"}')
    local id = http_client.create(server, key).json.session_id
    local before = status_field(server, "VmHWM")
    for i = 1, 4 do
      if i <= 2 then
        -- curl asks for 100 Continue and gets the 401 instead: the body never leaves it
        local code, rbody = curl(server, "/v1/sessions/" .. id .. "/write", {
          key = "wrong-" .. i, max_time = 20, args = "-H 'Content-Type: application/json' --data-binary @" .. q(body) })
        assert.are.equal(401, code)
        assert.are.equal('{"detail":"Invalid or missing X-API-Key header"}', rbody)
      else
        -- a client that sends its body straight away gets the 401 after its first megabyte
        local c = connect(server)
        c:send(request_head("POST", "/v1/sessions/" .. id .. "/write", "wrong-" .. i, { "Content-Length: " .. 60 * MB + 33 }))
        c:send(string.rep("a", MB))
        local status, _, rbody = read_response(c)
        c:close()
        assert.are.equal(401, status)
        assert.are.equal('{"detail":"Invalid or missing X-API-Key header"}', rbody)
      end
    end
    -- chunked, with a wrong key: refused unread as well
    local code = curl(server, "/v1/sessions/" .. id .. "/write", {
      key = "wrong", max_time = 20, args = "-H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' --data-binary @" .. q(body) })
    assert.are.equal(401, code)
    local after = status_field(server, "VmHWM")
    print(string.format("VmHWM before %d kB, after four 60 MB bodies with a wrong key %d kB", before, after))
    assert.truthy(after - before < 8 * 1024, "VmHWM grew by " .. (after - before) .. " kB")
    -- the same body with the right key is taken (the write route's cap is 64 MiB)
    code = curl(server, "/v1/sessions/" .. id .. "/write", {
      key = key, max_time = 60, args = "-H 'Content-Type: application/json' --data-binary @" .. q(body) })
    os.remove(body)
    assert.are.equal(200, code)
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)

  it("keeps the reference's 422 for a small unparseable body with a wrong key; larger ones get 401 unread", function()
    local r = http(server, "POST", "/v1/sessions", { key = "wrong", body = "{" })
    assert.are.equal(422, r.status)
    assert.are.equal("json_invalid", r.json.detail[1].type)
    r = http(server, "POST", "/v1/sessions", { key = "wrong", body = string.rep("{", 16 * 1024) })
    assert.are.equal(422, r.status, r.body) -- 16 KiB: still read
    r = http(server, "POST", "/v1/sessions", { key = "wrong", body = string.rep("{", 16 * 1024 + 1) })
    assert.are.equal(401, r.status, r.body)
    -- the admin routes: 404 while the admin API is off, whatever the body
    r = http(server, "POST", "/v1/admin/keys", { key = "wrong", body = string.rep("{", 100000) })
    assert.are.equal(404, r.status, r.body)
  end)

  it("answers a Content-Length over the route's cap 413 before a body byte is sent", function()
    local id = http_client.create(server, key).json.session_id
    local cases = {
      { "POST", "/v1/sessions/" .. id .. "/exec", MB + 1 },
      { "POST", "/v1/sessions", MB + 1 },
      { "POST", "/v1/sessions/" .. id .. "/write", 64 * MB + 1 },
      { "GET", "/v1/sessions", 16 * 1024 + 1 },
      { "GET", "/healthz", 16 * 1024 + 1 },
    }
    for _, case in ipairs(cases) do
      local c = connect(server)
      c:send(request_head(case[1], case[2], key, { "Content-Length: " .. case[3] }))
      local status, head, body = read_response(c, 5)
      -- the close lingers: the body the client goes on sending is read, not reset
      local sent, err = c:send(string.rep("x", 2 * MB))
      c:close()
      assert.are.equal(2 * MB, sent, case[2] .. ": " .. tostring(err))
      assert.are.equal(413, status, case[2])
      assert.are.equal('{"detail":"Request body too large"}', body)
      assert.are.equal("close", (head.connection or ""):lower())
    end
    -- exactly at the cap is fine (1 MiB of spaces around {} is valid JSON)
    local r = http(server, "POST", "/v1/sessions/" .. id .. "/exec",
      { key = key, body = '{"command":"true"}' .. string.rep(" ", MB - 18) })
    assert.are.equal(200, r.status, r.body)
    -- chunked: counted as it arrives
    local big = proc.temp_path()
    proc.write_file(big, '{"command":"' .. string.rep("x", 2 * MB) .. '"}')
    local code, body = curl(server, "/v1/sessions/" .. id .. "/exec",
      { key = key, args = "-H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' --data-binary @" .. q(big) })
    os.remove(big)
    assert.are.equal(413, code)
    assert.are.equal('{"detail":"Request body too large"}', body)
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)

  it("gives each tenant a share of the body memory and refuses past it or past the budget with 503", function()
    -- SANDBOX_BODY_MEMORY_MB=100: a tenant may hold 64 MiB of bodies, all tenants 100 MiB
    local ida = http_client.create(server, key).json.session_id
    local ido = http_client.create(server, other).json.session_id
    local held = {}
    -- an upload's head alone; with expect, it returns once airlockd has taken the head (and
    -- reserved the body's memory): its 100 Continue asks for the body, which never comes
    local function start_upload(k, id, bytes, expect)
      local c = connect(server)
      c:send(request_head("POST", "/v1/sessions/" .. id .. "/write", k,
        { "Content-Length: " .. bytes, expect and "Expect: 100-continue" or nil }))
      held[#held + 1] = c
      if expect then assert.are.equal(100, (read_response(c, 10))) end
      return c
    end
    local function refused(c)
      local status, head, body = read_response(c, 5)
      return status == 503 and head["retry-after"] == "1" and body
    end
    local rss0 = status_field(server, "VmRSS")
    start_upload(key, ida, 30 * MB, true)
    start_upload(key, ida, 30 * MB, true)
    local body = refused(start_upload(key, ida, 30 * MB)) -- acme's share is used up
    assert.are.equal('{"detail":"The server is busy with other uploads; retry later."}', body)
    -- another tenant still uploads, up to what is left of the budget
    local small = http_client.write(server, other, ido, "small.txt", string.rep("s", 100000))
    assert.are.equal(200, small.status, small.body)
    start_upload(other, ido, 30 * MB, true)
    assert.truthy(refused(start_upload(other, ido, 30 * MB))) -- 90 of 100 MiB held: the budget is
    -- reserved, not used: the held uploads cost no memory until their bytes arrive
    local rss1 = status_field(server, "VmRSS")
    print(string.format("VmRSS with 90 MiB of bodies reserved: %d kB (before: %d kB)", rss1, rss0))
    assert.truthy(rss1 - rss0 < 16 * 1024, "VmRSS grew by " .. (rss1 - rss0) .. " kB")
    for _, c in ipairs(held) do c:close() end
    -- given back when they end
    assert.is_true(proc.wait_until(5, function()
      return http_client.write(server, key, ida, "after.txt", string.rep("x", 2 * MB)).status == 200
    end, 0.2))
    assert.are.equal(200, http_client.delete(server, key, ida).status)
    assert.are.equal(200, http_client.delete(server, other, ido).status)
  end)

  it("keeps /healthz and real clients answering while 1,100 slowloris clients are held, and cuts them", function()
    local slow = slow_clients.start(server, { mode = "headers", count = 1100, addrs = 20, interval = 1, reconnect = true })
    local ok, st = slow.wait_for(30, function(s) return s.open >= 1100 end)
    assert.is_true(ok, slow_clients.describe(st))
    local threads = status_field(server, "Threads")
    for _ = 1, 10 do
      local code, body = curl(server, "/healthz")
      assert.are.equal(200, code, body)
    end
    local r = http(server, "POST", "/v1/sessions", { key = key, body = "{}", max_time = 5 })
    assert.are.equal(201, r.status, r.body)
    local id = r.json.session_id
    assert.are.equal(200, http(server, "POST", "/v1/sessions/" .. id .. "/write",
      { key = key, body = '{"path":"a.txt","content":"x"}', max_time = 5 }).status)
    assert.are.equal(200, http(server, "GET", "/v1/sessions/" .. id .. "/read?path=a.txt", { key = key, max_time = 5 }).status)
    r = http(server, "POST", "/v1/sessions/" .. id .. "/exec", { key = key, body = '{"command":"echo hi"}', max_time = 30 })
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("hi\n", r.json.stdout)
    -- every held connection is cut at its header deadline (3 s), however it trickles
    ok = slow.wait_for(30, function(s) return s.cut >= 1100 end)
    st = slow.stop()
    print("slowloris: " .. slow_clients.describe(st) .. ", airlockd threads: " .. tostring(threads))
    assert.is_true(ok, slow_clients.describe(st))
    assert.truthy(threads < 80, "airlockd ran " .. tostring(threads) .. " threads")
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)

  it("cuts a body that trickles past its deadline, even though bytes keep coming", function()
    local id = http_client.create(server, key).json.session_id
    -- 100 bytes announced, one sent every 0.5 s: due within 3 s (+ 100 B at 1 MiB/s)
    local slow = slow_clients.start(server, { mode = "body", count = 50, first = 30, addrs = 5, interval = 0.5,
      path = "/v1/sessions/" .. id .. "/write", key = key, body_bytes = 100 })
    local ok = slow.wait_for(30, function(s) return s.cut >= 50 end)
    local st = slow.stop()
    assert.is_true(ok, slow_clients.describe(st))
    assert.are.equal(200, curl(server, "/healthz"))
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)

  it("cuts a reader too slow for its response's deadline", function()
    local id = http_client.create(server, key).json.session_id
    local w = http_client.write(server, key, id, "big.txt", string.rep("r", 3 * MB))
    assert.are.equal(200, w.status, w.body)
    -- 3 MB due within 3 s + 3 s at 1 MiB/s; the readers never read (4 KiB receive buffers)
    local slow = slow_clients.start(server, { mode = "read", count = 5, first = 40, addrs = 5,
      path = "/v1/sessions/" .. id .. "/read?path=big.txt", key = key })
    local ok = slow.wait_for(40, function(s) return s.cut >= 5 end)
    local st = slow.stop()
    assert.is_true(ok, slow_clients.describe(st))
    assert.are.equal(5, st.truncated, slow_clients.describe(st))
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)

  it("bounds paths before any filesystem work and resolves them in linear time", function()
    local id = http_client.create(server, key).json.session_id
    local function write(path)
      return http(server, "POST", "/v1/sessions/" .. id .. "/write",
        { key = key, body = cjson.encode({ path = path, content = "x" }), max_time = 10 })
    end
    local too_long = '{"detail":"Path too long: at most 4096 bytes, also once symlinks are resolved."}'
    local too_deep = '{"detail":"Path too deep: at most 256 directory levels, also once symlinks are resolved."}'
    local r = write(string.rep("a", 4097))
    assert.are.equal(400, r.status)
    assert.are.equal(too_long, r.body)
    r = write(string.rep("q/", 257) .. "f")
    assert.are.equal(400, r.status)
    assert.are.equal(too_deep, r.body)
    r = write(string.rep("q/", 255) .. "f") -- 256 levels: fine
    assert.are.equal(200, r.status, r.body)
    -- the issue's 400,000 "q/" and as many "../": 2 MB, answered at once (took 14.6 s of CPU)
    r = write(string.rep("q/", 400000) .. string.rep("../", 400000) .. "f")
    assert.are.equal(400, r.status)
    assert.are.equal(too_long, r.body)
    -- a symlink made in the sandbox that resolves too deep
    local e = http_client.exec(server, key, id, "ln -s $(printf 'z/%.0s' $(seq 256)) deeplink")
    assert.are.equal(0, e.json.exit_code, e.body)
    r = write("deeplink/x")
    assert.are.equal(400, r.status)
    assert.are.equal(too_deep, r.body)
    r = http_client.read(server, key, id, "deeplink/x")
    assert.are.equal(400, r.status)
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)
end)

-- Runs fn(server) against a fresh airlockd started with env; stops it after.
local function with_server(env, fn)
  local server = airlockd.start({ env = env })
  local ok, err = pcall(fn, server)
  airlockd.stop(server)
  assert(ok, err)
end

describe("airlockd's connection caps", function()
  it("answers 503 past the per-address cap while other addresses get through", function()
    with_server({ SANDBOX_MAX_CONNECTIONS_PER_CLIENT = "4", SANDBOX_HEADER_TIMEOUT = "30" }, function(server)
      local idle = slow_clients.start(server, { mode = "idle", count = 6, first = 3, addrs = 1 })
      local held, st = idle.wait_for(10, function(s) return s.open >= 6 end)
      assert.is_true(held, slow_clients.describe(st))
      -- the client sees its connections open before airlockd has accepted them all
      local code, body
      assert.is_true(proc.wait_until(10, function()
        code, body = curl(server, "/healthz", { from = "127.0.0.3" })
        return code == 503
      end, 0.1), "never 503 from 127.0.0.3: " .. tostring(code))
      assert.are.equal('{"detail":"Too many connections from your address (limit 4); retry later."}', body)
      assert.are.equal(200, curl(server, "/healthz"))
      idle.stop()
      assert.is_true(proc.wait_until(5, function() return curl(server, "/healthz", { from = "127.0.0.3" }) == 200 end, 0.2))
    end)
  end)

  it("holds no more than the total cap; newcomers wait for a slot, not forever", function()
    with_server({ SANDBOX_MAX_CONNECTIONS = "100", SANDBOX_HEADER_TIMEOUT = "2" }, function(server)
      local idle = slow_clients.start(server, { mode = "idle", count = 150, first = 50, addrs = 10 })
      local held, st = idle.wait_for(10, function(s) return s.connects >= 150 end)
      assert.is_true(held, slow_clients.describe(st))
      -- near the cap each newcomer evicts the oldest idle connection (spec/server/
      -- connection_flood_spec.lua), the last ones are cut at their header deadline; a request
      -- from elsewhere is served meanwhile
      local code = curl(server, "/healthz", { max_time = 10 })
      assert.are.equal(200, code)
      held, st = idle.wait_for(20, function(s) return s.cut >= 150 end)
      idle.stop()
      assert.is_true(held, slow_clients.describe(st))
    end)
  end)
end)
