-- Request building: the transport-neutral description of one API call (URL, headers, JSON
-- or raw body, timeouts, retries, TLS, the response bound) from the client's settings. Pure:
-- no I/O; every transport sends what this builds.
local json = require "airlock.internal.json"
local settings_mod = require "airlock.internal.settings"
local version = require "airlock.internal.version"

local M = {}

-- The largest answer the SDK keeps whole, on every transport (curl, uv, ngx): a larger one
-- fails the call ("the response body is larger than N bytes") instead of filling memory.
M.MAX_RESPONSE_BYTES = 64 * 1024 * 1024
M.MAX_RAW_READ = 2 ^ 40        -- raw file reads: the server's quota bounds them, not the SDK
-- An exec answer carries stdout and stderr twice (the fields and `output`), each byte up to
-- six characters of JSON (\u00XX): the bound grows with the command's output_limit_bytes.
M.EXEC_OUTPUT_COPIES = 4 * 6

local CONTENT_TYPE_HEADER = "Content-Type: application/json"
local ACCEPT_HEADER = "Accept: application/json"
local USER_AGENT_HEADER = "User-Agent: " .. version.USER_AGENT

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

function M.session_path(session_id, suffix)
  return "/v1/sessions/" .. M.quote(session_id) .. (suffix or "")
end

-- The request headers, a new list each time (a transport may keep or change its request).
function M.headers(settings)
  return { settings.key_header or "X-API-Key: " .. settings.api_key, CONTENT_TYPE_HEADER, ACCEPT_HEADER,
    USER_AGENT_HEADER }
end

local function url_with_query(settings, path, query)
  local url = settings.base_url .. path
  if not query or #query == 0 then return url end
  local q = {}
  for i, kv in ipairs(query) do q[i] = M.form_encode(kv[1]) .. "=" .. M.form_encode(kv[2]) end
  return url .. "?" .. table.concat(q, "&")
end

-- The bound of a call's answer: raw reads are bounded by the server's quota, an exec's by
-- its output limit, everything else by MAX_RESPONSE_BYTES.
local function response_bound(opts)
  if opts.raw_response then return M.MAX_RAW_READ end
  if opts.output_limit_bytes then
    return M.MAX_RESPONSE_BYTES + M.EXEC_OUTPUT_COPIES * opts.output_limit_bytes
  end
  return M.MAX_RESPONSE_BYTES
end

local NO_OPTIONS = {}

-- A transport-neutral request description. opts: timeout (seconds), max_retries, query
-- (list of {name, value}, form-encoded), raw_body (a string sent as application/octet-stream
-- instead of body), raw_body_file (the same, read from that local file as it is sent),
-- raw_response (ask for application/octet-stream; decode keeps the bytes), output_limit_bytes
-- (an exec's: its answer may be that much larger).
function M.build(settings, method, path, body, opts)
  opts = opts or NO_OPTIONS
  local timeout_ms, connect_timeout_ms = settings.timeout_ms, settings.connect_timeout_ms
  if opts.timeout or not timeout_ms then
    timeout_ms, connect_timeout_ms = settings_mod.timeouts_ms(settings, opts.timeout or settings.timeout)
  end
  local max_retries = opts.max_retries
  if max_retries == nil then max_retries = settings.max_retries end
  local headers = M.headers(settings)
  local encoded = body ~= nil and json.encode_pairs(body) or nil
  if opts.raw_body or opts.raw_body_file then   -- the airlock extension: a file's exact bytes
    headers[2] = "Content-Type: application/octet-stream"
    encoded = opts.raw_body
  end
  if opts.raw_response then headers[3] = "Accept: application/octet-stream" end
  return {
    method = method,
    url = url_with_query(settings, path, opts.query),
    headers = headers,
    body = encoded,
    body_file = opts.raw_body_file,
    max_response_bytes = response_bound(opts),
    timeout_ms = timeout_ms,
    connect_timeout_ms = connect_timeout_ms,
    max_retries = max_retries,
    verify = settings.verify,
  }
end

return M
