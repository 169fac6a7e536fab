-- What the airlockd benchmarks share: a check that fails the bench, one request over
-- lua-socket (support.fuzz's raw client: no curl process per call) with its JSON decoded,
-- sessions, kernels and cells made with it, and the load average.
local fuzz = require "support.fuzz"
local cjson = require "cjson"
local socket = require "socket"

local M = {}

-- Raises msg (at the caller's line) unless cond.
function M.check(cond, msg)
  if not cond then error(msg, 2) end
end

-- Milliseconds fn takes, then the first two values fn returned.
function M.timed(fn)
  local t0 = socket.gettime()
  local a, b = fn()
  return (socket.gettime() - t0) * 1000, a, b
end

-- status and the decoded JSON body (the raw body when it is not JSON).
function M.call(server, method, path, key, body)
  local status, raw, rbody = fuzz.request(server, method, path, key, body)
  local ok, decoded = pcall(cjson.decode, rbody or "")
  M.check(status, "no answer: " .. tostring(raw))
  return status, ok and decoded or rbody
end

-- The load average's three figures ("1.20 0.80 0.50"), to print beside a bench's figures.
function M.loadavg()
  local f = io.open("/proc/loadavg")
  local l = f and f:read("*l") or "?"
  if f then f:close() end
  return l:match("^(%S+ %S+ %S+)") or l
end

-- A new session on server (body: the create's JSON, "{}" when nil): its id.
function M.session(server, key, body)
  local status, res = M.call(server, "POST", "/v1/sessions", key, body or "{}")
  M.check(status == 201, "create: " .. tostring(status) .. " " .. cjson.encode(res))
  return res.session_id
end

-- A new Python kernel in session sid: its id.
function M.kernel(server, key, sid)
  local status, res = M.call(server, "POST", "/v1/sessions/" .. sid .. "/kernels", key, '{"language": "python"}')
  M.check(status == 201, "kernel: " .. tostring(status))
  return res.kernel_id
end

-- Runs code in kernel kid of session sid (60 s at most); its answer, checked to have no error.
function M.cell(server, key, sid, kid, code)
  local status, res = M.call(server, "POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute", key,
    cjson.encode({ code = code, timeout = 60 }))
  M.check(status == 200 and res.error == cjson.null, "cell: " .. tostring(status) .. " " .. cjson.encode(res))
  return res
end

-- One request to a base URL (http://host:port) on a connection of its own, for the fleet
-- benchmarks that call nodes and the router by address: status and the decoded JSON body.
function M.call_url(url, method, path, key, body, timeout)
  local host, port = url:match("^http://([^:/]+):(%d+)")
  local c = socket.tcp()
  c:settimeout(timeout or 60)
  M.check(c:connect(host, tonumber(port)))
  local lines = { method .. " " .. path .. " HTTP/1.1", "Host: " .. host, "Connection: close" }
  if key then lines[#lines + 1] = "X-API-Key: " .. key end
  if body then
    lines[#lines + 1] = "Content-Type: application/json"
    lines[#lines + 1] = "Content-Length: " .. #body
  end
  c:send(table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or ""))
  local raw = c:receive("*a")
  c:close()
  local status = tonumber((raw or ""):match("^HTTP/1%.%d (%d+)"))
  local ok, decoded = pcall(cjson.decode, (raw or ""):match("\r\n\r\n(.*)$") or "")
  return status, ok and decoded or nil
end

return M
