-- The calls the kernel and pause specs (issue #26) share, on the server and key target()
-- gives at each call (a spec that restarts its server keeps using the same table): a JSON call,
-- a cell that must answer 200, a session with a Python kernel holding x = 41, a pause that must
-- answer 200 "paused". Lua 5.1-compatible.
local cjson = require "cjson"
local http_client = require "support.http_client"
local assert = require "luassert" -- busted's assert lives in the spec files' environment only

local M = {}

function M.new(target)
  local c = {}

  function c.call(method, path, body, max_time)
    local server, key = target()
    return http_client.request(server, method, path,
      { key = key, body = body and cjson.encode(body), max_time = max_time })
  end

  -- (timeout: the cell's seconds, default 20; the call waits 40 s more)
  function c.cell(sid, kid, code, timeout)
    timeout = timeout or 20
    local r = c.call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute",
      { code = code, timeout = timeout }, timeout + 40)
    assert.are.equal(200, r.status, r.body)
    return r.json
  end

  -- (body: the session's, e.g. its size)
  function c.session_with_x41(body)
    local server, key = target()
    local r = http_client.create(server, key, body and cjson.encode(body))
    assert.are.equal(201, r.status, r.body)
    local sid = r.json.session_id
    r = c.call("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" })
    assert.are.equal(201, r.status, r.body)
    local kid = r.json.kernel_id
    assert.are.equal(cjson.null, c.cell(sid, kid, "x = 41").error)
    return sid, kid
  end

  function c.pause(sid)
    local p = c.call("POST", "/v1/sessions/" .. sid .. "/pause", nil, 90)
    assert.are.equal(200, p.status, p.body)
    assert.are.equal("paused", p.json.state)
    return p.json
  end

  return c
end

return M
