-- Error objects of the airlock SDK: tables with a metatable (__tostring), one class per error
-- of the reference Python SDK. Fields: name, message, status, detail (+ retry_after, result,
-- path where they apply). errors.is(err, "SandboxError") knows the hierarchy.
local M = {}

-- class -> parent classes (FileNotFoundError stands alone, like Python's built-in one;
-- PermissionDeniedError is also a "PermissionError", as in Python)
local PARENTS = {
  SandboxError = {},
  APIConnectionError = { "SandboxError" },
  AuthenticationError = { "SandboxError" },
  PermissionDeniedError = { "SandboxError", "PermissionError" },
  NotFoundError = { "SandboxError" },
  QuotaExceededError = { "SandboxError" },
  ValidationError = { "SandboxError" },
  RateLimitError = { "SandboxError" },
  CapacityError = { "SandboxError" },
  CommandError = { "SandboxError" },
  FileNotFoundError = {},
  PermissionError = {},
}
M.CLASSES = PARENTS

-- contract 3.8: STATUS_ERRORS
M.STATUS_ERRORS = {
  [400] = "ValidationError",
  [401] = "AuthenticationError",
  [403] = "PermissionDeniedError",
  [404] = "NotFoundError",
  [413] = "QuotaExceededError",
  [422] = "ValidationError",
  [429] = "RateLimitError",
  [503] = "CapacityError",
}

local Error = {}
Error.__index = Error
Error.__name = "airlock.Error"

function Error.__tostring(e)
  return e.name .. ": " .. tostring(e.message)
end

function Error:is(name)
  return M.is(self, name)
end

local function inherits(class, name)
  if class == name then return true end
  local parents = PARENTS[class]
  if not parents then return false end
  for _, p in ipairs(parents) do
    if inherits(p, name) then return true end
  end
  return false
end

-- errors.is(err, "SandboxError"): err is an airlock error of that class or a subclass.
function M.is(err, name)
  if type(err) ~= "table" or getmetatable(err) ~= Error then return false end
  if name == nil then return true end
  return inherits(err.name, name)
end

-- Replace every occurrence of secret (the API key) in text.
function M.scrub(text, secret)
  text = tostring(text)
  if type(secret) ~= "string" or #secret < 4 then return text end
  local out, start = {}, 1
  while true do
    local i, j = text:find(secret, start, true)
    if not i then break end
    out[#out + 1] = text:sub(start, i - 1)
    out[#out + 1] = "***"
    start = j + 1
  end
  out[#out + 1] = text:sub(start)
  return table.concat(out)
end

-- errors.new(class, message [, fields]) → error object. fields: status, detail,
-- retry_after, result, path, secret (scrubbed from message and string detail, not stored).
function M.new(class, message, fields)
  assert(PARENTS[class], "unknown error class " .. tostring(class))
  fields = fields or {}
  local secret = fields.secret
  message = M.scrub(message, secret)
  local detail = fields.detail
  if detail == nil then detail = message
  elseif type(detail) == "string" then detail = M.scrub(detail, secret) end
  local e = setmetatable({
    name = class,
    message = message,
    status = fields.status,
    detail = detail,
  }, Error)
  for _, k in ipairs({ "retry_after", "result", "path" }) do
    if fields[k] ~= nil then e[k] = fields[k] end
  end
  return e
end

-- Raise an error object (a table: error levels add no position to tables).
function M.raise(class, message, fields)
  error(M.new(class, message, fields), 0)
end

-- A class-like constructor per name: errors.ValidationError("msg", {status = 422})
for class in pairs(PARENTS) do
  M[class] = function(message, fields) return M.new(class, message, fields) end
end

M.Error = Error
return M
