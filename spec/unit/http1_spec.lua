-- airlock.internal.http1 (HTTP/1.1 for the cosocket transport) on scripted sockets: URLs, the request's
-- bytes, responses framed by Content-Length, chunked or the connection's close, split at
-- every byte, and each kind of garbage or excess ending in a clear message (never a hang:
-- the scripted socket says "closed" when it runs out).
local http1 = require "airlock.internal.http1"

-- A reader over chunks (the bytes arrive in these pieces); then err (default "closed").
local function reader(chunks, err)
  local i, pending = 0, ""
  local function next_chunk()
    if pending ~= "" then
      local c = pending
      pending = ""
      return c
    end
    i = i + 1
    return chunks[i]
  end
  local r = {}
  function r.any(max)
    local c = next_chunk()
    if not c then return nil, err or "closed" end
    if #c > max then c, pending = c:sub(1, max), c:sub(max + 1) end
    return c
  end
  function r.exact(n)
    local got = {}
    local have = 0
    while have < n do
      local c = next_chunk()
      if not c then return nil, err or "closed", table.concat(got) end
      if have + #c > n then
        pending = c:sub(n - have + 1)
        c = c:sub(1, n - have)
      end
      got[#got + 1] = c
      have = have + #c
    end
    return table.concat(got)
  end
  return r
end

-- The same bytes one at a time.
local function bytewise(s, err)
  local chunks = {}
  for i = 1, #s do chunks[i] = s:sub(i, i) end
  return reader(chunks, err)
end

local function read(s, method)
  return http1.read_response(reader({ s }), method or "GET")
end

describe("http1.parse_url", function()
  it("splits scheme, host, port, Host header and target", function()
    assert.are.same({ scheme = "http", tls = false, host = "127.0.0.1", port = 8080,
      authority = "127.0.0.1:8080", target = "/v1/sessions?limit=5" },
      http1.parse_url("http://127.0.0.1:8080/v1/sessions?limit=5#frag"))
    local u = http1.parse_url("HTTPS://Sandbox.Example")
    assert.are.same({ "https", true, "sandbox.example", 443, "/" }, { u.scheme, u.tls, u.host, u.port, u.target })
    u = http1.parse_url("http://[::1]:9/x")
    assert.are.same({ "::1", 9, "[::1]:9" }, { u.host, u.port, u.authority })
    assert.are.equal("/?a=1", http1.parse_url("http://h?a=1").target)
  end)

  it("refuses what it cannot send", function()
    for url, why in pairs({
      ["ftp://h/"] = "not an http",
      ["http:///x"] = "no host",
      ["http://h:99999/"] = "bad port",
      ["http://h:0/"] = "bad port",
      ["http://user:pw@h/"] = "user:password",
      ["http://h/a b"] = "spaces",
    }) do
      local u, err = http1.parse_url(url)
      assert.is_nil(u, url)
      assert.is_truthy(err:find(why, 1, true), url .. ": " .. err)
    end
  end)

  it("knows IP literals", function()
    assert.is_true(http1.is_ip("127.0.0.1"))
    assert.is_true(http1.is_ip("::1"))
    assert.is_false(http1.is_ip("localhost"))
  end)
end)

describe("http1.request", function()
  local u = http1.parse_url("http://127.0.0.1:8080/v1/x?y=1")

  it("writes the request line, Host, the caller's headers and a Content-Length", function()
    local bytes = table.concat(http1.request("POST", u, { "X-API-Key: k", "Accept: application/json" }, "{}"))
    assert.are.equal("POST /v1/x?y=1 HTTP/1.1\r\nX-API-Key: k\r\nAccept: application/json\r\n"
      .. "Host: 127.0.0.1:8080\r\nContent-Length: 2\r\n\r\n{}", bytes)
    assert.are.equal("GET /v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
      table.concat(http1.request("GET", u, {}, nil)))
    -- an empty POST still says its length; the caller's own Host wins; framing headers are ours
    assert.are.equal("POST /v1/x?y=1 HTTP/1.1\r\nHost: other\r\nContent-Length: 0\r\n\r\n",
      table.concat(http1.request("POST", u, { "Host: other", "Content-Length: 99",
        "Transfer-Encoding: chunked", "Connection: close" }, nil)))
  end)

  it("refuses header lines that would split the request", function()
    assert.has_error(function() http1.request("GET", u, { "X-A: 1\r\nX-B: 2" }) end,
      "airlock: a request header contains a line break or NUL")
    assert.has_error(function() http1.request("GET", u, { "no colon" }) end,
      "airlock: a request header is not a \"Name: value\" line")
  end)
end)

describe("http1.read_response", function()
  local OK = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": true}"

  it("reads a Content-Length response, however the bytes are split", function()
    for _, r in ipairs({ reader({ OK }), bytewise(OK), reader({ OK:sub(1, 20), OK:sub(21, 60), OK:sub(61) }) }) do
      local res = http1.read_response(r, "GET")
      assert.are.equal(200, res.status)
      assert.are.equal("OK", res.reason)
      assert.are.equal("application/json", res.headers["content-type"])
      assert.are.equal("{\"a\": true}", res.body)
      assert.is_true(res.keepalive)
    end
  end)

  it("reads chunked bodies (extensions, trailers) and joins repeated headers", function()
    local raw = "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
      .. "5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: t\r\n\r\n"
    for _, r in ipairs({ reader({ raw }), bytewise(raw) }) do
      local res = http1.read_response(r, "POST")
      assert.are.equal(201, res.status)
      assert.are.equal("hello 0123456789", res.body)
      assert.are.equal("1, 2", res.headers["x-a"])
      assert.is_true(res.keepalive)
    end
  end)

  it("reads until close when nothing frames the body, and then does not keep the connection", function()
    local res = read("HTTP/1.1 200 OK\r\n\r\nall of it")
    assert.are.equal("all of it", res.body)
    assert.is_false(res.keepalive)
  end)

  it("knows bodiless answers, skips 1xx, and honours Connection: close and HTTP/1.0", function()
    local res = read("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n")
    assert.are.same({ 204, "" }, { res.status, res.body })
    res = read("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD")
    assert.are.same({ 200, "", true }, { res.status, res.body, res.keepalive })
    res = read("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert.are.same({ 200, "ok" }, { res.status, res.body })
    res = read("HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 2\r\n\r\nok")
    assert.is_false(res.keepalive)
    res = read("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert.is_false(res.keepalive)
    res = read("HTTP/1.1 200\r\nContent-Length: 2, 2\r\n\r\nok")
    assert.are.same({ "", "ok" }, { res.reason, res.body })
    -- bytes after the response: the connection is out of step
    res = read("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
    assert.are.same({ "ok", false }, { res.body, res.keepalive })
  end)

  local function fails(raw, want, opts)
    opts = opts or {}
    local res, err, nothing = http1.read_response(opts.reader or reader({ raw }, opts.err), opts.method or "GET")
    assert(res == nil, "read a response from bytes that should have failed with: " .. want)
    assert.is_truthy(err:find(want, 1, true), "got: " .. tostring(err))
    return err, nothing
  end

  it("says clearly what was wrong with garbage", function()
    fails("SSH-2.0-OpenSSH\r\n", "not an HTTP response (it starts with \"SSH-2.0-OpenSSH??\")")
    fails("HTTP/2 200\r\n\r\n", "bad status line \"HTTP/2 200\"")
    fails("HTTP/1.1 2000 OK\r\n\r\n", "bad status line")
    fails("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad response header line \"no colon here\"")
    fails("HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "bad response header line")
    fails("HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", "bad Content-Length \"12x\"")
    fails("HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n", "bad Content-Length")
    fails("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding \"gzip\"")
    fails("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size line \"zz\"")
    fails("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n123456789\r\n", "bad chunk size line")
    fails("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd", "a chunk is not followed by CRLF")
    fails("HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols")
  end)

  it("bounds the header, chunk lines and the body", function()
    local big = "HTTP/1.1 200 OK\r\nX-Big: " .. string.rep("x", http1.MAX_HEADER_BYTES) .. "\r\n\r\n"
    fails(big, "the response header is larger than 65536 bytes")
    fails("HTTP/1.1 200 OK" .. string.rep("x", http1.MAX_HEADER_BYTES) .. "\r\n", "longer than")
    fails("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1" .. string.rep(" ", 5000), "longer than 4096 bytes")
    local saved = http1.MAX_BODY_BYTES
    http1.MAX_BODY_BYTES = 10
    finally(function() http1.MAX_BODY_BYTES = saved end)
    fails("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", "the response body is larger than 10 bytes")
    fails("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nabcdef\r\n0\r\n\r\n",
      "the response body is larger than 10 bytes")
    fails("HTTP/1.1 200 OK\r\n\r\n" .. string.rep("y", 11), "the response body is larger than 10 bytes")
  end)

  it("tells a connection that died before answering from one that died in the middle", function()
    local _, nothing = fails("", "the server closed the connection before answering")
    assert.is_true(nothing)
    _, nothing = fails("HTTP/1.1 200 OK\r\nContent-Le",
      "the server closed the connection in the middle of the response header")
    assert.is_false(nothing)
    fails("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
      "the server closed the connection after 3 of 10 body bytes")
    fails("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "in the middle of a chunk")
    fails("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "timed out after 3 of 10 body bytes", { err = "timeout" })
    _, nothing = fails("", "timed out before answering", { err = "timeout" })
    assert.is_true(nothing)
    fails("HT", "in the middle of the status line")
  end)
end)
