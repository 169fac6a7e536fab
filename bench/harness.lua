-- What the airlockd benchmarks share: a check that fails the bench, and one request over
-- lua-socket (support.fuzz's raw client: no curl process per call) with its JSON decoded.
local fuzz = require "support.fuzz"
local cjson = require "cjson"
local socket = require "socket"

local M = {}

-- Raises msg (at the caller's line) unless cond.
function M.check(cond, msg)
  if not cond then error(msg, 2) end
end

-- Milliseconds fn takes.
function M.timed(fn)
  local t0 = socket.gettime()
  fn()
  return (socket.gettime() - t0) * 1000
end

-- status and the decoded JSON body (the raw body when it is not JSON).
function M.call(server, method, path, key, body)
  local status, raw, rbody = fuzz.request(server, method, path, key, body)
  local ok, decoded = pcall(cjson.decode, rbody or "")
  M.check(status, "no answer: " .. tostring(raw))
  return status, ok and decoded or rbody
end

return M
