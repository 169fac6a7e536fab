-- airlock.snapshots: the tenant's snapshots of sessions' workspaces (docs/api.md "Snapshots";
-- airlockd only).
--
--   local airlock = require "airlock"
--   local id = sbx:snapshot{ name = "before-refactor" }   -- memory = true: its kernels' state too
--   local fork = airlock.sandbox{ from_snapshot = id }
--   for _, s in ipairs(airlock.snapshots.list()) do print(s.snapshot_id, s.name, s.bytes) end
--   airlock.snapshots.delete(id)
--
-- Every call takes the connection options of airlock.sandbox (api_key, base_url, verify,
-- timeout, max_retries, transport), and goes through the same engine, retry policy and
-- transports: blocking in a plain program, yielding inside airlock.spawn tasks, in OpenResty
-- and on libuv. Library code for Lua 5.1 through 5.4 and LuaJIT.
local engine = require "airlock.internal.engine"
local errors = require "airlock.errors"
local exchange = require "airlock.internal.exchange"

local M = {}

local CONNECTION = {
  api_key = true, base_url = true, verify = true, timeout = true, connect_timeout = true,
  max_retries = true, transport = true,
}

local function settings_of(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  for k in pairs(opts) do
    if not CONNECTION[k] then errors.raise("ValidationError", "unknown option '" .. tostring(k) .. "'") end
  end
  return engine.settings(opts)
end

local function call(settings, method, path)
  local ok, data = exchange.call(settings, method, path)
  if not ok then error(data, 0) end
  return data
end

local function path_of(id)
  return "/v1/snapshots/" .. engine.quote(engine.check_string("id", id, { non_empty = true, utf8 = true }))
end

-- snapshots.list([opts]) → the tenant's snapshots, newest first (records as sbx:snapshot gives).
function M.list(opts)
  local data = call(settings_of(opts), "GET", "/v1/snapshots")
  return type(data) == "table" and type(data.snapshots) == "table" and data.snapshots or {}
end

-- snapshots.get(id[, opts]) → its record (raises the server's 404 when the tenant has none).
function M.get(id, opts)
  local path = path_of(id)
  return call(settings_of(opts), "GET", path)
end

-- snapshots.delete(id[, opts]) → true; nothing of it is left on the server.
function M.delete(id, opts)
  local path = path_of(id)
  call(settings_of(opts), "DELETE", path)
  return true
end

return M
