-- The engine: settings, argument checks, request building, response decoding, error mapping
-- and THE retry policy, as pure functions (no I/O). Every transport (libcurl, OpenResty
-- cosockets, libuv) moves the bytes of the requests built here; exchange.lua applies the
-- policy between tries.
local cjson = require "cjson"
local errors = require "airlock.errors"

local M = {}

M.VERSION = "0.1.0"
M.USER_AGENT = "airlock-sandbox-lua/" .. M.VERSION
M.DEFAULT_TEMPLATE = "sandbox-base:latest"
M.DEFAULT_TIMEOUT = 90          -- seconds per HTTP request
M.DEFAULT_CONNECT_TIMEOUT = 10  -- seconds to establish a connection
M.DEFAULT_MAX_RETRIES = 3
M.MAX_RETRY_WAIT = 30
M.IMPORT_TIMEOUT = 240
M.MAX_RAW_READ = 2 ^ 40        -- raw file reads: the server's quota bounds them, not the SDK
M.EXEC_GRACE = 30               -- exec HTTP timeout = max(timeout, command timeout + grace)
M.MISSING_SETTINGS =
  "Set base_url and api_key, or the SANDBOX_API_URL and SANDBOX_API_KEY environment variables."

local floor = math.floor

---------------------------------------------------------------- argument checks

local function bad_argument(what, expected, got)
  local shown = type(got) == "string" and string.format("%q", got) or tostring(got)
  if type(got) == "string" and #got > 60 then shown = "a string of " .. #got .. " bytes" end
  errors.raise("ValidationError", "bad argument '" .. what .. "': expected " .. expected ..
    ", got " .. (type(got) == "string" and shown or type(got) .. (got == nil and "" or " " .. shown)))
end
M.bad_argument = bad_argument

function M.is_integer(v)
  return type(v) == "number" and v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53
end

-- Count the code points of a UTF-8 string; nil, byte position for invalid UTF-8
-- (overlong forms, surrogates and values above U+10FFFF are invalid).
function M.utf8_len(s)
  local i, n, len = 1, 0, #s
  local byte = string.byte
  while i <= len do
    local c = byte(s, i)
    local extra, min
    if c < 0x80 then extra, min = 0, 0
    elseif c >= 0xC2 and c <= 0xDF then extra, min = 1, 0x80
    elseif c >= 0xE0 and c <= 0xEF then extra, min = 2, 0x800
    elseif c >= 0xF0 and c <= 0xF4 then extra, min = 3, 0x10000
    else return nil, i end
    if i + extra > len then return nil, i end
    local cp = extra == 0 and c or (c % (2 ^ (6 - extra)))
    for k = 1, extra do
      local cc = byte(s, i + k)
      if cc < 0x80 or cc > 0xBF then return nil, i end
      cp = cp * 64 + (cc - 0x80)
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return nil, i end
    i = i + extra + 1
    n = n + 1
  end
  return n
end

function M.check_string(what, v, opts)
  opts = opts or {}
  if type(v) ~= "string" then bad_argument(what, "a string", v) end
  if opts.non_empty and v == "" then bad_argument(what, "a non-empty string", v) end
  if opts.no_nul and v:find("\0", 1, true) then bad_argument(what, "a string without NUL bytes", v) end
  if opts.utf8 and not M.utf8_len(v) then
    local _, pos = M.utf8_len(v)
    errors.raise("ValidationError", "bad argument '" .. what .. "': not valid UTF-8 (byte " .. pos ..
      "); this field is text (files:write sends bytes with {binary = true})")
  end
  return v
end

function M.check_path(what, v)
  return M.check_string(what, v, { non_empty = true, no_nul = true, utf8 = true })
end

function M.check_integer(what, v, lo, hi)
  if not M.is_integer(v) or (lo and v < lo) or (hi and v > hi) then
    local range = (lo and hi) and ("an integer from " .. lo .. " to " .. hi)
      or (lo and ("an integer >= " .. lo)) or "an integer"
    bad_argument(what, range, v)
  end
  return floor(v)
end

function M.check_timeout(v)
  return M.check_integer("timeout", v, 1, 60)
end

---------------------------------------------------------------- encoding

-- application/x-www-form-urlencoded value, like Python's urlencode (quote_plus, safe=''):
-- letters, digits and _.-~ stay, space → +, everything else %XX.
function M.form_encode(s)
  return (tostring(s):gsub("[^%w_%.%-~ ]", function(c)
    return string.format("%%%02X", c:byte())
  end):gsub(" ", "+"))
end

-- One URL path segment (session ids given to attach()): like quote(s, safe='').
function M.quote(s)
  return (tostring(s):gsub("[^%w_%.%-~]", function(c)
    return string.format("%%%02X", c:byte())
  end))
end

-- JSON arrays: lua-cjson 2.1.0 encodes an empty table as {}, so arrays are marked.
local ARRAY = {}
function M.array(t)
  local a = {}
  for i, v in ipairs(t or {}) do a[i] = v end
  return setmetatable(a, ARRAY)
end
M.null = cjson.null

-- Encode a request body. obj is a list of {key, value} pairs (the key order is kept);
-- values: strings, numbers, booleans, M.null/cjson.null, M.array(...) lists.
local function encode_value(v)
  if v == cjson.null then return "null" end
  local t = type(v)
  if t == "string" or t == "boolean" then return cjson.encode(v) end
  if t == "number" then
    if M.is_integer(v) then return string.format("%d", v) end
    return cjson.encode(v)
  end
  if t == "table" and getmetatable(v) == ARRAY then
    local parts = {}
    for i, item in ipairs(v) do parts[i] = encode_value(item) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  if t == "table" then
    local parts = {}
    for i, kv in ipairs(v) do parts[i] = cjson.encode(kv[1]) .. ":" .. encode_value(kv[2]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  error("cannot encode a " .. t .. " as JSON")
end
M.encode = encode_value

-- lua-cjson 2.1.0 decodes every number as a float: on Lua 5.3+ integral values become
-- integers again (so an exit code prints as 3, not 3.0).
local tointeger = math.tointeger
local function fix_number(x)
  if tointeger and x == floor(x) and x >= -2 ^ 53 and x <= 2 ^ 53 then return tointeger(x) end
  return x
end

-- Decoded JSON with null object members removed (missing == null, as the contract says)
-- and integral numbers as integers. One pass over the tables, in place; it runs on every
-- answer, so calls are few (numbers that are already right are left alone).
local null = cjson.null
local function strip_table(t)
  for k, x in next, t do
    local kind = type(x)
    if kind == "number" then
      if tointeger and x % 1 == 0 and x >= -2 ^ 53 and x <= 2 ^ 53 then t[k] = tointeger(x) end
    elseif kind == "table" then
      strip_table(x)
    elseif x == null and type(k) == "string" then
      t[k] = nil
    end
  end
end

-- The same walk in C (airlock.core's strip_nulls), set by the transports that load the core
-- (set_native_strip): the engine itself never loads C.
local native_strip

local function strip_nulls(v)
  local kind = type(v)
  if kind == "table" then
    if not (native_strip and native_strip(v, null)) then strip_table(v) end
    return v
  end
  if kind == "number" then return fix_number(v) end
  return v
end
M.strip_nulls = strip_nulls

-- engine.set_native_strip(fn): fn(t, null) → true after doing strip_nulls' walk over t in
-- place (false: not done, the Lua walk runs); nil: the Lua walk only.
function M.set_native_strip(fn)
  native_strip = fn
end

---------------------------------------------------------------- settings

local function env_flag(value)
  if type(value) ~= "string" then return false end
  value = value:gsub("^%s+", ""):gsub("%s+$", ""):lower()
  return value == "1" or value == "true" or value == "yes"
end
M.env_flag = env_flag

local OPTIONS = {
  api_key = true, base_url = true, egress = true, template = true, verify = true,
  timeout = true, connect_timeout = true, max_retries = true, start = true,
  transport = true, max_concurrent_exec = true,
}

-- The transport option: nil, a name, or an object with send and sleep methods.
function M.check_transport(t)
  if t == nil or (type(t) == "string" and t:match("^[%w_]+$")) then return t end
  if type(t) == "table" and type(t.send) == "function" and type(t.sleep) == "function" then return t end
  bad_argument("transport", "\"curl\", \"ngx\", \"uv\" or an object with send and sleep methods", t)
end

-- Resolve client settings from options and the environment (getenv: a function like
-- os.getenv). Raises before any request. Returns a plain table (no references to objects).
function M.settings(opts, getenv)
  getenv = getenv or os.getenv
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then bad_argument("options", "a table", opts) end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      errors.raise("ValidationError", "unknown option '" .. tostring(k) .. "'")
    end
  end
  local base_url, api_key = opts.base_url, opts.api_key
  if base_url ~= nil and type(base_url) ~= "string" then bad_argument("base_url", "a string", base_url) end
  if api_key ~= nil and type(api_key) ~= "string" then bad_argument("api_key", "a string", api_key) end
  if base_url == nil or base_url == "" then base_url = getenv("SANDBOX_API_URL") end
  if api_key == nil or api_key == "" then api_key = getenv("SANDBOX_API_KEY") end
  if base_url == nil or base_url == "" or api_key == nil or api_key == "" then
    errors.raise("SandboxError", M.MISSING_SETTINGS)
  end
  if api_key:find("[%c]") then
    errors.raise("ValidationError", "bad argument 'api_key': control characters are not allowed")
  end
  base_url = base_url:gsub("/+$", "")
  if not base_url:match("^[hH][tT][tT][pP][sS]?://[^%s]+$") then
    bad_argument("base_url", "an http:// or https:// URL", base_url)
  end
  local verify = opts.verify
  if verify == nil then
    verify = not env_flag(getenv("SANDBOX_API_INSECURE"))
  elseif type(verify) == "string" then
    if verify == "" or verify:find("\0", 1, true) then
      bad_argument("verify", "true, false or a CA file path", verify)
    end
    -- a CA file that cannot be read fails here, not as a TLS error at the first request
    local f, why = io.open(verify, "rb")
    if not f then
      errors.raise("ValidationError", "bad argument 'verify': cannot read the CA file: " .. tostring(why))
    end
    f:close()
  elseif type(verify) ~= "boolean" then
    bad_argument("verify", "true, false or a CA file path", verify)
  end
  local timeout = opts.timeout
  if timeout == nil then timeout = M.DEFAULT_TIMEOUT end
  if type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0 or timeout > 86400 then
    bad_argument("timeout", "a number of seconds > 0", timeout)
  end
  local connect_timeout = opts.connect_timeout
  if connect_timeout == nil then connect_timeout = math.min(M.DEFAULT_CONNECT_TIMEOUT, timeout) end
  if type(connect_timeout) ~= "number" or connect_timeout ~= connect_timeout or connect_timeout <= 0
    or connect_timeout > 86400 then
    bad_argument("connect_timeout", "a number of seconds > 0", connect_timeout)
  end
  local max_retries = opts.max_retries
  if max_retries == nil then max_retries = M.DEFAULT_MAX_RETRIES end
  M.check_integer("max_retries", max_retries, 0, 100)
  local template = opts.template
  if template == nil then template = M.DEFAULT_TEMPLATE end
  M.check_string("template", template, { non_empty = true, utf8 = true })
  local max_exec = opts.max_concurrent_exec
  if max_exec ~= nil then M.check_integer("max_concurrent_exec", max_exec, 1, 1000) end
  local egress = {}
  if opts.egress ~= nil then
    if type(opts.egress) ~= "table" then bad_argument("egress", "a list of strings", opts.egress) end
    for i, rule in ipairs(opts.egress) do
      M.check_string("egress[" .. i .. "]", rule, { utf8 = true })
      egress[i] = rule
    end
  end
  local settings = {
    base_url = base_url, api_key = api_key, verify = verify, timeout = timeout,
    connect_timeout = connect_timeout, max_retries = max_retries, template = template,
    egress = egress, transport = M.check_transport(opts.transport), max_concurrent_exec = max_exec,
  }
  -- worked out once here, not at every request
  settings.key_header = "X-API-Key: " .. api_key
  settings.timeout_ms, settings.connect_timeout_ms = M.timeouts_ms(settings, timeout)
  return settings
end

---------------------------------------------------------------- requests

local CONTENT_TYPE_HEADER = "Content-Type: application/json"
local ACCEPT_HEADER = "Accept: application/json"
local USER_AGENT_HEADER = "User-Agent: " .. M.USER_AGENT

-- The request headers, a new list each time (a transport may keep or change its request).
function M.headers(settings)
  return { settings.key_header or "X-API-Key: " .. settings.api_key, CONTENT_TYPE_HEADER, ACCEPT_HEADER,
    USER_AGENT_HEADER }
end

-- The request and connect timeouts in milliseconds for a request timeout in seconds.
function M.timeouts_ms(settings, timeout)
  local connect = settings.connect_timeout
  if timeout < connect then connect = timeout end
  return floor(timeout * 1000 + 0.5), floor(connect * 1000 + 0.5)
end

local NO_OPTIONS = {}

-- A transport-neutral request description. opts: timeout (seconds), max_retries, query
-- (list of {name, value}, form-encoded), raw_body (a string sent as application/octet-stream
-- instead of body), raw_body_file (the same, read from that local file as it is sent),
-- raw_response (ask for application/octet-stream; decode keeps the bytes).
function M.build(settings, method, path, body, opts)
  opts = opts or NO_OPTIONS
  local url = settings.base_url .. path
  local query = opts.query
  if query and #query > 0 then
    local q = {}
    for i, kv in ipairs(query) do q[i] = M.form_encode(kv[1]) .. "=" .. M.form_encode(kv[2]) end
    url = url .. "?" .. table.concat(q, "&")
  end
  local timeout_ms, connect_timeout_ms = settings.timeout_ms, settings.connect_timeout_ms
  if opts.timeout or not timeout_ms then
    timeout_ms, connect_timeout_ms = M.timeouts_ms(settings, opts.timeout or settings.timeout)
  end
  local max_retries = opts.max_retries
  if max_retries == nil then max_retries = settings.max_retries end
  local headers = M.headers(settings)
  local encoded = body ~= nil and encode_value(body) or nil
  if opts.raw_body or opts.raw_body_file then   -- the airlock extension: a file's exact bytes
    headers[2] = "Content-Type: application/octet-stream"
    encoded = opts.raw_body
  end
  if opts.raw_response then headers[3] = "Accept: application/octet-stream" end
  return {
    method = method,
    url = url,
    headers = headers,
    body = encoded,
    body_file = opts.raw_body_file,
    max_response_bytes = opts.raw_response and M.MAX_RAW_READ or nil,
    timeout_ms = timeout_ms,
    connect_timeout_ms = connect_timeout_ms,
    max_retries = max_retries,
    verify = settings.verify,
  }
end

function M.session_path(session_id, suffix)
  return "/v1/sessions/" .. M.quote(session_id) .. (suffix or "")
end

---------------------------------------------------------------- responses

-- Python's http.HTTPStatus phrases, used when an error body carries no detail and the
-- server's status line had no reason phrase (HTTP/2).
M.REASONS = {
  [400] = "Bad Request", [401] = "Unauthorized", [402] = "Payment Required", [403] = "Forbidden",
  [404] = "Not Found", [405] = "Method Not Allowed", [406] = "Not Acceptable",
  [408] = "Request Timeout", [409] = "Conflict", [410] = "Gone", [411] = "Length Required",
  [413] = "Request Entity Too Large", [414] = "Request-URI Too Long",
  [415] = "Unsupported Media Type", [422] = "Unprocessable Entity", [429] = "Too Many Requests",
  [500] = "Internal Server Error", [501] = "Not Implemented", [502] = "Bad Gateway",
  [503] = "Service Unavailable", [504] = "Gateway Timeout",
}

local function parse_json(body)
  if body == nil or body == "" then return false end
  local ok, data = pcall(cjson.decode, body)
  if not ok then return false end
  return true, data
end

local function is_object(t)
  if type(t) ~= "table" then return false end
  return next(t) == nil or t[1] == nil
end

-- Retry-After as Python reads it: an integer only if all digits.
function M.parse_retry_after(value)
  if type(value) == "string" and value:match("^%d+$") then return tonumber(value) end
  return nil
end

-- The error for an HTTP error answer {status, body, reason, headers}.
function M.http_error(settings, res)
  local status = res.status
  local reason = res.reason
  if reason == nil or reason == "" then reason = M.REASONS[status] or ("HTTP " .. tostring(status)) end
  local detail
  local ok, data = parse_json(res.body)
  if ok and is_object(data) and data.detail ~= nil and data.detail ~= cjson.null then
    detail = data.detail
  end
  if detail == nil then detail = reason end
  local message
  if type(detail) == "string" then
    message = detail
  else
    local enc_ok, text = pcall(cjson.encode, detail)
    message = enc_ok and text or tostring(detail)
  end
  local class = errors.STATUS_ERRORS[status] or "SandboxError"
  local fields = { status = status, detail = detail, secret = settings.api_key }
  if status == 429 then fields.retry_after = M.parse_retry_after(res.headers and res.headers["retry-after"]) end
  return errors.new(class, message, fields)
end

function M.connection_error(settings, reason)
  return errors.new("APIConnectionError",
    "Could not reach " .. settings.base_url .. ": " .. tostring(reason),
    { secret = settings.api_key })
end

-- Decode what a transport's send gave: a response {status, reason, headers, body}, or nil
-- and a failure {message, sent, tls}. → true, data (nil for an empty body) | false, error.
-- raw: a 2xx body is the data as it came (a raw file read).
function M.decode(settings, res, failure, raw)
  if res == nil or res.status == nil then
    return false, M.connection_error(settings, failure and failure.message or "no response")
  end
  local status = res.status
  if status < 200 or status >= 300 then return false, M.http_error(settings, res) end
  if raw then return true, res.body or "" end   -- the exact bytes (raw is the request's opts.raw_response)
  if res.body == nil or res.body == "" then return true, nil end
  local ok, data = parse_json(res.body)
  if not ok then
    return false, errors.new("SandboxError",
      "The server answered " .. status .. " with a body that is not JSON", { status = status })
  end
  return true, strip_nulls(data)
end

-- The missing-file answer of GET .../read (a 200, contract 1.6).
function M.missing_file_text(path)
  return "Error: File '" .. path .. "' does not exist."
end

---------------------------------------------------------------- retry policy (contract 3.7)

-- Whether the policy may ever retry after this outcome of a try (res: the response, nil
-- after a connection failure): only connection failures and 429/503 answers are retried.
-- A quick test, so that retry_wait is asked only when its answer can be a wait.
function M.may_retry(res)
  if res == nil then return true end
  local status = res.status
  return status == nil or status == 0 or status == 429 or status == 503
end

-- THE retry policy of the SDK (every transport, every call). Seconds to wait before the next
-- try, or nil to give up. t: attempt (0 for the first failure), max_retries, method, status
-- (nil = connection failure), retry_after (the raw header).
function M.retry_wait(t)
  local attempt, max_retries = t.attempt, t.max_retries or M.DEFAULT_MAX_RETRIES
  if attempt >= max_retries then return nil end
  local backoff = math.min(2 ^ attempt, M.MAX_RETRY_WAIT)
  local status = t.status
  if status == 0 then status = nil end
  if status == 429 then
    local wait = M.parse_retry_after(t.retry_after) or backoff
    if wait > M.MAX_RETRY_WAIT then return nil end
    return floor(wait)
  end
  if status == 503 then return floor(backoff) end
  if status == nil and (t.method == "GET" or t.method == "DELETE") then return floor(backoff) end
  return nil
end

-- The server's limit of commands at once when res is its "too many commands" answer
-- (contract 2.2: 429 without Retry-After, "Too many commands running at once: <n> allowed."),
-- else nil.
function M.concurrency_limit(res)
  if res.status ~= 429 or (res.headers and res.headers["retry-after"]) then return nil end
  local ok, data = parse_json(res.body)
  if not ok or type(data) ~= "table" or type(data.detail) ~= "string" then return nil end
  local n = data.detail:match("^Too many commands running at once: (%d+) allowed")
  return n and tonumber(n) or nil
end

return M
