-- luacheck: max line length 140
-- A small randomised-request fuzzer for airlockd, and the raw-socket HTTP helper it uses.
-- Loopback only: it refuses any server URL that is not http://127.0.0.1:<port>. Requests go
-- over lua-socket (one connection each, Connection: close) so the bytes sent are exactly the
-- fuzzer's, junk included. The PRNG is Park-Miller (exact in doubles, so Lua 5.1, LuaJIT and
-- 5.4 draw the same sequence from the same seed); the seed is printed so a run can be repeated.
local socket = require "socket"
local cjson = require "cjson"

local M = {}

local function port_of(server)
  local port = tostring(server.url or ""):match("^http://127%.0%.0%.1:(%d+)$")
  assert(port, "fuzz: loopback servers only, got " .. tostring(server.url))
  return tonumber(port)
end

-- Sends raw bytes to the server and reads the answer until the server closes (or timeout).
-- Returns status (number or nil), the raw response, and the body after the header block.
-- half_close: shut our sending side after the bytes (a client that gives up mid-request).
function M.raw(server, bytes, timeout, half_close)
  local c = socket.tcp()
  c:settimeout(timeout or 10)
  local ok, err = c:connect("127.0.0.1", port_of(server))
  if not ok then return nil, "connect: " .. tostring(err), nil end
  local sent, serr = c:send(bytes)
  if not sent and serr ~= "closed" then
    c:close()
    return nil, "send: " .. tostring(serr), nil
  end
  if half_close then c:shutdown("send") end
  local chunks = {}
  while true do
    local data, rerr, partial = c:receive(8192)
    if data then
      chunks[#chunks + 1] = data
    else
      if partial and partial ~= "" then chunks[#chunks + 1] = partial end
      if rerr ~= "timeout" or #chunks > 0 then break end
      break
    end
  end
  c:close()
  local raw = table.concat(chunks)
  local status = tonumber(raw:match("^HTTP/1%.%d (%d%d%d)"))
  local body = raw:match("\r\n\r\n(.*)$")
  return status, raw, body
end

-- A connection from address `from` (127.0.0.x: slow clients stay off 127.0.0.1's per-address
-- count), or nil and the error.
local function connect_from(server, from, timeout)
  local c = socket.tcp()
  c:settimeout(timeout or 10)
  if from and not c:bind(from, 0) then return nil, "bind" end
  local ok, err = c:connect("127.0.0.1", port_of(server))
  if not ok then
    c:close()
    return nil, err
  end
  return c
end

-- The status line's code of what c receives within timeout seconds (nil when nothing came).
local function read_status(c, timeout)
  c:settimeout(timeout)
  local line = c:receive("*l")
  return line and tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
end

-- A well-formed request (Connection: close). headers: list of "Name: value".
function M.request(server, method, path, key, body, headers)
  local lines = { method .. " " .. path .. " HTTP/1.1", "Host: 127.0.0.1", "Connection: close" }
  if key then lines[#lines + 1] = "X-API-Key: " .. key end
  for _, h in ipairs(headers or {}) do lines[#lines + 1] = h end
  if body then
    lines[#lines + 1] = "Content-Type: application/json"
    lines[#lines + 1] = "Content-Length: " .. #body
  end
  return M.raw(server, table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or ""))
end

-- Park-Miller minimal standard generator.
local function prng(seed)
  local state = seed % 2147483646 + 1
  local r = {}
  function r.next()
    state = (state * 16807) % 2147483647
    return state
  end
  function r.int(lo, hi) return lo + r.next() % (hi - lo + 1) end
  function r.pick(list) return list[r.int(1, #list)] end
  function r.chance(p) return r.next() / 2147483647 < p end
  function r.bytes(n)
    local t = {}
    for i = 1, n do t[i] = string.char(r.int(0, 255)) end
    return table.concat(t)
  end
  return r
end
M.prng = prng

local function pct(s)
  return (s:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end

-- Every status the contract allows airlockd to answer.
M.allowed_status = {}
for _, s in ipairs({ 200, 201, 307, 400, 401, 403, 404, 405, 409, 413, 422, 429, 500, 501, 502, 503 }) do
  M.allowed_status[s] = true
end

-- Runs random requests for opts.seconds (default 30) or opts.max_requests (default 5000).
-- opts.keys: { tenant = key, ... } valid keys. opts.seed: a number (default: from the clock).
-- opts.hostile: also slow clients (up to 100 held connections from 127.0.0.2-42, sending a
-- request a byte at a time) and oversized ones (Content-Length past every route's cap; chunked
-- bodies past the cap), whose answers must be allowed statuses too.
-- Returns stats: { seed, requests, by_status = {}, unexpected = {list}, open = {id = key},
-- slow_opened, slow_cut }.
function M.run(server, opts)
  opts = opts or {}
  local seed = opts.seed or (os.time() % 100000) * 7 + 13
  print(string.format("fuzz: seed %d (set AIRLOCK_FUZZ_SEED=%d to repeat)", seed, seed))
  local rnd = prng(seed)
  local keys = {}
  for _, k in pairs(opts.keys) do keys[#keys + 1] = k end
  table.sort(keys)
  local open, open_list = {}, {} -- session id -> the key that owns it
  local stats = { seed = seed, requests = 0, by_status = {}, unexpected = {}, open = open, slow_opened = 0, slow_cut = 0 }
  local deadline = socket.gettime() + (opts.seconds or 30)
  local max_requests = opts.max_requests or 5000

  local function refresh_list()
    open_list = {}
    for id in pairs(open) do open_list[#open_list + 1] = id end
    table.sort(open_list)
  end

  local junk_paths = { "a.txt", "dir/b.txt", "../x", "a/../../x", "/etc/passwd", "/workspace/a.txt", ".", "",
    "a\0b", "\255\254", string.rep("d/", 200) .. "f", "./a.txt", "a/../a.txt", "%2e%2e/x", "con:aux", "\n",
    string.rep("q/", 300) .. "f", string.rep("p", 5000) }
  local commands = { "true", "echo hi", "exit 3", "ls -la", "cat a.txt", "printf '\\377'", "echo x > a.txt" }

  local function any_key()
    local roll = rnd.int(1, 10)
    if roll <= 7 then return rnd.pick(keys) end
    if roll == 8 then return nil end
    if roll == 9 then return "guess_" .. rnd.int(1, 1e6) end
    return rnd.pick(keys) .. "x"
  end

  local function any_id()
    if #open_list > 0 and rnd.chance(0.7) then return rnd.pick(open_list) end
    return rnd.pick({ "sbx_000000000000", "sbx_", "x", string.rep("a", 300), "%00", "..", "sbx_" .. rnd.int(1, 1e9) })
  end

  local function any_body()
    local roll = rnd.int(1, 8)
    if roll == 1 then return "{}" end
    if roll == 2 then return rnd.bytes(rnd.int(0, 64)) end
    if roll == 3 then return string.rep("[", rnd.int(1, 5000)) end
    if roll == 4 then return '{"command":' .. rnd.int(-5, 5) .. "}" end
    if roll == 5 then return cjson.encode({ path = rnd.pick(junk_paths), content = string.rep("z", rnd.int(0, 3000)) }) end
    if roll == 6 then return '{"timeout_seconds":"' .. rnd.bytes(4):gsub('[%c"\\\128-\255]', "q") .. '"}' end
    if roll == 7 then return "null" end
    return nil
  end

  local function count(status, what)
    stats.requests = stats.requests + 1
    local s = status or "none"
    stats.by_status[s] = (stats.by_status[s] or 0) + 1
    if not status or not M.allowed_status[status] then
      stats.unexpected[#stats.unexpected + 1] = what .. " -> " .. tostring(status)
    end
  end

  local slow = {} -- held connections, each { c = socket, rest = bytes it has still to send }
  local json_routes = { "/v1/sessions", "/v1/keys", "/v1/admin/keys" }
  local function any_json_route()
    if rnd.chance(0.5) then return rnd.pick(json_routes) end
    return "/v1/sessions/" .. pct(any_id()) .. rnd.pick({ "/exec", "/write", "/import" })
  end

  -- One step of a hostile client: open or feed a slow one, or send an oversized request.
  local function hostile_step()
    local roll = rnd.int(1, 10)
    if roll <= 5 and (#slow < 100 or rnd.chance(0.5)) then
      if #slow >= 100 or rnd.chance(0.3) and #slow > 0 then -- feed one a byte
        local i = rnd.int(1, #slow)
        local s = slow[i]
        s.c:settimeout(0)
        local sent, err = s.c:send(s.rest:sub(1, 1))
        if sent then s.rest = s.rest:sub(2) end
        if err == "closed" or s.rest == "" then
          if err == "closed" then stats.slow_cut = stats.slow_cut + 1 end
          s.c:close()
          table.remove(slow, i)
        end
        return
      end
      local c = connect_from(server, "127.0.0." .. rnd.int(2, 42), 2)
      if not c then return end
      local req = rnd.pick({ "GET /healthz HTTP/1.1\r\nHost: x\r\n",
        "POST " .. any_json_route() .. " HTTP/1.1\r\nX-API-Key: " .. tostring(any_key()) ..
        "\r\nContent-Length: 5000\r\n\r\n" .. string.rep("{", 5000) })
      local cut = rnd.int(1, #req)
      c:settimeout(0)
      c:send(req:sub(1, cut))
      slow[#slow + 1] = { c = c, rest = req:sub(cut + 1) }
      stats.slow_opened = stats.slow_opened + 1
    elseif roll <= 8 then -- a Content-Length past every route's cap: answered before the body
      local c = connect_from(server, nil, 10)
      if not c then return count(nil, "connect") end
      local path = rnd.chance(0.7) and any_json_route() or "/" .. pct(rnd.bytes(rnd.int(0, 8)))
      local length = rnd.pick({ 64 * 1048576 + 1, 1e9, 2 ^ 40 })
      c:send(string.format("POST %s HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Length: %.0f\r\n\r\n",
        path, tostring(any_key()), length))
      count(read_status(c, 10), "POST " .. path .. " Content-Length " .. string.format("%.0f", length))
      c:close()
    else -- a chunked body past the cap
      local c = connect_from(server, nil, 10)
      if not c then return count(nil, "connect") end
      local path = any_json_route()
      c:send("POST " .. path .. " HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. tostring(any_key()) ..
        "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
      local chunk = string.format("%x\r\n%s\r\n", 65536, string.rep(" ", 65536))
      local sent = true
      for _ = 1, 40 do -- 2.5 MiB: past the 1 MiB cap of these routes (the write route's is 64)
        sent = c:send(chunk)
        if not sent then break end
      end
      if sent then c:send("0\r\n\r\n") end -- under a cap the request ends and gets its answer
      count(read_status(c, 10), "chunked POST " .. path)
      c:close()
    end
  end

  local function ordinary_step()
    local op = rnd.int(1, 100)
    local method, path, key, body
    if op <= 12 then -- create with a valid key
      method, path, key, body = "POST", "/v1/sessions", rnd.pick(keys), rnd.pick({ "{}", "{}", '{"template":"x"}', "{}" })
    elseif op <= 20 then -- delete, with the owner's or a random key
      local id = any_id()
      method, path = "DELETE", "/v1/sessions/" .. pct(id)
      key = (open[id] and rnd.chance(0.6)) and open[id] or any_key()
    elseif op <= 35 then
      local id = any_id()
      method, path, key = "POST", "/v1/sessions/" .. pct(id) .. "/write", open[id] or any_key()
      body = cjson.encode({ path = rnd.pick(junk_paths), content = rnd.pick({ "hello", "", string.rep("\226\130\172", 50) }) })
    elseif op <= 50 then
      local id = any_id()
      method, key = "GET", open[id] or any_key()
      path = "/v1/sessions/" .. pct(id) .. "/read?path=" .. pct(rnd.pick(junk_paths))
    elseif op <= 54 then
      local id = any_id()
      method, path, key = "POST", "/v1/sessions/" .. pct(id) .. "/exec", open[id] or any_key()
      body = cjson.encode({ command = rnd.pick(commands), timeout_seconds = rnd.int(1, 3) })
    elseif op <= 70 then
      method = rnd.pick({ "GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS" })
      path = rnd.pick({ "/healthz", "/v1/sessions", "/v1/usage", "/v1/egress/policy", "/v1/audit", "/v1/keys",
        "/v1/admin/keys", "/mcp", "/v1/sessions/", "/", "/v1", "/v1/sessions/" .. pct(any_id()) .. "/egress?limit=" .. rnd.int(-3, 500) })
      key, body = any_key(), any_body()
    else -- junk: random route bytes, methods, bodies
      method = rnd.pick({ "GET", "POST", "DELETE", "FOO", "get" })
      path = "/" .. pct(rnd.bytes(rnd.int(0, 40)))
      if rnd.chance(0.5) then path = "/v1/sessions/" .. pct(any_id()) .. "/" .. pct(rnd.bytes(rnd.int(0, 10))) end
      key, body = any_key(), any_body()
    end
    local status, raw, rbody = M.request(server, method, path, key, body)
    stats.requests = stats.requests + 1
    local s = status or "none"
    stats.by_status[s] = (stats.by_status[s] or 0) + 1
    if not status or not M.allowed_status[status] then
      stats.unexpected[#stats.unexpected + 1] = method .. " " .. path .. " -> " .. tostring(raw):sub(1, 200)
    elseif status == 500 and rbody ~= "Internal Server Error" then
      stats.unexpected[#stats.unexpected + 1] = method .. " " .. path .. " -> 500 " .. tostring(rbody):sub(1, 200)
    end
    if method == "POST" and path == "/v1/sessions" and status == 201 then
      local ok, decoded = pcall(cjson.decode, rbody)
      if ok and type(decoded) == "table" and decoded.session_id then
        open[decoded.session_id] = key
        refresh_list()
      end
    elseif method == "DELETE" and status == 200 then
      local id = path:match("^/v1/sessions/(sbx_%x+)$")
      if id then
        open[id] = nil
        refresh_list()
      end
    end
  end

  while stats.requests < max_requests and socket.gettime() < deadline do
    if opts.hostile and rnd.chance(0.15) then
      hostile_step()
    else
      ordinary_step()
    end
  end
  for _, s in ipairs(slow) do s.c:close() end
  return stats
end

return M
