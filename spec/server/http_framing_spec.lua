-- luacheck: max line length 160
-- Strict HTTP framing (issue 16, deliverable 6): requests a proxy in front may frame differently
-- from airlockd (request-smuggling primitives) are refused at once and their connection closed,
-- so the bytes after them are never read as a next request. Each case sends its request and a
-- smuggled second one (an authenticated session list) on one raw connection (LuaSocket), then
-- reads until the server closes. The header timeout is 60 s, so a close within the read's 20 s
-- is the refusal's, not a timeout's. Loopback only. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local socket = require "socket"

-- Sends bytes on a fresh connection and reads until the server closes it (or 20 s pass).
-- Returns the raw answer and whether the server closed the connection.
local function exchange(server, bytes)
  local c = socket.tcp()
  c:settimeout(20)
  assert(c:connect("127.0.0.1", server.port))
  assert(c:send(bytes))
  local chunks = {}
  while true do
    local data, err, partial = c:receive(8192)
    chunks[#chunks + 1] = data or partial
    if not data then
      c:close()
      return table.concat(chunks), err == "closed"
    end
  end
end

-- The status of every response in raw, in order.
local function statuses(raw)
  local found = {}
  for code in raw:gmatch("HTTP/1%.%d (%d%d%d) ") do found[#found + 1] = tonumber(code) end
  return found
end

describe("airlockd's strict HTTP framing", function()
  local server, key, smuggled

  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_HEADER_TIMEOUT = "60" } })
    key = server.tenants.acme
    smuggled = "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. key .. "\r\n\r\n"
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  local function post(headers, body)
    return "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. key .. "\r\nContent-Type: application/json\r\n" ..
      headers .. "\r\n" .. body
  end

  -- { name, request (given the smuggled one), status }
  local cases = {
    { "two different Content-Length headers", function(s)
      return post("Content-Length: 2\r\nContent-Length: " .. (2 + #s) .. "\r\n", "{}" .. s) end, 400 },
    { "two equal Content-Length headers", function(s)
      return post("Content-Length: 2\r\nContent-Length: 2\r\n", "{}" .. s) end, 400 },
    { "Content-Length with Transfer-Encoding: chunked", function(s)
      return post("Content-Length: " .. (7 + #s) .. "\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n" .. s) end, 400 },
    { "Transfer-Encoding: gzip", function(s) return post("Transfer-Encoding: gzip\r\n", s) end, 501 },
    { "Transfer-Encoding: gzip, chunked", function(s)
      return post("Transfer-Encoding: gzip, chunked\r\n", "2\r\n{}\r\n0\r\n\r\n" .. s) end, 501 },
    { "Transfer-Encoding given twice", function(s)
      return post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n" .. s) end, 501 },
    { "a Transfer-Encoding folded onto a second line (obs-fold)", function(s)
      return post("Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n" .. s) end, 400 },
    { "a header name with a space", function(s)
      return "GET /healthz HTTP/1.1\r\nHost: x\r\nX Forwarded: a\r\n\r\n" .. s end, 400 },
    { "a space before a header's colon", function(s)
      return post("Content-Length : " .. (2 + #s) .. "\r\n", "{}" .. s) end, 400 },
    { "a bare CR inside a header value", function(s)
      return "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\rContent-Length: 5\r\n\r\n" .. s end, 400 },
    { "%00 in the path", function(s)
      return "GET /v1/sessions%00/x HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. key .. "\r\n\r\n" .. s end, 400 },
    { "a raw NUL byte in the path", function(s)
      return "GET /v1/sessions\0/x HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. key .. "\r\n\r\n" .. s end, 400 },
    { "a space in the request target", function(s)
      return "GET /v1/sessions /x HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. key .. "\r\n\r\n" .. s end, 400 },
    { "an HTTP/1.1 request without Host", function(s) return "GET /healthz HTTP/1.1\r\n\r\n" .. s end, 400 },
    { "two Host headers", function(s) return "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n" .. s end, 400 },
  }
  for _, case in ipairs(cases) do
    it("answers " .. case[1] .. " " .. case[3] .. ", closes, and never answers what follows", function()
      local raw, closed = exchange(server, case[2](smuggled))
      assert.are.same({ case[3] }, statuses(raw), raw)
      assert.is_true(closed, "the connection stayed open after:\n" .. raw)
      assert.is_nil(raw:find('"sessions"', 1, true), raw)
    end)
  end

  it("still answers a well-framed request and the next ones on a kept-alive connection", function()
    -- the control: the reading above would have seen a second answer (NUL stays allowed in the
    -- query, where the contract's handlers refuse it themselves)
    local raw, closed = exchange(server, "GET /v1/sessions?x=%00 HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. key .. "\r\n\r\n" ..
      "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" ..
      smuggled:gsub("\r\n\r\n$", "\r\nConnection: close\r\n\r\n"))
    assert.are.same({ 200, 200, 200 }, statuses(raw), raw)
    assert.is_true(closed)
    assert.truthy(raw:find('"sessions"', 1, true), raw)
  end)

  it("answers a request whose line and 28 KB of headers arrive over many packets", function()
    -- the raw-NUL and obs-fold checks read where libmicrohttpd keeps the parsed line and
    -- headers: a buffer grown while headers trickle in must not look like either
    local c = socket.tcp()
    c:settimeout(20)
    assert(c:connect("127.0.0.1", server.port))
    assert(c:send("GET /healthz?a=b%20c HTTP/1.1\r\n"))
    socket.sleep(0.1) -- not a synchronisation: only makes separate packets likely
    assert(c:send("Host: x\r\n"))
    for i = 1, 28 do
      socket.sleep(0.01)
      assert(c:send("X-Pad-" .. i .. ": " .. string.rep("p", 1000) .. "\r\n"))
    end
    assert(c:send("Connection: close\r\n\r\n"))
    local raw = c:receive("*a")
    c:close()
    assert.are.same({ 200 }, statuses(raw or ""), raw)
  end)
end)
