-- HTTP/1.1 on the wire for transports that own their sockets (the OpenResty cosocket
-- transport): URL parsing, the request's bytes, and reading one response from a socket-like
-- object (Content-Length, chunked, or until close) with bounded header and body sizes and a
-- clear message for anything that is not HTTP. Pure Lua, no I/O of its own: the caller gives
-- a reader with
--   reader.any(max)  → data (1..max bytes, as soon as some arrived) | nil, err
--   reader.exact(n)  → data (exactly n bytes) | nil, err, partial
-- (err "closed" when the peer closed, "timeout", ...).
local M = {}

M.MAX_HEADER_BYTES = 65536            -- the status line and header block (like the C core)
M.MAX_BODY_BYTES = 64 * 1024 * 1024   -- one response body
M.MAX_CHUNK_LINE = 4096               -- a chunk-size line with its extensions
M.READ_SIZE = 16384
M.PIECE_SIZE = 262144   -- a streamed fixed-length body goes to on_chunk in pieces of this

local find, sub, lower, byte = string.find, string.sub, string.lower, string.byte
local concat = table.concat

---------------------------------------------------------------- URLs

local DEFAULT_PORT = { http = 80, https = 443 }

-- M.parse_url(url) → { scheme, tls, host (brackets removed for IPv6), port, authority (the
-- Host header), target (path and query) } | nil, message
function M.parse_url(url)
  if type(url) ~= "string" then return nil, "the URL is not a string" end
  local scheme, rest = url:match("^([%a][%w+.-]*)://(.*)$")
  scheme = scheme and lower(scheme)
  if not DEFAULT_PORT[scheme] then return nil, "not an http:// or https:// URL" end
  local authority, target = rest:match("^([^/?#]*)(.*)$")
  target = target:gsub("#.*$", "")
  if target == "" then target = "/" elseif byte(target, 1) == 63 then target = "/" .. target end -- "?..."
  if find(authority, "@", 1, true) then return nil, "user:password@ in URLs is not supported" end
  local host, port
  if byte(authority, 1) == 91 then                 -- "[v6]" or "[v6]:port"
    host, port = authority:match("^%[([%x:.]+)%]:?(%d*)$")
  else
    host, port = authority:match("^([^:]+):?(%d*)$")
  end
  if not host or host == "" then return nil, "no host in the URL" end
  if port == "" then port = DEFAULT_PORT[scheme] else port = tonumber(port) end
  if not port or port < 1 or port > 65535 then return nil, "bad port in the URL" end
  if find(target, "[%s%c]") then return nil, "spaces or control characters in the URL's path" end
  return { scheme = scheme, tls = scheme == "https", host = lower(host), port = port,
           authority = authority, target = target }
end

-- Whether host is an IPv4 or IPv6 literal (no name to resolve).
function M.is_ip(host)
  return host:match("^%d+%.%d+%.%d+%.%d+$") ~= nil or host:find(":", 1, true) ~= nil
end

---------------------------------------------------------------- requests

-- Header names the request framing owns: the caller's are dropped (the body is framed here).
local FRAMING = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true }

-- M.request(method, url_parts, headers, body [, body_len]) → the request as a list of
-- strings (for a socket's send), or raises for a header line that could split the request.
-- body_len without body: only the head, for a body the caller sends after it (a file's).
function M.request(method, u, headers, body, body_len)
  local out = { method, " ", u.target, " HTTP/1.1\r\n" }
  local has_host = false
  for _, line in ipairs(headers or {}) do
    if find(line, "[\r\n%z]") then error("airlock: a request header contains a line break or NUL", 0) end
    local name = line:match("^([^:]+):")
    if not name then error("airlock: a request header is not a \"Name: value\" line", 0) end
    name = lower(name)
    if name == "host" then has_host = true end
    if not FRAMING[name] then
      out[#out + 1] = line
      out[#out + 1] = "\r\n"
    end
  end
  if not has_host then
    out[#out + 1] = "Host: " .. u.authority .. "\r\n"
  end
  if body_len then
    out[#out + 1] = "Content-Length: " .. string.format("%d", body_len) .. "\r\n"
  elseif body ~= nil or method == "POST" or method == "PUT" or method == "PATCH" then
    out[#out + 1] = "Content-Length: " .. #(body or "") .. "\r\n"
  end
  out[#out + 1] = "\r\n"
  if body and body ~= "" then out[#out + 1] = body end
  return out
end

---------------------------------------------------------------- responses

local function shown(bytes)
  bytes = sub(bytes, 1, 40)
  return (bytes:gsub("[^\32-\126]", "?"))
end

-- A buffered view of the reader: buf holds bytes not consumed yet, from pos.
local Stream = {}
Stream.__index = Stream

local function stream(reader)
  return setmetatable({ reader = reader, buf = "", pos = 1, got = 0 }, Stream)
end

function Stream:avail()
  return #self.buf - self.pos + 1
end

-- Reads more into buf; nil, err when the reader failed.
function Stream:fill()
  local data, err = self.reader.any(M.READ_SIZE)
  if not data then return nil, err end
  self.got = self.got + #data
  if self.pos > #self.buf then
    self.buf, self.pos = data, 1
  else
    self.buf = sub(self.buf, self.pos) .. data
    self.pos = 1
  end
  return true
end

-- Takes n bytes (reading what is missing in one go).
function Stream:take(n)
  local have = self:avail()
  if have >= n then
    local s = sub(self.buf, self.pos, self.pos + n - 1)
    self.pos = self.pos + n
    return s
  end
  local head = sub(self.buf, self.pos)
  self.buf, self.pos = "", 1
  local rest, err, partial = self.reader.exact(n - have)
  if not rest then
    self.got = self.got + #(partial or "")
    return nil, err, have + #(partial or "")
  end
  self.got = self.got + #rest
  return head .. rest
end

-- One CRLF-terminated line (without its CRLF), at most max bytes.
function Stream:line(max, what)
  while true do
    local e = find(self.buf, "\r\n", self.pos, true)
    if e and e - self.pos > max then return nil, what .. " longer than " .. max .. " bytes" end
    if e then
      local line = sub(self.buf, self.pos, e - 1)
      self.pos = e + 2
      return line
    end
    if self:avail() > max then return nil, what .. " longer than " .. max .. " bytes" end
    local ok, err = self:fill()
    if not ok then return nil, err, true end
  end
end

local function io_error(err, during)
  if err == "closed" then return "the server closed the connection " .. during end
  if err == "timeout" then return "timed out " .. during end
  return tostring(err) .. " " .. during
end

-- The header block: status, reason, version, headers (lower-case names, repeats joined).
local function read_head(s)
  -- not HTTP: say so as soon as the first bytes show it, not after 64 KiB of garbage
  while s:avail() < 5 do
    local ok, err = s:fill()
    if not ok then
      if s:avail() > 0 then return nil, io_error(err, "in the middle of the status line") end
      return nil, io_error(err, "before answering"), "nothing"
    end
  end
  if sub(s.buf, s.pos, s.pos + 4) ~= "HTTP/" then
    return nil, "not an HTTP response (it starts with \"" .. shown(sub(s.buf, s.pos)) .. "\")"
  end
  local start_pos = s.pos
  local status_line, err = s:line(M.MAX_HEADER_BYTES, "the status line")
  if not status_line then return nil, io_error(err, "in the middle of the response header") end
  local minor, code, reason = status_line:match("^HTTP/1%.([01]) (%d%d%d) (.*)$")
  if not minor then
    minor, code = status_line:match("^HTTP/1%.([01]) (%d%d%d)$")
    reason = ""
  end
  if not minor then return nil, "bad status line \"" .. shown(status_line) .. "\"" end
  local headers, size = {}, #status_line + 2
  while true do
    local line, lerr = s:line(M.MAX_HEADER_BYTES - size, "the response header")
    if not line then
      if lerr and lerr:find("longer than", 1, true) then
        return nil, "the response header is larger than " .. M.MAX_HEADER_BYTES .. " bytes"
      end
      return nil, io_error(lerr, "in the middle of the response header")
    end
    size = size + #line + 2
    if line == "" then break end
    local name, value = line:match("^([!#$%%&'*+%-.^_`|~%w]+):[ \t]*(.-)[ \t]*$")
    if not name then return nil, "bad response header line \"" .. shown(line) .. "\"" end
    name = lower(name)
    local old = headers[name]
    headers[name] = old and (old .. ", " .. value) or value
  end
  s.head_bytes = s.pos - start_pos
  return { version = "1." .. minor, status = tonumber(code), reason = reason, headers = headers }
end

local function too_large_message(limit)
  return "the response body is larger than " .. string.format("%d", limit) .. " bytes"
end

-- nil, the message, true: the body readers' "too large" (read_response adds `nothing`).
local function body_too_large(limit)
  return nil, too_large_message(limit), true
end

-- With on_chunk (a streamed answer) each chunk goes to on_chunk(data) as it arrives: no
-- body is kept, so no size limit applies.
local function read_chunked(s, limit, on_chunk)
  local parts, total = {}, 0
  while true do
    local line, err = s:line(M.MAX_CHUNK_LINE, "a chunk-size line")
    if not line then return nil, io_error(err, "in the middle of a chunked body") end
    local hex, rest = line:match("^(%x+)(.*)$")
    if not hex or #hex > 8 or not (rest == "" or rest:match("^[ \t]*;")) then
      return nil, "bad chunk size line \"" .. shown(line) .. "\""
    end
    local size = tonumber(hex, 16)
    if size == 0 then break end
    total = total + size
    if total > limit and not on_chunk then return body_too_large(limit) end
    local data, derr = s:take(size + 2)
    if not data then return nil, io_error(derr, "in the middle of a chunk") end
    if sub(data, -2) ~= "\r\n" then return nil, "a chunk is not followed by CRLF" end
    if on_chunk then on_chunk(sub(data, 1, -3)) else parts[#parts + 1] = sub(data, 1, -3) end
  end
  -- trailers, up to the empty line
  local size = 0
  while true do
    local line, err = s:line(M.MAX_HEADER_BYTES - size, "the chunked trailer")
    if not line then return nil, io_error(err, "in the chunked trailer") end
    size = size + #line + 2
    if line == "" then break end
  end
  return concat(parts)
end

local function read_until_close(s, limit)
  local parts = { sub(s.buf, s.pos) }
  local total = #parts[1]
  s.buf, s.pos = "", 1
  while total <= limit do
    local data, err = s.reader.any(M.READ_SIZE)
    if not data then
      if err == "closed" then break end
      return nil, io_error(err, "reading a body that ends when the connection closes")
    end
    total = total + #data
    parts[#parts + 1] = data
  end
  if total > limit then return body_too_large(limit) end
  return concat(parts)
end

-- Whether the connection may carry another request after this response.
local function keeps_alive(head)
  if head.version ~= "1.1" then return false end
  local c = head.headers.connection
  return not (c and lower(c):find("close", 1, true))
end

-- M.read_response(reader, method [, max_body [, on_chunk]]) → response {status, reason,
-- headers, body, keepalive} | nil, message, nothing (true when not one byte of an answer
-- arrived: a dead idle connection, which the caller may retry on a fresh one), too_large
-- (true when the body is larger than max_body: "the response body is larger than
-- <max_body> bytes", the C core's words). max_body: the
-- largest body taken (default MAX_BODY_BYTES; a raw file read asks for more). With on_chunk
-- the body goes to on_chunk(data, status) as it arrives (a chunked one piece by piece, with no
-- size limit) and body is "".
function M.read_response(reader, method, max_body, on_chunk)
  local limit = max_body or M.MAX_BODY_BYTES
  local s = stream(reader)
  local head, err, nothing
  repeat
    head, err, nothing = read_head(s)
    if not head then return nil, err, nothing == "nothing" end
    if head.status == 101 then return nil, "the server switched protocols (101), which airlock does not ask for" end
  until head.status >= 200
  local h = head.headers
  local body, keepalive = "", keeps_alive(head)
  local te = h["transfer-encoding"]
  if method == "HEAD" or head.status == 204 or head.status == 304 then  -- luacheck: ignore 542
    -- no body
  elseif te then
    if not lower(te):match("chunked%s*$") then
      return nil, "unsupported Transfer-Encoding \"" .. shown(te) .. "\""
    end
    local too_large
    body, err, too_large = read_chunked(s, limit, on_chunk and function(data) on_chunk(data, head.status) end)
    if not body then return nil, err, false, too_large end
  elseif h["content-length"] then
    local cl = h["content-length"]
    local n = cl:match("^%d+$") and tonumber(cl)
    if not n then
      -- repeated headers arrive joined: "5, 5" is one length said twice
      local first = cl:match("^(%d+)")
      for v in cl:gmatch("[^,%s]+") do if v ~= first then first = nil break end end
      n = first and tonumber(first)
    end
    if not n then return nil, "bad Content-Length \"" .. shown(cl) .. "\"" end
    if n > limit and not on_chunk then return nil, too_large_message(limit), false, true end
    local got
    if on_chunk then
      -- handed on piece by piece: a large file read never sits in memory whole
      local left = n
      while left > 0 do
        local piece
        piece, err, got = s:take(math.min(left, M.PIECE_SIZE))
        if not piece then
          return nil, io_error(err, "after " .. tostring(n - left + (got or 0)) .. " of " .. n .. " body bytes")
        end
        left = left - #piece
        on_chunk(piece, head.status)
      end
    else
      body, err, got = s:take(n)
      if not body then
        return nil, io_error(err, "after " .. tostring(got) .. " of " .. n .. " body bytes")
      end
    end
  else
    local too_large
    body, err, too_large = read_until_close(s, limit)
    if not body then return nil, err, false, too_large end
    keepalive = false
  end
  -- bytes beyond the response: the connection is out of step, never reuse it
  if s:avail() > 0 then keepalive = false end
  if on_chunk and body ~= "" then
    on_chunk(body, head.status)
    body = ""
  end
  return { status = head.status, reason = head.reason, headers = h, body = body, keepalive = keepalive }
end

return M
