-- Client settings: the options of airlock.sandbox{...} (and attach, list_sessions, keys)
-- resolved against the environment, one small check per option, before any request. The
-- result is a plain table (no references to the caller's objects).
local errors = require "airlock.errors"
local check = require "airlock.internal.check"

local M = {}

M.DEFAULT_TEMPLATE = "sandbox-base:latest"
M.DEFAULT_TIMEOUT = 90          -- seconds per HTTP request
M.DEFAULT_CONNECT_TIMEOUT = 10  -- seconds to establish a connection
M.DEFAULT_MAX_RETRIES = 3
M.MISSING_SETTINGS =
  "Set base_url and api_key, or the SANDBOX_API_URL and SANDBOX_API_KEY environment variables."

local floor = math.floor

-- An environment flag: "1", "true" or "yes" (any case, spaces around ignored).
function M.env_flag(value)
  if type(value) ~= "string" then return false end
  value = value:gsub("^%s+", ""):gsub("%s+$", ""):lower()
  return value == "1" or value == "true" or value == "yes"
end

-- The option when given (a string), else the environment variable.
local function string_or_env(name, value, getenv, var)
  if value ~= nil and type(value) ~= "string" then check.bad_argument(name, "a string", value) end
  if value == nil or value == "" then value = getenv(var) end
  return value
end

-- base_url and api_key: both needed (the reference client's message when one is missing).
local function endpoint(opts, getenv)
  local base_url = string_or_env("base_url", opts.base_url, getenv, "SANDBOX_API_URL")
  local api_key = string_or_env("api_key", opts.api_key, getenv, "SANDBOX_API_KEY")
  if base_url == nil or base_url == "" or api_key == nil or api_key == "" then
    errors.raise("SandboxError", M.MISSING_SETTINGS)
  end
  if api_key:find("[%c]") then
    errors.raise("ValidationError", "bad argument 'api_key': control characters are not allowed")
  end
  base_url = base_url:gsub("/+$", "")
  -- the SDK adds /v1/... itself: a base URL copied with its /v1 would answer every call 404
  base_url = base_url:match("^([hH][tT][tT][pP][sS]?://[^/]+.-)/+v1$") or base_url
  return check.check_url("base_url", base_url), api_key
end

local function verify(v, getenv)
  if v == nil then return not M.env_flag(getenv("SANDBOX_API_INSECURE")) end
  return check.check_verify(v)
end

local function timeouts(opts)
  local timeout = opts.timeout
  if timeout == nil then timeout = M.DEFAULT_TIMEOUT end
  check.check_seconds("timeout", timeout)
  local connect_timeout = opts.connect_timeout
  if connect_timeout == nil then connect_timeout = math.min(M.DEFAULT_CONNECT_TIMEOUT, timeout) end
  return timeout, check.check_seconds("connect_timeout", connect_timeout)
end

local function max_retries(v)
  if v == nil then return M.DEFAULT_MAX_RETRIES end
  check.check_max_retries(v)
  return v
end

local function template(v)
  if v == nil then return M.DEFAULT_TEMPLATE end
  return check.check_string("template", v, { non_empty = true, utf8 = true })
end

local function max_concurrent_exec(v)
  if v ~= nil then check.check_integer("max_concurrent_exec", v, 1, 1000) end
  return v
end

local function egress(v)
  local rules = {}
  if v == nil then return rules end
  if type(v) ~= "table" then check.bad_argument("egress", "a list of strings", v) end
  for i, rule in ipairs(v) do rules[i] = check.check_string("egress[" .. i .. "]", rule, { utf8 = true }) end
  return rules
end

-- The size a create asks for (airlockd; the server checks each against the tenant's maxima:
-- here only that it is a number, so that a mistake fails before any request).
M.SIZES = { "memory_mb", "cpus", "disk_mb", "max_processes" }

local function sizes(opts)
  local out = {}
  for _, name in ipairs(M.SIZES) do
    local v = opts[name]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge) then
      check.bad_argument(name, "a number", v)
    end
    out[name] = v
  end
  return out
end

-- The snapshot a new session starts from (airlockd: POST /v1/sessions {"from_snapshot"}).
local function from_snapshot(v)
  if v == nil then return nil end
  return check.check_string("from_snapshot", v, { non_empty = true, utf8 = true })
end

local OPTIONS = {
  api_key = true, base_url = true, egress = true, template = true, verify = true, from_snapshot = true,
  timeout = true, connect_timeout = true, max_retries = true, start = true,
  transport = true, max_concurrent_exec = true,
  memory_mb = true, cpus = true, disk_mb = true, max_processes = true, on_idle = true,
}

-- What the session's idle TTL does to it (airlockd): "delete" (the server's default) or "pause".
local function on_idle(v)
  if v ~= nil and v ~= "delete" and v ~= "pause" then check.bad_argument("on_idle", "\"delete\" or \"pause\"", v) end
  return v
end

local function known_options(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then check.bad_argument("options", "a table", opts) end
  for k in pairs(opts) do
    if not OPTIONS[k] then errors.raise("ValidationError", "unknown option '" .. tostring(k) .. "'") end
  end
  return opts
end

-- The request and connect timeouts in milliseconds for a request timeout in seconds.
function M.timeouts_ms(settings, timeout)
  local connect = settings.connect_timeout
  if timeout < connect then connect = timeout end
  return floor(timeout * 1000 + 0.5), floor(connect * 1000 + 0.5)
end

-- settings.resolve(opts, getenv) → settings. getenv: a function like os.getenv (the default).
function M.resolve(opts, getenv)
  getenv = getenv or os.getenv
  opts = known_options(opts)
  local s = {}
  -- checked in this order: the first bad option is the one reported
  s.base_url, s.api_key = endpoint(opts, getenv)
  s.verify = verify(opts.verify, getenv)
  s.timeout, s.connect_timeout = timeouts(opts)
  s.max_retries = max_retries(opts.max_retries)
  s.template = template(opts.template)
  s.template_given = opts.template ~= nil
  s.from_snapshot = from_snapshot(opts.from_snapshot)
  s.max_concurrent_exec = max_concurrent_exec(opts.max_concurrent_exec)
  s.egress = egress(opts.egress)
  s.sizes = sizes(opts)
  s.on_idle = on_idle(opts.on_idle)
  s.transport = check.check_transport(opts.transport)
  -- worked out once here, not at every request
  s.key_header = "X-API-Key: " .. s.api_key
  s.timeout_ms, s.connect_timeout_ms = M.timeouts_ms(s, s.timeout)
  return s
end

return M
