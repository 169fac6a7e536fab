-- One airlockd for an SDK spec, with the SDK options for tenant acme on it:
--   local sdk = sdk_server.new({ env = { ... } })   -- airlockd.start's options
--   setup(sdk.start); teardown(sdk.stop)
-- then sdk.opts, and sdk.with(extra): a copy of opts with extra's fields on top.
local airlockd = require "support.airlockd"

local M = {}

function M.new(start_opts)
  local sdk = {}
  function sdk.start()
    sdk.server = airlockd.start(start_opts)
    sdk.opts = { api_key = sdk.server.tenants.acme, base_url = sdk.server.url }
  end
  function sdk.stop()
    if sdk.server then airlockd.stop(sdk.server) end
  end
  function sdk.with(extra)
    local o = {}
    for k, v in pairs(sdk.opts) do o[k] = v end
    for k, v in pairs(extra) do o[k] = v end
    return o
  end
  return sdk
end

return M
