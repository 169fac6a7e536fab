-- airlock.keys: API key management (parity with the Python SDK's `Keys`, contract 3.11).
--
--   local keys = require "airlock.keys"
--   local admin = keys.client{ admin = true }                 -- SANDBOX_ADMIN_KEY
--   local rec = admin:create{ tenant = "acme", name = "ci" }   -- rec.api_key: shown once
--   local mine = keys.client{ api_key = rec.api_key }          -- a tenant's own keys
--   for _, k in ipairs(mine:list()) do print(k.key_id, k.active) end
--   mine:revoke(old_key_id)
--
-- Requests go through the same engine, retry policy and transports as airlock.sandbox (same
-- TLS options, error classes; usable inside airlock.spawn tasks and in OpenResty).
local engine = require "airlock.internal.engine"
local errors = require "airlock.errors"
local exchange = require "airlock.internal.exchange"

local M = {}

M.DEFAULT_TIMEOUT = 30
M.NEED_TENANT = "Admins must say which tenant the key is for (tenant=...)."

local OPTIONS = {
  api_key = true, base_url = true, admin = true, verify = true, timeout = true,
  connect_timeout = true, max_retries = true, transport = true,
}

local Client = {}
Client.__index = Client
Client.__name = "airlock.keys.Client"
M.Client = Client

function Client.__tostring(self)
  return string.format("<airlock.keys.Client %s%s>", self.base_url, self.admin and " admin" or "")
end

local function missing_settings(var)
  return "Set base_url and api_key, or the SANDBOX_API_URL and " .. var .. " environment variables."
end

-- keys.client{api_key=, base_url=, admin=false, verify=, timeout=30, max_retries=3, transport=}
-- → Client. The key defaults to $SANDBOX_ADMIN_KEY (admin) or $SANDBOX_API_KEY, the URL to
-- $SANDBOX_API_URL. Raises SandboxError before any request when either is missing.
function M.client(opts, getenv)
  getenv = getenv or os.getenv
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  for k in pairs(opts) do
    if not OPTIONS[k] then errors.raise("ValidationError", "unknown option '" .. tostring(k) .. "'") end
  end
  local admin = opts.admin
  if admin == nil then admin = false end
  if type(admin) ~= "boolean" then engine.bad_argument("admin", "a boolean", admin) end
  local var = admin and "SANDBOX_ADMIN_KEY" or "SANDBOX_API_KEY"
  local api_key, base_url = opts.api_key, opts.base_url
  if api_key ~= nil and type(api_key) ~= "string" then engine.bad_argument("api_key", "a string", api_key) end
  if base_url ~= nil and type(base_url) ~= "string" then engine.bad_argument("base_url", "a string", base_url) end
  if api_key == nil or api_key == "" then api_key = getenv(var) end
  if base_url == nil or base_url == "" then base_url = getenv("SANDBOX_API_URL") end
  if api_key == nil or api_key == "" or base_url == nil or base_url == "" then
    errors.raise("SandboxError", missing_settings(var))
  end
  local settings = engine.settings({
    api_key = api_key, base_url = base_url, verify = opts.verify,
    timeout = opts.timeout == nil and M.DEFAULT_TIMEOUT or opts.timeout,
    connect_timeout = opts.connect_timeout, max_retries = opts.max_retries,
    transport = opts.transport,
  }, getenv)
  return setmetatable({
    admin = admin,
    base_url = settings.base_url,
    prefix = admin and "/v1/admin/keys" or "/v1/keys",
    _settings = settings,
  }, Client)
end

local function check_self(self, what)
  if getmetatable(self) ~= Client then
    engine.bad_argument("self", "a keys client (use client:" .. what .. "(...))", self)
  end
end

local function call(self, method, path, body, query)
  local ok, data = exchange.call(self._settings, method, path, body, query and { query = query } or nil)
  if not ok then error(data, 0) end
  return data
end

local function options(opts, what)
  if opts == nil then return {} end
  if type(opts) ~= "table" then engine.bad_argument(what, "a table", opts) end
  return opts
end

-- client:list([{tenant = t}]) → list of key records (oldest first). The tenant filter
-- applies to the admin API only.
function Client:list(opts)
  check_self(self, "list")
  opts = options(opts, "options")
  local query
  if opts.tenant ~= nil then
    engine.check_string("tenant", opts.tenant, { no_nul = true, utf8 = true })
    if self.admin then query = { { "tenant", opts.tenant } } end
  end
  local data = call(self, "GET", self.prefix, nil, query)
  return type(data) == "table" and data.keys or {}
end

-- client:create([{name = "", tenant = t}]) → the new key record, with `api_key` (the secret,
-- shown only this once) and `note`. Admins must name the tenant.
function Client:create(opts)
  check_self(self, "create")
  opts = options(opts, "options")
  local name = opts.name
  if name == nil then name = "" end
  engine.check_string("name", name, { no_nul = true, utf8 = true })
  local body = { { "name", name } }
  if self.admin then
    if opts.tenant == nil or opts.tenant == "" then errors.raise("SandboxError", M.NEED_TENANT) end
    engine.check_string("tenant", opts.tenant, { no_nul = true, utf8 = true })
    body[2] = { "tenant", opts.tenant }
  elseif opts.tenant ~= nil then
    engine.check_string("tenant", opts.tenant, { no_nul = true, utf8 = true })
  end
  return call(self, "POST", self.prefix, body)
end

-- client:revoke(key_id) → the key record (active = false). Revoking a revoked key returns it.
function Client:revoke(key_id)
  check_self(self, "revoke")
  engine.check_string("key_id", key_id, { non_empty = true, no_nul = true, utf8 = true })
  return call(self, "DELETE", self.prefix .. "/" .. engine.quote(key_id))
end

return M
