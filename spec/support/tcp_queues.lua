-- The kernel's queues of loopback TCP connections (/proc/net/tcp, IPv4): whether what a
-- client sent has all been read by the server's process. Specs wait for that instead of
-- sleeping ("the server has the bytes" is the condition, not a time). Lua 5.1-compatible.
local M = {}

-- /proc/net/tcp's spelling of ip:port: the address's bytes in host (little-endian) order.
local function key(ip, port)
  local a, b, c, d = ip:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  return string.format("%02X%02X%02X%02X:%04X", tonumber(d), tonumber(c), tonumber(b), tonumber(a), tonumber(port))
end

-- The send and receive queues (bytes) of the socket from local_ip:local_port to
-- remote_ip:remote_port, or nil when there is none.
function M.queues(local_ip, local_port, remote_ip, remote_port)
  local want_local, want_remote = key(local_ip, local_port), key(remote_ip, remote_port)
  for line in io.lines("/proc/net/tcp") do
    local l, r, tx, rx = line:match("^%s*%d+: (%x+:%x+) (%x+:%x+) %x+ (%x+):(%x+)")
    if l == want_local and r == want_remote then return tonumber(tx, 16), tonumber(rx, 16) end
  end
end

-- Whether every byte sent on the connected LuaSocket c has reached its peer and been read
-- by the process there (c's send queue and the peer's receive queue are both empty).
function M.all_read(c)
  local lip, lport = c:getsockname()
  local rip, rport = c:getpeername()
  local tx = M.queues(lip, lport, rip, rport)
  local _, rx = M.queues(rip, rport, lip, lport)
  return tx == 0 and rx == 0
end

return M
