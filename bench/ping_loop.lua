-- A latency probe for bench/openresty.lua: GET <path> on one keep-alive connection to
-- 127.0.0.1:<port> every 10 ms until <stop file> exists, then writes each answer's latency
-- (milliseconds, one per line) to <out file>. A failed or non-200 answer is written as -1.
--
--   lua5.4 bench/ping_loop.lua <port> <path> <stop file> <out file>
local socket = require "socket"

local port, path, stop_file, out_file = tonumber(arg[1]), arg[2], arg[3], arg[4]
assert(port and path and stop_file and out_file, "usage: ping_loop.lua PORT PATH STOP_FILE OUT_FILE")

local function exists(file)
  local f = io.open(file, "r")
  if f then f:close() end
  return f ~= nil
end

local conn
local function ping()
  if not conn then
    conn = socket.tcp()
    conn:settimeout(10)
    if not conn:connect("127.0.0.1", port) then conn = nil return false end
    conn:setoption("tcp-nodelay", true)
  end
  local ok = conn:send("GET " .. path .. " HTTP/1.1\r\nHost: bench\r\n\r\n")
  local status = ok and conn:receive("*l")
  local length = 0
  while status do
    local line = conn:receive("*l")
    if not line or line == "" then break end
    length = tonumber(line:lower():match("^content%-length:%s*(%d+)")) or length
  end
  local body = status and length > 0 and conn:receive(length)
  if not status or (length > 0 and not body) then
    conn:close()
    conn = nil
    return false
  end
  return status:match("^HTTP/1%.1 200") ~= nil
end

local latencies = {}
while not exists(stop_file) do
  local t0 = socket.gettime()
  local ok = ping()
  latencies[#latencies + 1] = ok and (socket.gettime() - t0) * 1000 or -1
  socket.sleep(0.01)
end
local f = assert(io.open(out_file, "w"))
for _, ms in ipairs(latencies) do f:write(string.format("%.3f\n", ms)) end
f:close()
