-- Runs Lua in a real nginx request for the OpenResty specs: LOCATION (put it in the harness's
-- `server` option) answers POST /eval by running the posted code in content_by_lua (so in a
-- request, with cosockets) and returning {ok, value | error} as JSON; eval/try post the code.
-- Values must be JSON-encodable; errors come back as tostring(err).
local cjson = require "cjson"
local http_client = require "support.http_client"

local M = {}

M.LOCATION = [[
  location = /eval {
    client_max_body_size 1m;
    client_body_buffer_size 1m;
    content_by_lua_block {
      local cjson = require "cjson"
      ngx.req.read_body()
      local fn, err = loadstring(ngx.req.get_body_data() or "", "=eval")
      local ok, res
      if fn then ok, res = pcall(fn) else ok, res = false, err end
      ngx.header["Content-Type"] = "application/json"
      ngx.say(cjson.encode({ ok = ok, value = ok and res or nil, error = (not ok) and tostring(res) or nil }))
    }
  }
]]

-- try(srv, code [, max_time]) → ok, value | error text
function M.try(srv, code, max_time)
  local res = http_client.request(srv, "POST", "/eval",
    { body = code, content_type = "text/plain", max_time = max_time or 120 })
  assert(res.status == 200, "POST /eval answered " .. tostring(res.status) .. ": " .. tostring(res.body))
  local out = cjson.decode(res.body)
  if out.ok then return true, out.value end
  return false, out.error
end

-- eval(srv, code [, max_time]) → value; raises with the error raised in nginx.
function M.eval(srv, code, max_time)
  local ok, value = M.try(srv, code, max_time)
  if not ok then error("in nginx: " .. tostring(value), 2) end
  return value
end

-- sdk_eval(server, code [, max_time]) → value: code run in a fresh nginx whose SDK talks to
-- airlockd `server` as tenant acme (SANDBOX_API_URL/KEY); nginx is stopped after, asserting it
-- did not crash; raises with the error raised in nginx.
function M.sdk_eval(server, code, max_time)
  local nginx = require "support.hosts.nginx"
  local host = nginx.start({ env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme },
    server = M.LOCATION })
  local ok, value = pcall(M.eval, host, code, max_time)
  nginx.assert_no_crashes(nginx.stop(host))
  if not ok then error(value, 2) end
  return value
end

return M
