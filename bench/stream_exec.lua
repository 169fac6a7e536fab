-- luacheck: max line length 140
-- The streamed exec (issue #11), side by side in one run (no assertion: it prints a table):
--  1. 10 MB of stdout: the SDK's streamed sbx:run (on_stdout counting bytes) vs raw curl of
--     the plain route + cjson.decode of its answer (time ratio), and the SDK process's peak
--     RSS growth (VmHWM, reset before) vs the payload;
--  2. first-piece latency of `echo a; sleep 2; echo b`: the command prints its own clock
--     (date +%s.%N, the host's realtime clock under gVisor too) when it writes "a"; the
--     callback notes socket.gettime() when "a" arrives.
--   make bench   (or: lua5.4 bench/stream_exec.lua [runs])
package.path = "spec/?.lua;" .. package.path
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local host_state = require "support.host_state"
local proc = require "support.proc"
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(3, tonumber(arg and arg[1]) or 5)
local MB10 = "head -c 7500000 /dev/urandom | base64 -w 100" -- 10,100,000 bytes of text

local srv = airlockd.start()
local key = srv.tenants.acme
local sbx = airlock.sandbox({ base_url = srv.url, api_key = key })
local self_pid = tonumber(proc.read_file("/proc/self/stat"):match("^(%d+)"))

local function median(t)
  table.sort(t)
  return t[math.ceil(#t / 2)]
end

local sdk, raw, growth, bytes = {}, {}, {}, 0
local body = cjson.encode({ command = MB10, timeout_seconds = 60 })
for _ = 1, RUNS do
  collectgarbage()
  local before = host_state.status_kb(self_pid, "VmRSS")
  host_state.reset_peak(self_pid)
  local t0 = socket.gettime()
  local n = 0
  sbx:run(MB10, { timeout = 60, on_stdout = function(s) n = n + #s end })
  sdk[#sdk + 1] = socket.gettime() - t0
  growth[#growth + 1] = (host_state.status_kb(self_pid, "VmHWM") - before) / 1024
  bytes = n
  local out = os.tmpname()
  t0 = socket.gettime()
  os.execute(string.format("curl -s -H 'Content-Type: application/json' -H %s --data-binary %s %s > %s",
    proc.shell_quote("X-API-Key: " .. key), proc.shell_quote(body), proc.shell_quote(srv.url .. "/v1/sessions/"
    .. sbx.session_id .. "/exec"), out))
  local decoded = cjson.decode(proc.read_file(out))
  raw[#raw + 1] = socket.gettime() - t0
  assert(decoded.exit_code == 0)
  os.remove(out)
end
local s, r = median(sdk), median(raw)
print(string.format("10 MB stdout (%d runs, medians): SDK streamed %.2f s (%d bytes to on_stdout)"
  .. " | raw curl + cjson of the plain route %.2f s | ratio %.2fx | SDK peak RSS growth %.1f MB = %.2fx the payload",
  RUNS, s, bytes, r, s / r, median(growth),
  median(growth) * 1048576 / bytes))

local lat = {}
for _ = 1, RUNS do
  local at
  local res = sbx:run("echo a $(date +%s.%N); sleep 2; echo b", {
    on_stdout = function(piece) if not at and piece:find("^a ") then at = socket.gettime() end end })
  local written = tonumber(res.stdout:match("^a (%d+%.%d+)"))
  lat[#lat + 1] = (at - written) * 1000
end
print(string.format("first piece of `echo a; sleep 2; echo b`: written -> on_stdout median %.1f ms, max %.1f ms (%d runs)",
  median(lat), lat[#lat], RUNS)) -- median() sorted lat
sbx:close()
airlockd.stop(srv)
