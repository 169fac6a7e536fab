-- THE retry policy of the SDK (contract 3.7), for every transport and every call: whether and
-- how long to wait before sending a request again. Pure; exchange.lua applies it.
local M = {}

M.DEFAULT_MAX_RETRIES = 3
M.MAX_RETRY_WAIT = 30

local floor = math.floor

-- Retry-After as Python reads it: an integer only if all digits.
function M.parse_retry_after(value)
  if type(value) == "string" and value:match("^%d+$") then return tonumber(value) end
  return nil
end

-- Whether the policy may ever retry after this outcome of a try (res: the response, nil
-- after a connection failure): only connection failures and 429/503 answers are retried.
-- A quick test, so that retry_wait is asked only when its answer can be a wait.
function M.may_retry(res)
  if res == nil then return true end
  local status = res.status
  return status == nil or status == 0 or status == 429 or status == 503
end

-- Seconds to wait before the next try, or nil to give up. t: attempt (0 for the first
-- failure), max_retries, method, status (nil = connection failure), retry_after (the raw
-- header).
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

return M
