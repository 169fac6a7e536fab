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
local cjson = require "cjson"
local cjson_safe = require "cjson.safe"
local errors = require "airlock.errors"
local engine = require "airlock.internal.engine"
local exchange = require "airlock.internal.exchange"
local transports = require "airlock.transport"

local M = {}

M.null = cjson.null
M.DEFAULT_TIMEOUT = 120
M.DEFAULT_CONNECT_TIMEOUT = 10
M.USER_AGENT = engine.USER_AGENT

local OPTIONS = {
  method = true, url = true, headers = true, body = true, timeout = true,
  connect_timeout = true, max_retries = true, verify = true, transport = true,
}

local function bad(what, expected, got)
  errors.raise("ValidationError", "airlock.http.request: bad argument '" .. what .. "': expected "
    .. expected .. ", got " .. type(got))
end

local function positive_seconds(what, v, default)
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v <= 0 or v > 86400 then bad(what, "a number of seconds > 0", v) end
  return v
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

--- Sends one request and waits for the answer (retrying 429/503 per the SDK's policy).
function M.request(opts)
  if type(opts) ~= "table" then bad("options", "a table", opts) end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      errors.raise("ValidationError", "airlock.http.request: unknown option '" .. tostring(k) .. "'")
    end
  end
  local method = opts.method or (opts.body ~= nil and "POST" or "GET")
  if type(method) ~= "string" or not method:match("^%u+$") or #method > 7 then
    bad("method", "an upper-case HTTP method such as \"POST\"", method)
  end
  local url = opts.url
  if type(url) ~= "string" or not url:match("^[hH][tT][tT][pP][sS]?://[^%s]+$") then
    errors.raise("ValidationError", "airlock.http.request: bad argument 'url': expected an http:// or https:// URL")
  end
  local timeout = positive_seconds("timeout", opts.timeout, M.DEFAULT_TIMEOUT)
  local connect_timeout = positive_seconds("connect_timeout", opts.connect_timeout,
    math.min(M.DEFAULT_CONNECT_TIMEOUT, timeout))
  local max_retries = opts.max_retries
  if max_retries == nil then max_retries = engine.DEFAULT_MAX_RETRIES end
  if not engine.is_integer(max_retries) or max_retries < 0 or max_retries > 100 then
    bad("max_retries", "an integer from 0 to 100", max_retries)
  end
  local verify = opts.verify
  if verify == nil then verify = true end
  if type(verify) ~= "boolean" and (type(verify) ~= "string" or verify == "") then
    bad("verify", "true, false or a CA file path", verify)
  end

  local secrets = {}
  local lines, seen = header_lines(opts.headers, secrets)
  local body = opts.body
  if type(body) == "table" then
    local ok, text = pcall(cjson.encode, body)
    if not ok then
      errors.raise("ValidationError", "airlock.http.request: the body cannot be encoded as JSON: "
        .. scrub(tostring(text), secrets))
    end
    body = text
  elseif body ~= nil and type(body) ~= "string" then
    bad("body", "a table (sent as JSON) or a string", body)
  end
  if body ~= nil and not seen["content-type"] then lines[#lines + 1] = "Content-Type: application/json" end
  if not seen["accept"] then lines[#lines + 1] = "Accept: application/json" end
  if not seen["user-agent"] then lines[#lines + 1] = "User-Agent: " .. M.USER_AGENT end

  local transport = transports.resolve(engine.check_transport(opts.transport))

  local res, failure = exchange.perform(transport, {
    method = method,
    url = url,
    headers = lines,
    body = body,
    timeout_ms = math.floor(timeout * 1000 + 0.5),
    connect_timeout_ms = math.floor(connect_timeout * 1000 + 0.5),
    max_retries = max_retries,
    verify = verify,
  })
  if res == nil or res.status == nil then
    errors.raise("APIConnectionError", scrub("Could not reach " .. shown_url(url) .. ": "
      .. tostring(failure and failure.message or "no response"), secrets))
  end
  local headers = res.headers or {}
  local text = res.body
  if text == nil or text == "" then return res.status, nil, headers end
  local data = cjson_safe.decode(text)
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
    local ok, text = pcall(cjson.encode, data)
    if ok then return text:sub(1, 500) end
  end
  if type(data) == "string" then return data:sub(1, 500) end
  return "no details"
end

return M
