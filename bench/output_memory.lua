-- luacheck: max line length 140
-- airlockd's memory while a command writes 1 GB to stdout (issue #8 measure: at most 64 MB above
-- idle), and how fast it drains it, side by side with the same command under a bare
-- `runsc run | wc -c` (gVisor's own pipe speed) in one run.
--
--   make bench        (or: lua5.4 bench/output_memory.lua)
--
-- Starts airlockd on 127.0.0.1 (spec/support/airlockd.lua), runs one ordinary command, reads
-- its VmRSS (idle), resets its VmHWM (/proc/<pid>/clear_refs) and then runs, once each: 1 GB of
-- NUL bytes (the worst case for the JSON answer: 6 bytes per kept byte) and 1 GB of text;
-- VmRSS is sampled every 50 ms meanwhile and VmHWM read after. Needs root (runsc). No
-- assertion: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local bare_runsc = require "support.bare_runsc"
local fuzz = require "support.fuzz"
local host_state = require "support.host_state"
local http_client = require "support.http_client"
local socket = require "socket"

local GB = 1000 * 1000 * 1000
local COMMANDS = {
  { "1 GB of NUL bytes", "head -c " .. GB .. " /dev/zero" },
  { "1 GB of text (yes)", "yes | head -c " .. GB },
}

local check = harness.check

-- An exec over one socket, sampling airlockd's VmRSS while it waits; returns the response
-- size, the seconds it took and the highest VmRSS sampled (kB).
local function exec_sampling(server, key, id, command)
  local c = socket.tcp()
  c:settimeout(120)
  check(c:connect("127.0.0.1", server.port))
  local body = string.format('{"command":"%s","timeout_seconds":60}', command)
  check(c:send(table.concat({ "POST /v1/sessions/" .. id .. "/exec HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
    "X-API-Key: " .. key, "Content-Type: application/json", "Content-Length: " .. #body, "", body }, "\r\n")))
  c:settimeout(0.05)
  local t0 = socket.gettime()
  local got, max_rss = 0, 0
  while true do
    max_rss = math.max(max_rss, host_state.status_kb(server.pid, "VmRSS") or 0)
    local data, err, partial = c:receive(65536)
    local n = #(data or partial or "")
    got = got + n
    if err == "closed" then break end
    check(socket.gettime() - t0 < 120, "no answer in 120 s")
  end
  c:close()
  return got, socket.gettime() - t0, max_rss
end

local server = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) } })
local ok, err = pcall(function()
  check(airlockd.log(server):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(server))
  local key = server.tenants.bench
  local id = http_client.create(server, key).json.session_id
  check(fuzz.request(server, "POST", "/v1/sessions/" .. id .. "/exec", key, '{"command":"echo warm"}') == 200, "warm-up exec")
  local bare = bare_runsc.runner(server)
  print("airlockd memory while a command writes 1 GB to stdout (MB; idle = VmRSS after one ordinary command)")
  print(string.format("%-22s %8s %10s %10s %10s %9s %9s %7s", "command", "idle", "peak RSS", "VmHWM", "above idle",
    "airlockd", "bare", "ratio"))
  for _, cmd in ipairs(COMMANDS) do
    local idle = host_state.status_kb(server.pid, "VmRSS")
    check(host_state.reset_peak(server.pid), "cannot reset VmHWM")
    local size, took, peak_rss = exec_sampling(server, key, id, cmd[2])
    local hwm = host_state.status_kb(server.pid, "VmHWM")
    local t0 = socket.gettime()
    local counted = tonumber(bare(cmd[2], "wc -c"))
    local bare_s = socket.gettime() - t0
    check(counted == GB, "bare runsc wrote " .. tostring(counted) .. " bytes")
    check(size > 1000000 and size < 20 * 1024 * 1024, "response of " .. size .. " bytes")
    print(string.format("%-22s %8.1f %10.1f %10.1f %10.1f %8.1fs %8.1fs %7.2f", cmd[1], idle / 1024, peak_rss / 1024, hwm / 1024,
      (hwm - idle) / 1024, took, bare_s, took / bare_s))
  end
  print("(airlockd/bare: the time to answer vs `runsc run ... | wc -c`; 1.00 = drained at gVisor's pipe speed)")
end)
airlockd.stop(server)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
