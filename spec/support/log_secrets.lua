-- The secrets an airlockd (or a fleet node) was started with, and a check that none of them is in
-- its log: API keys, the admin key, the database password and the fleet secret never appear in
-- a log line (docs/server.md, "The log"). support.airlockd and support.fleet run the check on
-- every log they keep when they stop the server, so every spec that starts one checks it.
local proc = require "support.proc"

local M = {}

-- Secrets shorter than this could appear in a log by chance (a spec's key "k1"): not checked.
local MIN_LEN = 8

local function first_line(path)
  local text = path and proc.read_file(path)
  return text and text:match("^%s*([^\r\n]*)")
end

-- The password of a postgresql:// URL, or nil.
local function url_password(url)
  return url and url:match("^postgres[%w]*://[^:/@]*:([^@]+)@")
end

-- { name = what it is, value = the secret } for each secret in env (NAME = value) and
-- tenants ({ tenant = key }).
function M.from_env(env, tenants)
  local found = {}
  local function add(name, value)
    if value and #value >= MIN_LEN then found[#found + 1] = { name = name, value = value } end
  end
  for tenant, key in pairs(tenants or {}) do add("the API key of tenant " .. tenant, key) end
  env = env or {}
  for entry in (env.SANDBOX_API_KEYS or ""):gmatch("[^,]+") do
    add("a key of SANDBOX_API_KEYS", entry:match("^%s*[^:]*:(.-)%s*$"))
  end
  add("SANDBOX_API_KEY", env.SANDBOX_API_KEY)
  add("SANDBOX_ADMIN_KEY", env.SANDBOX_ADMIN_KEY)
  add("the password of SANDBOX_DATABASE_URL", url_password(env.SANDBOX_DATABASE_URL))
  add("the password of SANDBOX_DATABASE_URL_FILE", url_password(first_line(env.SANDBOX_DATABASE_URL_FILE)))
  add("the fleet secret (SANDBOX_FLEET_SECRET_FILE)", first_line(env.SANDBOX_FLEET_SECRET_FILE))
  return found
end

-- nil when log holds none of secrets, else a message naming (never quoting) the ones it holds.
function M.leaks(log, secrets, where)
  local named = {}
  for _, s in ipairs(secrets) do
    if log:find(s.value, 1, true) then named[#named + 1] = s.name end
  end
  if #named == 0 then return nil end
  return string.format("%s holds %s", where, table.concat(named, ", "))
end

return M
