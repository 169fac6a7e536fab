-- luacheck: max line length 140
-- The streamed exec (issue #11), side by side in one run (no assertion: it prints a table):
--  1. 10 MB of stdout: the SDK's streamed sbx:run (on_stdout counting bytes) vs raw curl of
--     the plain route + cjson.decode of its answer (time ratio), and the SDK process's peak
--     RSS growth (VmHWM, reset before) vs the payload;
--  2. first-piece latency of `echo a; sleep 2; echo b`: the command prints its own clock
--     (date +%s.%N, the host's realtime clock under gVisor too) when it writes "a"; the
--     callback notes socket.gettime() when "a" arrives;
--  3. BIG_MB (default 2048) of stdout answered plain, spilled and streamed vs the same command
--     piped to cat inside its sandbox (the time the writing takes under its limits).
--   make bench   (or: lua5.4 bench/stream_exec.lua [runs])
package.path = "spec/?.lua;" .. package.path
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local bare_runsc = require "support.bare_runsc"
local host_state = require "support.host_state"
local proc = require "support.proc"
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(3, tonumber(arg and arg[1]) or 5)
local MB10 = "head -c 7500000 /dev/urandom | base64 -w 100" -- 10,100,000 bytes of text
local BIG_MB = tonumber(os.getenv("BIG_MB")) or 2048

local srv = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = tostring(BIG_MB + 512) } })
local key = srv.tenants.acme
local sbx = airlock.sandbox({ base_url = srv.url, api_key = key })
local self_pid = tonumber(proc.read_file("/proc/self/stat"):match("^(%d+)"))

local function median(t)
  table.sort(t)
  return t[math.ceil(#t / 2)]
end

local ok, err = pcall(function()
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

  -- 3. a command writing BIG_MB (2 GB by default) of text, answered plain (head + tail kept),
  -- spilled to a workspace file, and streamed to the SDK (on_stdout counting), vs the time the
  -- writing takes under the command's own limits (1 CPU): the same command piped into `cat >
  -- /dev/null` inside its sandbox. A bare `runsc run ... | wc -c` (no cgroup: both CPUs) is
  -- printed beside.
  local BIG = string.format("yes abcdefghijklmnopqrstuvwxyz0123456789 | head -c %dM", BIG_MB)
  local bare = bare_runsc.runner(srv)
  local t0 = socket.gettime()
  local counted = tonumber(bare(BIG, "wc -c"))
  local bare_s = socket.gettime() - t0
  assert(counted == BIG_MB * 1048576, "bare runsc wrote " .. tostring(counted) .. " bytes")
  t0 = socket.gettime()
  local piped = sbx:run(BIG .. " | cat > /dev/null", { timeout = 60 })
  local writing_s = socket.gettime() - t0
  assert(piped.exit_code == 0, "the piped baseline failed: " .. piped.output)
  local rows = {}
  for _, mode in ipairs({ "plain", "spill", "streamed" }) do
    local n = 0
    local o = { timeout = 60 }
    if mode == "spill" then o.spill = true end
    if mode == "streamed" then o.on_stdout = function(piece) n = n + #piece end end
    t0 = socket.gettime()
    local res = sbx:run(BIG, o)
    local took = socket.gettime() - t0
    assert(res.exit_code == 0 and not res.timed_out, mode .. ": exit " .. tostring(res.exit_code) .. ", timed out "
      .. tostring(res.timed_out))
    assert(mode ~= "streamed" or n == BIG_MB * 1048576, "streamed " .. n .. " bytes")
    rows[#rows + 1] = string.format("%s %.1f s (%.2fx)", mode, took, took / writing_s)
    if mode == "spill" then sbx:run("rm -f " .. (res.stdout_file or "") .. " " .. (res.stderr_file or "") .. "; true") end
  end
  print(string.format("%d MB of stdout: the writing (piped to cat in the sandbox) %.1f s; %s; bare runsc | wc -c "
    .. "(no CPU limit) %.1f s", BIG_MB, writing_s, table.concat(rows, "; "), bare_s))
end)
pcall(sbx.close, sbx)
airlockd.stop(srv)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
