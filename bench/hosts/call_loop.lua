-- The client side of bench/call_instructions.lua: N small calls (sbx:usage(), GET /v1/usage)
-- through one transport, and nothing else, so that a run's instruction count minus a shorter
-- run's is the cost of the calls alone.
--
--   call_loop.lua BASE_URL API_KEY N curl|uv
local base_url, api_key, n, kind = arg[1], arg[2], tonumber(arg[3]), arg[4]
assert(base_url and api_key and n and (kind == "curl" or kind == "uv"),
  "usage: call_loop.lua BASE_URL API_KEY N curl|uv")
local airlock = require "airlock"

local sbx = airlock.attach("sbx_000000000000", { base_url = base_url, api_key = api_key, transport = kind })
if kind == "uv" then
  local luv = require "luv"
  require("airlock.transport.uv").install(luv)
  local task = airlock.spawn(function()
    for _ = 1, n do sbx:usage() end
  end)
  luv.run()
  assert(task.status == "done", tostring(task.error))
else
  for _ = 1, n do sbx:usage() end
end
