-- Response decoding and error mapping: what a transport's send gave (an answer, or a
-- failure) becomes the call's data or one of the SDK's error objects. Pure: no I/O.
local errors = require "airlock.errors"
local json = require "airlock.internal.json"
local retry = require "airlock.internal.retry"

local M = {}

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

local function is_object(t)
  if type(t) ~= "table" then return false end
  return next(t) == nil or t[1] == nil
end

-- The detail of an error body ({"detail": ...}), else the reason phrase.
local function error_detail(res, reason)
  local data = res.body and res.body ~= "" and json.decode(res.body)
  if is_object(data) and data.detail ~= nil and data.detail ~= json.null then return data.detail end
  return reason
end

-- The error for an HTTP error answer {status, body, reason, headers}.
function M.http_error(settings, res)
  local status = res.status
  local reason = res.reason
  if reason == nil or reason == "" then reason = M.REASONS[status] or ("HTTP " .. tostring(status)) end
  local detail = error_detail(res, reason)
  local message = detail
  if type(detail) ~= "string" then message = json.encode(detail) or tostring(detail) end
  local class = errors.STATUS_ERRORS[status] or "SandboxError"
  local fields = { status = status, detail = detail, secret = settings.api_key }
  if status == 429 then fields.retry_after = retry.parse_retry_after(res.headers and res.headers["retry-after"]) end
  return errors.new(class, message, fields)
end

function M.connection_error(settings, reason)
  return errors.new("APIConnectionError",
    "Could not reach " .. settings.base_url .. ": " .. tostring(reason),
    { secret = settings.api_key })
end

-- Decode what a transport's send gave: a response {status, reason, headers, body}, or nil
-- and a failure {message, sent, tls, too_large}. → true, data (nil for an empty body) |
-- false, error. raw: a 2xx body is the data as it came (a raw file read).
function M.decode(settings, res, failure, raw)
  if res == nil or res.status == nil then
    return false, M.connection_error(settings, failure and failure.message or "no response")
  end
  local status = res.status
  if status < 200 or status >= 300 then return false, M.http_error(settings, res) end
  if raw then return true, res.body or "" end   -- the exact bytes (raw is the request's opts.raw_response)
  if res.body == nil or res.body == "" then return true, nil end
  local ok, data = json.decode_answer(res.body)
  if not ok then
    return false, errors.new("SandboxError",
      "The server answered " .. status .. " with a body that is not JSON", { status = status })
  end
  return true, data
end

-- The missing-file answer of GET .../read (a 200, contract 1.6).
function M.missing_file_text(path)
  return "Error: File '" .. path .. "' does not exist."
end

-- The server's limit of commands at once when res is its "too many commands" answer (a 429
-- without Retry-After), else nil. The header X-Airlock-Exec-Limit says it; a server that
-- sends only the text (contract 2.2: "Too many commands running at once: <n> allowed.") is
-- read from its detail.
function M.concurrency_limit(res)
  local headers = res.headers
  if res.status ~= 429 or (headers and headers["retry-after"]) then return nil end
  local said = headers and headers["x-airlock-exec-limit"]
  if said then
    local n = said:match("^%s*(%d+)%s*$")
    return n and tonumber(n) or nil
  end
  local ok, data = json.decode_answer(res.body)
  if not ok or type(data) ~= "table" or type(data.detail) ~= "string" then return nil end
  local n = data.detail:match("^Too many commands running at once: (%d+) allowed")
  return n and tonumber(n) or nil
end

return M
