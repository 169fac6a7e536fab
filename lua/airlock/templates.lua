-- airlock.templates: read-only roots built from Debian packages, which sessions run on
-- (docs/api.md "Templates"; airlockd only).
--
--   local airlock = require "airlock"
--   local t = airlock.templates.build{ name = "data", packages = { "python3-numpy" } }
--   t:wait{ on_progress = function(p) print(p.phase, p.percent) end }   -- t.status: "ready"
--   local sbx = airlock.sandbox{ template = "data" }
--   for _, x in ipairs(airlock.templates.list()) do print(x.name, x.status) end
--   airlock.templates.delete("data")
--
-- Every call takes the connection options of airlock.sandbox (api_key, base_url, verify,
-- timeout, max_retries, transport) beside its own, and goes through the same engine, retry
-- policy and transports: blocking in a plain program, yielding inside airlock.spawn tasks, in
-- OpenResty and on libuv. Library code for Lua 5.1 through 5.4 and LuaJIT.
local engine = require "airlock.internal.engine"
local errors = require "airlock.errors"
local exchange = require "airlock.internal.exchange"
local transports = require "airlock.transport"

local M = {}

-- How often t:wait asks for the progress (seconds), and how long it waits by default.
M.POLL_SECONDS = 1
M.DEFAULT_WAIT = 1800

local CONNECTION = {
  api_key = true, base_url = true, verify = true, timeout = true, connect_timeout = true,
  max_retries = true, transport = true,
}

local Template = {}
Template.__index = Template
Template.__name = "airlock.Template"
M.Template = Template

function Template.__tostring(self)
  return string.format("<Template %s %s %s>", tostring(self.name), tostring(self.id), tostring(self.status))
end

-- opts split into connection settings and the call's own fields (each known).
local function split(opts, own, what)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then engine.bad_argument(what, "a table", opts) end
  local conn, fields = {}, {}
  for k, v in pairs(opts) do
    if CONNECTION[k] then
      conn[k] = v
    elseif own[k] then
      fields[k] = v
    else
      errors.raise("ValidationError", "unknown option '" .. tostring(k) .. "'")
    end
  end
  return engine.settings(conn), fields
end

local function call(settings, method, path, body)
  local ok, data = exchange.call(settings, method, path, body)
  if not ok then error(data, 0) end
  return data
end

local function adopt(self, record)
  if type(record) ~= "table" then return self end
  for k, v in pairs(record) do
    if k ~= "_settings" then self[k] = v end
  end
  return self
end

local function new_template(settings, record)
  return adopt(setmetatable({ _settings = settings }, Template), record)
end

local function strings(what, list, allow_nil)
  if list == nil and allow_nil then return nil end
  if type(list) ~= "table" then engine.bad_argument(what, "a list of strings", list) end
  local out = {}
  for i, v in ipairs(list) do out[i] = engine.check_string(what .. "[" .. i .. "]", v, { utf8 = true }) end
  return engine.array(out)
end

-- templates.build{ name=, packages={...}, setup={...}, recommends=true, <connection options> }
-- → Template. Starts the build (or finds the same one: the same name and recipe answer at once
-- with the same id); t.status is "building", "ready" or "failed". recommends=true: apt also
-- installs what the packages recommend (as apt-get does; by default only their dependencies).
function M.build(opts)
  local settings, f = split(opts, { name = true, packages = true, setup = true, recommends = true }, "options")
  engine.check_string("name", f.name, { non_empty = true, utf8 = true })
  local body = { { "name", f.name }, { "packages", strings("packages", f.packages) } }
  local setup = strings("setup", f.setup, true)
  if setup then body[#body + 1] = { "setup", setup } end
  if f.recommends ~= nil then
    if type(f.recommends) ~= "boolean" then engine.bad_argument("recommends", "a boolean", f.recommends) end
    body[#body + 1] = { "recommends", f.recommends }
  end
  return new_template(settings, call(settings, "POST", "/v1/templates", body))
end

-- templates.get(name[, opts]) → Template (raises the server's 404 when there is none).
function M.get(name, opts)
  engine.check_string("name", name, { non_empty = true, utf8 = true })
  local settings = split(opts, {}, "options")
  return new_template(settings, call(settings, "GET", "/v1/templates/" .. engine.quote(name)))
end

-- templates.list([opts]) → the templates this tenant may use (its own, then the admin's).
function M.list(opts)
  local settings = split(opts, {}, "options")
  local data = call(settings, "GET", "/v1/templates")
  local out = {}
  for i, rec in ipairs(type(data) == "table" and data.templates or {}) do out[i] = new_template(settings, rec) end
  return out
end

-- templates.delete(name[, opts]) → true. Refused (409) while a session runs on it.
function M.delete(name, opts)
  engine.check_string("name", name, { non_empty = true, utf8 = true })
  local settings = split(opts, {}, "options")
  call(settings, "DELETE", "/v1/templates/" .. engine.quote(name))
  return true
end

-- t:refresh() → t, its record asked for again.
function Template:refresh()
  if getmetatable(self) ~= Template then engine.bad_argument("self", "a Template (use t:refresh())", self) end
  return adopt(self, call(self._settings, "GET", "/v1/templates/" .. engine.quote(self.name)))
end

-- t:wait{ on_progress = function(p) end, timeout = 1800 } → t once its build has ended (t.status
-- "ready" or "failed"; a failed build raises SandboxError with the log's tail unless
-- raise = false). on_progress gets each new progress: p.phase, p.percent, p.packages_total,
-- p.packages_installed, p.packages_fetched, p.bytes_fetched.
function Template:wait(opts)
  if getmetatable(self) ~= Template then engine.bad_argument("self", "a Template (use t:wait())", self) end
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  local on_progress, timeout = opts.on_progress, opts.timeout or M.DEFAULT_WAIT
  if on_progress ~= nil and type(on_progress) ~= "function" then
    engine.bad_argument("on_progress", "a function", on_progress)
  end
  if type(timeout) ~= "number" or timeout <= 0 then engine.bad_argument("timeout", "a positive number", timeout) end
  local transport = transports.resolve(self._settings.transport)
  local seen, waited = -1, 0
  while true do
    local p = self.progress
    if on_progress and type(p) == "table" and (p.seq or 0) > seen then
      seen = p.seq or 0
      on_progress(p)
    end
    if self.status ~= "building" then break end
    if waited >= timeout then
      errors.raise("SandboxError", string.format("Template '%s' is still building after %d s.", self.name, timeout))
    end
    transport:sleep(M.POLL_SECONDS)
    waited = waited + M.POLL_SECONDS
    self:refresh()
  end
  if self.status == "failed" and opts.raise ~= false then
    errors.raise("SandboxError", string.format("Template '%s' failed to build:\n%s", self.name,
      tostring(self.log_tail or "")))
  end
  return self
end

return M
