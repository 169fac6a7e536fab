-- luacheck: max line length 140
-- A 100 MB binary file written and read back through the SDK, as Lua strings (files:write raw
-- bytes, files:read{binary = true}) and streamed from and to local files (files:upload,
-- files:download), against the same round trip with curl (--data-binary / -o),
-- side by side in one run on one airlockd, best of RUNS each; plus airlockd's VmHWM growth and
-- the SDK process's peak RSS. No assertion: it prints a table.
--
--   make bench        (or: lua5.4 bench/files_binary.lua [runs])
package.path = "spec/?.lua;" .. package.path
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local socket = require "socket"

local RUNS = math.max(1, tonumber(arg and arg[1]) or 3)
local SIZE = 100 * 1000 * 1000
local q = proc.shell_quote

local function status_kb(pid, field)
  local s = proc.read_file("/proc/" .. pid .. "/status") or ""
  return tonumber(s:match(field .. ":%s*(%d+)"))
end

local server = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "500" } })
local key = server.tenants.acme
local tmp = proc.make_temp_dir()
local src = tmp .. "/src.bin"
assert(proc.run("head -c " .. SIZE .. " /dev/urandom > " .. q(src)))

local results
local ok, err = pcall(function()
  local sbx = airlock.sandbox({ base_url = server.url, api_key = key })
  local hwm0 = status_kb(server.pid, "VmHWM")
  -- first the local files streamed both ways (files:upload / files:download), before this
  -- process holds any 100 MB string: its peak growth is the streaming's
  local stream_hwm0 = status_kb("self", "VmHWM")
  local best_files = math.huge
  for _ = 1, RUNS do
    local t0 = socket.gettime()
    sbx.files:upload("files.bin", src)
    sbx.files:download("files.bin", tmp .. "/down.bin")
    local t1 = socket.gettime()
    assert(proc.run("cmp -s " .. q(src) .. " " .. q(tmp .. "/down.bin")), "the download differs")
    best_files = math.min(best_files, t1 - t0)
  end
  local stream_growth = status_kb("self", "VmHWM") - stream_hwm0

  local f = assert(io.open(src, "rb"))
  local data = f:read("*a")
  f:close()
  local best_sdk, best_curl = math.huge, math.huge
  for _ = 1, RUNS do
    local t0 = socket.gettime()
    sbx.files:write("sdk.bin", data)
    local back = sbx.files:read("sdk.bin", { binary = true })
    local t1 = socket.gettime()
    assert(back == data, "the SDK read back other bytes")
    back = nil -- luacheck: ignore 311
    collectgarbage()
    best_sdk = math.min(best_sdk, t1 - t0)

    local base = server.url .. "/v1/sessions/" .. sbx.session_id
    t0 = socket.gettime()
    assert(proc.run("curl -s -f -o /dev/null -H " .. q("X-API-Key: " .. key) .. " -H 'Content-Type: application/octet-stream' "
      .. "--data-binary " .. q("@" .. src) .. " " .. q(base .. "/write?path=curl.bin")))
    assert(proc.run("curl -s -f -H " .. q("X-API-Key: " .. key) .. " -H 'Accept: application/octet-stream' -o "
      .. q(tmp .. "/back.bin") .. " " .. q(base .. "/read?path=curl.bin")))
    t1 = socket.gettime()
    best_curl = math.min(best_curl, t1 - t0)
  end
  local hwm1 = status_kb(server.pid, "VmHWM")
  local sdk_hwm = status_kb("self", "VmHWM")
  sbx:close()
  results = { best_sdk = best_sdk, best_curl = best_curl, best_files = best_files, stream_growth = stream_growth,
    hwm0 = hwm0, hwm1 = hwm1, sdk_hwm = sdk_hwm }
end)
airlockd.stop(server)
proc.remove_tree(tmp)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
local best_sdk, best_curl, best_files, stream_growth = results.best_sdk, results.best_curl, results.best_files, results.stream_growth
local hwm0, hwm1, sdk_hwm = results.hwm0, results.hwm1, results.sdk_hwm

print(string.format("100 MB binary write+read (best of %d): SDK %.2f s, curl --data-binary/-o %.2f s, ratio %.2fx",
  RUNS, best_sdk, best_curl, best_sdk / best_curl))
print(string.format("100 MB local file upload+download (best of %d): SDK %.2f s, ratio to curl %.2fx; "
  .. "SDK peak RSS growth %d kB", RUNS, best_files, best_files / best_curl, stream_growth))
print(string.format("airlockd VmHWM %d kB -> %d kB (+%d kB); SDK process peak RSS %d MB (payload 100 MB)",
  hwm0, hwm1, hwm1 - hwm0, math.floor(sdk_hwm / 1024)))
