-- The OpenResty transport: HTTP/1.1 (airlock.internal.http1) over nginx cosockets. Each send takes a
-- connection from a keep-alive pool (keyed by scheme, host, port and TLS settings, so plain
-- and TLS, or two hosts, never share one), does the TLS handshake with verification on a new
-- one, writes the request, reads the answer and gives the connection back to the pool (or
-- closes it). Cosocket calls yield to nginx by themselves, so the same code waits without
-- blocking the worker in a request handler, in a light thread (airlock.spawn) or in a
-- timer. Where cosockets do not exist (init_by_lua, set_by_lua, log_by_lua, header and body
-- filters) send raises an error naming the phase and the way out (ngx.timer.at).
-- Loading it installs the OpenResty host (airlock.ngx): a scheduler per request or timer,
-- the request's sessions deleted when it ends.
local http1 = require "airlock.internal.http1"
local tasks = require "airlock.tasks"
local errors = require "airlock.errors"
local host = require "airlock.ngx"

local M = { name = "ngx" }

M.KEEPALIVE_IDLE_MS = 10000   -- idle connections close after this (airlockd's own is 30 s)
M.POOL_SIZE = 64              -- idle connections kept per pool (per worker)
M.STALE_RETRIES = 2           -- a pooled connection the server had closed: try a fresh one

local counters = { transfers = 0, connects = 0, reused = 0, tls_handshakes = 0, failures = 0 }

-- Where to send the SDK's calls instead, per phase without cosockets.
local ADVICE = {
  init = "init_by_lua runs in the master before any request; make the call from a request "
    .. "handler, or from a timer that init_worker_by_lua starts: ngx.timer.at(0, function() ... end)",
  init_worker = "start a timer here and make the call in it: ngx.timer.at(0, function() ... end)",
  exit_worker = "nginx has neither cosockets nor timers at worker exit (the SDK deletes the "
    .. "worker's open sessions itself from a timer when the worker stops gracefully)",
}

local function phase_error(phase)
  local advice = ADVICE[phase] or ("make the call in rewrite_by_lua*, access_by_lua* or content_by_lua*, "
    .. "or hand it to a timer from here: ngx.timer.at(0, function() ... end)")
  error(errors.new("SandboxError", "airlock: nginx has no cosockets in the " .. phase .. " phase ("
    .. phase .. "_by_lua*), so the SDK cannot make a call there without blocking the worker: "
    .. advice), 0)
end

local function check_phase()
  local phase = ngx.get_phase()
  if not require("airlock.transport").COSOCKET_PHASES[phase] then phase_error(phase) end
end

local function now_ms()
  return ngx.now() * 1000
end

---------------------------------------------------------------- verify = "ca.pem"

-- lua-nginx-module verifies every connection against the one CA file that
-- `lua_ssl_trusted_certificate` names (sslhandshake takes no CA), and gives Lua no way to read
-- that directive: the host says which file it is, and verify = "<file>" is honoured only when
-- it is that file (the same bytes). Any other file raises at the call, never a silent
-- difference from the curl transport.
local trusted = { path = nil, bytes = nil }
local ca_bytes = {}   -- path → contents, read once per worker

local function read_ca(path)
  local bytes = ca_bytes[path]
  if bytes == nil then
    local f = io.open(path, "rb")
    bytes = f and f:read("*a") or false
    if f then f:close() end
    ca_bytes[path] = bytes
  end
  return bytes
end

-- t.set_trusted_certificate(path): the CA file `lua_ssl_trusted_certificate` names in this
-- nginx (nil: none declared). Raises when the file cannot be read.
function M.set_trusted_certificate(path)
  if path == nil then
    trusted.path, trusted.bytes = nil, nil
    return
  end
  local bytes = type(path) == "string" and read_ca(path)
  if not bytes then
    error(errors.new("ValidationError", "airlock.transport.ngx.set_trusted_certificate: cannot read the CA "
      .. "file " .. tostring(path)), 2)
  end
  trusted.path, trusted.bytes = path, bytes
end

local function check_ca_file(verify)
  if type(verify) ~= "string" then return end
  local bytes = read_ca(verify)
  if bytes and trusted.bytes and bytes == trusted.bytes then return end
  error(errors.new("ValidationError", "verify = \"" .. verify .. "\" cannot be honoured in nginx: "
    .. "lua-nginx-module verifies every connection against the CA file of `lua_ssl_trusted_certificate` "
    .. "only, and " .. (trusted.path and ("that is " .. trusted.path .. ", another file")
      or "the SDK was not told which file that is")
    .. ". Point `lua_ssl_trusted_certificate` at " .. verify .. " in the http block and declare it once "
    .. "(init_by_lua*): require(\"airlock.transport.ngx\").set_trusted_certificate(\"" .. verify
    .. "\"); or use verify = true"), 0)
end

-- The address to connect to: IP literals as they are, localhost without a resolver, other
-- names through nginx's `resolver`.
local function address(u)
  if u.host == "localhost" then return "127.0.0.1" end
  if u.host:find(":", 1, true) then return "[" .. u.host .. "]" end
  return u.host
end

local function endpoint(u)
  return u.authority ~= "" and u.authority or (u.host .. ":" .. u.port)
end

local function connect_message(err, u)
  if err and err:find("no resolver defined", 1, true) then
    return "cannot resolve \"" .. u.host .. "\": nginx has no resolver; add `resolver <DNS server "
      .. "address>;` to the http block of nginx.conf (e.g. `resolver 127.0.0.53;`), or use an IP "
      .. "address in the URL"
  end
  if err == "timeout" then return "timed out connecting to " .. endpoint(u) end
  return "cannot connect to " .. endpoint(u) .. ": " .. tostring(err)
end

-- The reason when lua-nginx-module reported a handshake as done although its certificate
-- check failed (see exchange_once): nginx's error log has OpenSSL's words.
local UNREPORTED = "the server's certificate was refused (nginx's error log says why: "
  .. "\"lua ssl certificate verify error\")"

local function tls_message(err, u, verify)
  err = tostring(err)
  local message = "TLS handshake with " .. endpoint(u) .. " failed: " .. err
  if verify == false then return message end
  local unknown = err == UNREPORTED   -- a wrong CA, or a certificate for another name
  if err:find("host mismatch", 1, true) or (unknown and http1.is_ip(u.host)) then
    if http1.is_ip(u.host) then
      return message .. "; nginx matches certificates against host names only (never an IP "
        .. "address): put the name the certificate is for in the URL (e.g. https://localhost:"
        .. u.port .. ")"
    end
    return message .. "; the certificate is not for " .. u.host
  end
  if unknown then message = message .. "; the certificate may not be for " .. u.host end
  if unknown or err:match("^%d+: ") then  -- an OpenSSL verify error: "20: unable to get local issuer certificate"
    if type(verify) == "string" then
      return message .. "; in nginx the server certificate is verified against the CA file of "
        .. "`lua_ssl_trusted_certificate`: check that it names " .. verify .. " (and raise "
        .. "`lua_ssl_verify_depth` for a chain with intermediates)"
    end
    return message .. "; nginx verifies against `lua_ssl_trusted_certificate` only (no system "
      .. "default): set it in the http block, e.g. `lua_ssl_trusted_certificate "
      .. "/etc/ssl/certs/ca-certificates.crt;` and `lua_ssl_verify_depth 4;`"
  end
  return message
end

-- The pool a connection belongs to: never shared between plain and TLS, hosts, ports or
-- verification settings (a connection verified for one name is not reused for another).
local function pool_key(u, verify)
  if not u.tls then return "airlock:http:" .. u.host .. ":" .. u.port end
  local v = verify == false and "noverify" or (type(verify) == "string" and ("ca=" .. verify) or "verify")
  return "airlock:https:" .. u.host .. ":" .. u.port .. ":" .. v
end

-- Receives with the time left before deadline as each call's timeout.
local function reader(sock, deadline)
  local function left()
    local ms = math.floor(deadline - now_ms())
    if ms <= 0 then return nil end
    sock:settimeout(ms)
    return ms
  end
  return {
    any = function(max)
      if not left() then return nil, "timeout" end
      return sock:receiveany(max)
    end,
    exact = function(n)
      if not left() then return nil, "timeout", "" end
      return sock:receive(n)
    end,
  }
end

-- Methods sent again on a fresh connection when a pooled one turns out dead (like libcurl;
-- a POST never is: the server may have run it).
local REPLAYABLE = { GET = true, HEAD = true, DELETE = true }

local function broken(err)
  return err == "closed" or err == "broken pipe" or (type(err) == "string" and err:find("reset", 1, true) ~= nil)
end

-- Sends the body file's first size bytes after the head, a piece at a time (a large upload
-- never sits in memory): true | nil, message.
local FILE_PIECE = 65536
local function send_file(sock, path, size)
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot open the body file: " .. tostring(err) end
  local left = size
  while left > 0 do
    local piece = f:read(math.min(left, FILE_PIECE))
    if not piece then
      f:close()
      return nil, "the body file ended before its " .. size .. " bytes were sent (it changed meanwhile)"
    end
    local ok, why = sock:send(piece)
    if not ok then
      f:close()
      return nil, why
    end
    left = left - #piece
  end
  f:close()
  return true
end

-- A connection to u, from its pool or new (TLS handshake done): sock, times reused | nil,
-- failure. Debian 12's lua-nginx-module (0.10.23, lua-resty-core 0.1.25) can lose a failed
-- verification when the handshake completes without waiting: sslhandshake then returns true
-- on a connection it has closed, or raises resty.core's "assertion failed!" (a few per cent of
-- handshakes; one in ten and in bursts on a loaded machine). OpenSSL's reason is only reported
-- when the handshake waited, so such a handshake is tried again on a new connection,
-- HANDSHAKE_TRIES times at most (each is a local handshake: milliseconds).
local HANDSHAKE_TRIES = 20
local function open(u, verify, connect_ms, deadline)
  for _ = 1, HANDSHAKE_TRIES do
    local sock = ngx.socket.tcp()
    local total = math.max(1, math.floor(deadline - now_ms()))
    sock:settimeouts(math.min(connect_ms, total), total, total)
    local ok, err = sock:connect(address(u), u.port, { pool = pool_key(u, verify), pool_size = M.POOL_SIZE })
    if not ok then return nil, { message = connect_message(err, u), sent = false } end
    local reused = sock:getreusedtimes() or 0
    if reused > 0 then
      counters.reused = counters.reused + 1
      return sock, reused
    end
    counters.connects = counters.connects + 1
    if not u.tls then return sock, 0 end
    counters.tls_handshakes = counters.tls_handshakes + 1
    local called, done, why = tasks.pcall(sock.sslhandshake, sock, false, u.host, verify ~= false)
    if called and done and sock:getreusedtimes() then return sock, 0 end -- still open: verified
    sock:close()
    if not called and not tostring(done):find("assertion failed!", 1, true) then error(done, 0) end
    if called and not done then
      return nil, { message = tls_message(why, u, verify), sent = false, tls = true }
    end
  end
  return nil, { message = tls_message("nginx closed the connection without saying why", u, verify),
                sent = false, tls = true }
end

-- One exchange on one connection: response | nil, failure, stale (a pooled connection that
-- turned out dead before the server answered: worth one more try on another).
local function exchange_once(request, u, bytes, body_len, verify, connect_ms, deadline)
  local sock, reused = open(u, verify, connect_ms, deadline)
  if not sock then return nil, reused end
  local replay = reused > 0 and REPLAYABLE[request.method]
  local sent, send_err = sock:send(bytes)
  if not sent and reused == 0 and u.tls and verify ~= false and broken(send_err) then
    -- lua-nginx-module 0.10.23 may report a handshake that completed asynchronously as done
    -- although the certificate check failed (it logs "lua ssl certificate verify error") and
    -- closes the connection: the first write fails. That is the TLS failure, never retried.
    sock:close()
    return nil, { message = tls_message(UNREPORTED, u, verify), sent = false, tls = true }
  end
  if sent and request.body_file then sent, send_err = send_file(sock, request.body_file, body_len) end
  if not sent then
    sock:close()
    return nil, { message = "sending the request to " .. endpoint(u) .. " failed: " .. tostring(send_err),
                  sent = true }, replay and broken(send_err)
  end
  -- a streamed answer's callback that raises ends the connection (the server stops the command)
  local read_ok, res, why, nothing, too_large = tasks.pcall(http1.read_response, reader(sock, deadline),
    request.method, request.max_response_bytes, request.on_chunk)
  if not read_ok then
    sock:close()
    error(res, 0)
  end
  if not res then
    sock:close()
    local timed_out = why:find("^timed out") ~= nil
    if timed_out then
      why = why .. " (timeout " .. (request.timeout_ms or 0) .. " ms)"
    elseif reused > 0 and nothing and not replay then
      why = why .. " (the " .. request.method .. " was not sent again: it may have run)"
    end
    return nil, { message = why, sent = true, too_large = too_large }, replay and nothing and not timed_out
  end
  if not (res.keepalive and sock:setkeepalive(M.KEEPALIVE_IDLE_MS, M.POOL_SIZE)) then sock:close() end
  return { status = res.status, reason = res.reason, headers = res.headers, body = res.body }
end

-- t:send(request) → response | nil, failure (see airlock.transport). One attempt (a pooled
-- connection found dead is replaced, as libcurl does); raises outside cosocket phases.
function M:send(request)   -- luacheck: ignore 212
  check_phase()
  local u, why = http1.parse_url(request.url)
  if not u then return nil, { message = "bad URL: " .. why, sent = false } end
  if u.tls then check_ca_file(request.verify) end
  local body_len
  if request.body_file then
    local f, err = io.open(request.body_file, "rb")
    if not f then return nil, { message = "cannot open the body file: " .. tostring(err), sent = false } end
    body_len = f:seek("end")
    f:close()
  end
  local bytes = http1.request(request.method, u, request.headers, request.body, body_len)
  local timeout_ms = request.timeout_ms or 90000
  local connect_ms = request.connect_timeout_ms or timeout_ms
  local verify = request.verify
  if verify == nil then verify = true end
  local deadline = now_ms() + timeout_ms
  counters.transfers = counters.transfers + 1
  local res, failure, stale
  for _ = 0, M.STALE_RETRIES do
    res, failure, stale = exchange_once(request, u, bytes, body_len, verify, connect_ms, deadline)
    if res or not stale then break end
  end
  if not res then counters.failures = counters.failures + 1 end
  return res, failure
end

-- t:sleep(seconds): ngx.sleep (never 0: Debian's nginx warns about it), yielding to nginx.
function M:sleep(seconds)   -- luacheck: ignore 212
  if seconds ~= seconds or seconds <= 0 then return end
  check_phase()
  ngx.sleep(math.max(seconds, 0.001))
end

-- t:stats() → this worker's counters: transfers, connects (new connections), reused (from the
-- pool), tls_handshakes, failures; and the host's (open_sessions, scopes, cleanups, aborts,
-- deleted).
function M:stats()   -- luacheck: ignore 212
  local s = {}
  for k, v in pairs(counters) do s[k] = v end
  for k, v in pairs(host.stats()) do s[k] = v end
  return s
end

host.install()

return M
