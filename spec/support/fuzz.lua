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
-- Returns stats: { seed, requests, by_status = {}, unexpected = {list}, open = {id = key} }.
function M.run(server, opts)
  opts = opts or {}
  local seed = opts.seed or (os.time() % 100000) * 7 + 13
  print(string.format("fuzz: seed %d (set AIRLOCK_FUZZ_SEED=%d to repeat)", seed, seed))
  local rnd = prng(seed)
  local keys = {}
  for _, k in pairs(opts.keys) do keys[#keys + 1] = k end
  table.sort(keys)
  local open, open_list = {}, {} -- session id -> the key that owns it
  local stats = { seed = seed, requests = 0, by_status = {}, unexpected = {}, open = open }
  local deadline = socket.gettime() + (opts.seconds or 30)
  local max_requests = opts.max_requests or 5000

  local function refresh_list()
    open_list = {}
    for id in pairs(open) do open_list[#open_list + 1] = id end
    table.sort(open_list)
  end

  local junk_paths = { "a.txt", "dir/b.txt", "../x", "a/../../x", "/etc/passwd", "/workspace/a.txt", ".", "",
    "a\0b", "\255\254", string.rep("d/", 200) .. "f", "./a.txt", "a/../a.txt", "%2e%2e/x", "con:aux", "\n" }
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

  while stats.requests < max_requests and socket.gettime() < deadline do
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
  return stats
end

return M
