-- A busted helper that runs an integration spec written for one airlockd (support.airlockd)
-- against a 3-node fleet's router instead (docs/fleet.md): start brings up a fleet with the
-- spec's tenants and returns the router as the server; stop takes the fleet down.
-- scripts/test.sh runs the SDK's suite so:
--   busted --helper=spec/support/fleet_as_airlockd.lua spec/integration/sdk_spec.lua
local fleet = require "support.fleet"
local airlockd = require "support.airlockd"

local start_one, stop_one = airlockd.start, airlockd.stop

function airlockd.start(opts)
  opts = opts or {}
  -- a spec that restarts a server on its directory, or wraps it in a launcher, needs the real one
  if opts.dir or opts.launcher then return start_one(opts) end
  local tenants = opts.tenants or { acme = "ak_" .. airlockd.random_hex(16), other = "ok_" .. airlockd.random_hex(16) }
  local list = {}
  for tenant, key in pairs(tenants) do list[#list + 1] = tenant .. ":" .. key end
  table.sort(list)
  local env = { SANDBOX_API_KEYS = table.concat(list, ","), SANDBOX_DISK_TOTAL_MB = "8192",
                SANDBOX_WORKSPACE_QUOTA_MB = "512" }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local f = fleet.up{ nodes = 3, env = env }
  return { url = f.info.router, tenants = tenants, fleet = f, pid = f.info.haproxy.pid,
           log_path = f.dir .. "/nodes/node1/log" }
end

function airlockd.stop(server)
  if server and server.fleet then return fleet.down(server.fleet) end
  return stop_one(server)
end
