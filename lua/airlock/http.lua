--- JSON over HTTP(S) for talking to LLM providers from an agent loop, on the SDK's own
-- transports (libcurl with connection reuse; OpenResty cosockets inside nginx) and its one
-- retry policy: 429 (honouring an integer Retry-After up to 30 s) and 503 are retried on any
-- method, connection failures on GET/DELETE only, with the SDK's backoff of 1, 2, 4 s.
-- Inside an airlock.spawn() task the waits yield like every SDK call.
--
--   local http = require "airlock.http"
--   local status, data = http.request{
--     method = "POST", url = "https://api.openai.com/v1/chat/completions",
--     headers = { Authorization = "Bearer " .. key }, body = { model = "...", messages = {...} },
--   }
--
-- Returns status, data (the decoded JSON, or the raw text when it is not JSON; nil for an
-- empty body) and the response headers (lower-case names).
-- HTTP error statuses are returned, not raised; a failed connection raises an
-- APIConnectionError. Header values (API keys) never appear in error messages.
local errors = require "airlock.errors"
local check = require "airlock.internal.check"
local exchange = require "airlock.internal.exchange"
local json = require "airlock.internal.json"
local request_mod = require "airlock.internal.request"
local retry = require "airlock.internal.retry"
local settings = require "airlock.internal.settings"
local version = require "airlock.internal.version"
local transports = require "airlock.transport"

local M = {}

M.null = json.null
M.DEFAULT_TIMEOUT = 120
M.DEFAULT_CONNECT_TIMEOUT = 10
M.USER_AGENT = version.USER_AGENT

local WHERE = "airlock.http.request"   -- names the function in its ValidationErrors

local OPTIONS = {
  method = true, url = true, headers = true, body = true, timeout = true,
  connect_timeout = true, max_retries = true, verify = true, transport = true,
}

-- Header values may be secrets: a bad one is named by its type only.
local function bad(what, expected, got)
  errors.raise("ValidationError", WHERE .. ": bad argument '" .. what .. "': expected "
    .. expected .. ", got " .. type(got))
end

-- Header lines from a map { Name = value } (sorted, so requests are reproducible) or a list
-- of "Name: value" lines. Secrets collects the values, to scrub them from messages.
local function header_lines(headers, secrets)
  local lines, seen = {}, {}
  if headers == nil then return lines, seen end
  if type(headers) ~= "table" then bad("headers", "a table", headers) end
  local items = {}
  for k, v in pairs(headers) do
    if type(k) == "number" then
      if type(v) ~= "string" then bad("headers[" .. k .. "]", "a \"Name: value\" string", v) end
      local name, value = v:match("^([^:]+):%s*(.*)$")
      if not name then
        errors.raise("ValidationError", "airlock.http.request: header " .. k .. " is not a \"Name: value\" line")
      end
      items[#items + 1] = { name, value }
    else
      if type(k) ~= "string" then bad("headers key", "a string", k) end
      if type(v) == "number" then v = tostring(v) end
      if type(v) ~= "string" then bad("headers." .. k, "a string", v) end
      items[#items + 1] = { k, v }
    end
  end
  table.sort(items, function(a, b) return a[1]:lower() < b[1]:lower() end)
  for _, kv in ipairs(items) do
    local name, value = kv[1], kv[2]
    if not name:match("^[!#$%%&'*+%-.^_`|~%w]+$") then
      errors.raise("ValidationError", "airlock.http.request: bad header name '" .. name .. "'")
    end
    if value:find("[\r\n%z]") then
      errors.raise("ValidationError", "airlock.http.request: the value of header '" .. name
        .. "' contains a line break or NUL")
    end
    lines[#lines + 1] = name .. ": " .. value
    seen[name:lower()] = true
    if #value >= 6 then
      secrets[#secrets + 1] = value
      local token = value:match("^%S+%s+(%S+)$") -- "Bearer <key>"
      if token and #token >= 6 then secrets[#secrets + 1] = token end
    end
  end
  return lines, seen
end

local function scrub(text, secrets)
  for _, s in ipairs(secrets) do text = errors.scrub(text, s) end
  return text
end

-- The URL without its query (which may carry a key) for messages.
local function shown_url(url)
  return (url:gsub("[?#].*$", ""))
end

-- The options, checked by the same rules as the SDK's own settings (check.lua), with this
-- function's defaults.
local function checked_options(opts)
  if type(opts) ~= "table" then bad("options", "a table", opts) end
  for k in pairs(opts) do
    if not OPTIONS[k] then errors.raise("ValidationError", WHERE .. ": unknown option '" .. tostring(k) .. "'") end
  end
  local method = opts.method or (opts.body ~= nil and "POST" or "GET")
  if type(method) ~= "string" or not method:match("^%u+$") or #method > 7 then
    bad("method", "an upper-case HTTP method such as \"POST\"", method)
  end
  local o = { method = method, url = opts.url, verify = true, timeout = M.DEFAULT_TIMEOUT,
    max_retries = retry.DEFAULT_MAX_RETRIES }
  -- the URL may carry a key in its query: never shown
  if not pcall(check.check_url, "url", o.url) then bad("url", "an http:// or https:// URL", o.url) end
  if opts.timeout ~= nil then o.timeout = check.check_seconds("timeout", opts.timeout, WHERE) end
  o.connect_timeout = math.min(M.DEFAULT_CONNECT_TIMEOUT, o.timeout)
  if opts.connect_timeout ~= nil then
    o.connect_timeout = check.check_seconds("connect_timeout", opts.connect_timeout, WHERE)
  end
  if opts.max_retries ~= nil then o.max_retries = check.check_max_retries(opts.max_retries, WHERE) end
  if opts.verify ~= nil then o.verify = check.check_verify(opts.verify, WHERE) end
  o.transport = check.check_transport(opts.transport, WHERE)
  return o
end

--- Sends one request and waits for the answer (retrying 429/503 per the SDK's policy).
function M.request(opts)
  local o = checked_options(opts)
  local url = o.url
  local secrets = {}
  local lines, seen = header_lines(opts.headers, secrets)
  local body = opts.body
  if type(body) == "table" then
    local text, why = json.encode(body)
    if not text then
      errors.raise("ValidationError", WHERE .. ": the body cannot be encoded as JSON: " .. scrub(why, secrets))
    end
    body = text
  elseif body ~= nil and type(body) ~= "string" then
    bad("body", "a table (sent as JSON) or a string", body)
  end
  if body ~= nil and not seen["content-type"] then lines[#lines + 1] = "Content-Type: application/json" end
  if not seen["accept"] then lines[#lines + 1] = "Accept: application/json" end
  if not seen["user-agent"] then lines[#lines + 1] = "User-Agent: " .. M.USER_AGENT end

  local timeout_ms, connect_timeout_ms = settings.timeouts_ms(o, o.timeout)
  local res, failure = exchange.perform(transports.resolve(o.transport), {
    method = o.method,
    url = url,
    headers = lines,
    body = body,
    timeout_ms = timeout_ms,
    connect_timeout_ms = connect_timeout_ms,
    max_retries = o.max_retries,
    verify = o.verify,
    max_response_bytes = request_mod.MAX_RESPONSE_BYTES,
  })
  if res == nil or res.status == nil then
    errors.raise("APIConnectionError", scrub("Could not reach " .. shown_url(url) .. ": "
      .. tostring(failure and failure.message or "no response"), secrets))
  end
  local headers = res.headers or {}
  local text = res.body
  if text == nil or text == "" then return res.status, nil, headers end
  local data = json.decode(text)
  if data == nil then data = text end
  return res.status, data, headers
end

--- The error message inside a provider's JSON error body ({"error": {"message": ...}} for
-- OpenAI and Anthropic), else a short form of the body.
function M.error_message(data)
  if type(data) == "table" then
    local e = data.error
    if type(e) == "table" and type(e.message) == "string" then return e.message end
    if type(e) == "string" then return e end
    if type(data.message) == "string" then return data.message end
    local text = json.encode(data)
    if text then return text:sub(1, 500) end
  end
  if type(data) == "string" then return data:sub(1, 500) end
  return "no details"
end

return M
