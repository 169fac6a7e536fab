-- luacheck: max line length 140
-- The SDK in OpenResty, measured side by side in one run (only ratios taken together mean
-- anything on these shared machines; nothing is asserted):
--   burst   32 concurrent POST /run of `sleep 1` (examples/openresty) on nginx with ONE worker,
--           against the same 32 commands driven by the plain-Lua SDK (airlock.spawn/poll on
--           libcurl); airlockd allows 32 commands at once. Wall time of each and the ratio.
--   ping    GET /ping on the same worker every 10 ms: idle; while it serves the burst; and
--           while the plain-Lua burst loads the machine as much but the worker is idle (the
--           control: 32 gVisor sandboxes starting on 2 cores delay every process).
--   rate    small calls one after another (GET /healthz through the SDK, rounds of 1,000 taken
--           in turns, the median round of each): the cosocket
--           transport in nginx and the curl transport in plain Lua, against a raw libcurl
--           keep-alive loop in C (bench/raw_curl_rate.c, build/bench/raw_curl_rate).
--   soak    1,000 POST /run (16 at a time): the worker's VmRSS after the first 100 and at the
--           end, sessions left on the server, worker crashes or restarts.
--
--   make bench        (or: lua5.4 bench/openresty.lua, after make build)
-- Environment: BENCH_SMOKE=1 runs tiny sizes (a check that the bench works); SOAK_REQUESTS.
-- Needs root (runsc) and nginx with the Lua module (make deps).
package.path = "spec/?.lua;" .. package.path
local cjson = require "cjson"
local socket = require "socket"
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local common = require "support.hosts.common"
local nginx = require "support.hosts.nginx"
local ngx_eval = require "support.hosts.nginx_eval"
local burst = require "support.hosts.burst"

local SMOKE = os.getenv("BENCH_SMOKE") == "1"
local BURST = SMOKE and 4 or 32
local ROUNDS = SMOKE and 1 or 2
local RATE_CALLS = SMOKE and 100 or 1000
local RATE_ROUNDS = SMOKE and 1 or 7
local SOAK = tonumber(os.getenv("SOAK_REQUESTS") or "") or (SMOKE and 20 or 1000)
local SOAK_AT_ONCE = 16
local CURL_LOOP = os.getenv("RAW_CURL_RATE") or "build/bench/raw_curl_rate"

local function percentile(sorted, p)
  local idx = math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))
  return sorted[idx]
end

local function median(list)
  local t = {}
  for i, v in ipairs(list) do t[i] = v end
  table.sort(t)
  return t[math.ceil(#t / 2)]
end

-- CPU time (user + system) a process has used, in milliseconds (clock ticks of 10 ms).
local function cpu_ms(pid)
  local stat = proc.read_file("/proc/" .. pid .. "/stat") or ""
  local after = stat:match("%) (.*)$") or ""
  local fields = {}
  for f in after:gmatch("%S+") do fields[#fields + 1] = f end
  -- after the command name: state is field 3 of stat, utime 14 and stime 15
  return ((tonumber(fields[12]) or 0) + (tonumber(fields[13]) or 0)) * 10
end

local function vm(pid, field)
  local status = proc.read_file("/proc/" .. pid .. "/status") or ""
  return tonumber(status:match(field .. ":%s*(%d+) kB"))
end

assert(proc.run("test -x " .. CURL_LOOP), CURL_LOOP .. " is missing: make build")

local server = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = cjson.encode({
  ["*"] = { max_concurrent_exec = 32, max_sessions = 100, requests_per_minute = 1000000 } }) } })
local key = server.tenants.acme
local top = common.top()
local srv = nginx.start({
  workers = 1, max_seconds = 3600,
  env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = key },
  lua_path = top .. "/examples/openresty/?.lua;" .. top .. "/examples/?.lua",
  http = "lua_check_client_abort on;\ninit_by_lua_block { require 'airlock' }",
  server = "include " .. top .. "/examples/openresty/locations.conf;\n"
    .. "location = /ping { content_by_lua_block { ngx.header.content_length = 5; ngx.print('pong\\n') } }\n"
    .. ngx_eval.LOCATION,
})
local worker = nginx.worker_pids(srv)[1]

local function run_body(command)
  return cjson.encode({ command = command, timeout = 30 })
end

---------------------------------------------------------------- ping probe

local ping_dir = proc.make_temp_dir()
local ping_n = 0

-- Starts the /ping probe; returns stop() → sorted latencies (ms) and failures.
local function start_ping()
  ping_n = ping_n + 1
  local stop_file, out = ping_dir .. "/stop" .. ping_n, ping_dir .. "/out" .. ping_n
  os.execute(string.format("lua5.4 bench/ping_loop.lua %d /ping %s %s &", srv.port,
    proc.shell_quote(stop_file), proc.shell_quote(out)))
  return function()
    proc.write_file(stop_file, "")
    proc.wait_until(10, function() return proc.read_file(out) ~= nil end, 0.05)
    proc.sleep(0.1)
    local t, failed = {}, 0
    for line in (proc.read_file(out) or ""):gmatch("[^\n]+") do
      local ms = tonumber(line)
      if ms and ms >= 0 then t[#t + 1] = ms else failed = failed + 1 end
    end
    table.sort(t)
    return t, failed
  end
end

local function ping_row(t, failed)
  if #t == 0 then return "no answers" end
  return string.format("p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d pings, %d failed)",
    percentile(t, 50), percentile(t, 99), t[#t], #t, failed)
end

---------------------------------------------------------------- burst

local function nginx_burst()
  local requests = {}
  for i = 1, BURST do requests[i] = { method = "POST", path = "/run", body = run_body("sleep 1") } end
  local t0 = socket.gettime()
  local results = burst.run(srv.url, requests)
  local wall = socket.gettime() - t0
  local ok = 0
  for _, r in ipairs(results) do
    if r.status == 200 and cjson.decode(r.body).exit_code == 0 then ok = ok + 1 end
  end
  return wall, ok
end

local function sdk_burst()
  local tasks = {}
  local t0 = socket.gettime()
  for i = 1, BURST do
    tasks[i] = airlock.spawn(function()
      return airlock.with({ base_url = server.url, api_key = key }, function(sbx)
        return sbx:run("sleep 1", { timeout = 30 }).exit_code
      end)
    end)
  end
  while airlock.poll(20) > 0 do end
  local wall = socket.gettime() - t0
  local ok = 0
  for _, t in ipairs(tasks) do
    local done, code = t:result()
    if done and code == 0 then ok = ok + 1 end
  end
  return wall, ok
end

print(string.format("OpenResty bench: nginx %s, 1 worker; airlockd allowing 32 commands at once%s",
  (proc.output("nginx -v 2>&1"):match("nginx/(%S+)") or "?"), SMOKE and " (SMOKE sizes)" or ""))

burst.run(srv.url, { { method = "POST", path = "/run", body = run_body("true") } })   -- warm-up
sdk_burst()

local stop = start_ping()
proc.sleep(SMOKE and 0.5 or 2)
local idle_t, idle_failed = stop()

-- Runs burst_fn with the /ping probe on; adds the latencies to pings = {t = {}, failed = n}.
local function with_ping(pings, burst_fn)
  local stop_ping = start_ping()
  local wall, ok = burst_fn()
  local t, failed = stop_ping()
  for _, ms in ipairs(t) do pings.t[#pings.t + 1] = ms end
  pings.failed = pings.failed + failed
  return wall, ok
end

local nginx_walls, sdk_walls, failures, worker_cpu = {}, {}, 0, 0
local ping_nginx, ping_sdk = { t = {}, failed = 0 }, { t = {}, failed = 0 }
for _ = 1, ROUNDS do
  local cpu0 = cpu_ms(worker)
  local wall, ok = with_ping(ping_nginx, nginx_burst)
  worker_cpu = worker_cpu + cpu_ms(worker) - cpu0
  nginx_walls[#nginx_walls + 1] = wall
  failures = failures + (BURST - ok)
  wall, ok = with_ping(ping_sdk, sdk_burst)
  sdk_walls[#sdk_walls + 1] = wall
  failures = failures + (BURST - ok)
end
table.sort(ping_nginx.t)
table.sort(ping_sdk.t)
local nw, sw = median(nginx_walls), median(sdk_walls)
print(string.format("burst  %d x `sleep 1`:  nginx POST /run %.2f s   plain-Lua SDK spawn/poll %.2f s   ratio %.2f"
  .. "   (median of %d rounds, %d failed)", BURST, nw, sw, nw / sw, ROUNDS, failures))
print(string.format("worker CPU time while serving the bursts: %d ms for %d requests (%.1f ms each)",
  worker_cpu, BURST * ROUNDS, worker_cpu / (BURST * ROUNDS)))
print("ping   the worker idle, machine idle:                       " .. ping_row(idle_t, idle_failed))
print("ping   the worker serving the burst:                        " .. ping_row(ping_nginx.t, ping_nginx.failed))
print("ping   the worker idle, the plain-Lua burst loading the machine: " .. ping_row(ping_sdk.t, ping_sdk.failed))

---------------------------------------------------------------- small-call rate

local function c_rate()
  local words = { CURL_LOOP, server.url .. "/healthz", key, tostring(RATE_CALLS) }
  for i, w in ipairs(words) do words[i] = proc.shell_quote(w) end
  local out = proc.output(table.concat(words, " "))
  local rate, connects = out:match("rate=([%d.]+)"), out:match("connects=(%d+)")
  assert(rate, "raw_curl_rate said: " .. out)
  return tonumber(rate), tonumber(connects)
end

local function ngx_rate()
  local out = ngx_eval.eval(srv, string.format([[
    local airlock = require "airlock"
    local sbx = airlock.attach("sbx_000000000000")
    sbx:health()
    local before = airlock.stats()
    ngx.update_time()
    local t0 = ngx.now()
    for _ = 1, %d do sbx:health() end
    ngx.update_time()
    return { seconds = ngx.now() - t0, connects = airlock.stats().connects - before.connects }
  ]], RATE_CALLS))
  return RATE_CALLS / out.seconds, out.connects
end

local function curl_rate()
  local sbx = airlock.attach("sbx_000000000000", { base_url = server.url, api_key = key })
  sbx:health()
  local before = airlock.stats().connects
  local t0 = socket.gettime()
  for _ = 1, RATE_CALLS do sbx:health() end
  return RATE_CALLS / (socket.gettime() - t0), airlock.stats().connects - before
end

local rates = { c = {}, ngx = {}, curl = {} }
local connects = { c = 0, ngx = 0, curl = 0 }
for _ = 1, RATE_ROUNDS do
  for name, fn in pairs({ c = c_rate, ngx = ngx_rate, curl = curl_rate }) do
    local rate, n = fn()
    rates[name][#rates[name] + 1] = rate
    connects[name] = connects[name] + n
  end
end
local c_median, ngx_median, curl_median = median(rates.c), median(rates.ngx), median(rates.curl)
print(string.format("rate   GET /healthz x %d, one after another (median of %d rounds):  raw libcurl (C) %.0f/s   "
  .. "cosocket transport %.0f/s (%.2fx)   curl transport %.0f/s (%.2fx)   connections opened: %d, %d, %d",
  RATE_CALLS, RATE_ROUNDS, c_median, ngx_median, ngx_median / c_median, curl_median, curl_median / c_median,
  connects.c, connects.ngx, connects.curl))

---------------------------------------------------------------- soak

local function soak_batch(count)
  local requests = {}
  for i = 1, count do requests[i] = { method = "POST", path = "/run", body = run_body("echo " .. i) } end
  local ok = 0
  for _, r in ipairs(burst.run(srv.url, requests)) do
    if r.status == 200 then ok = ok + 1 end
  end
  return ok
end

local done, ok_total, rss_warm, t0 = 0, 0, nil, socket.gettime()
local warm_up = math.min(100, math.floor(SOAK / 10))
while done < SOAK do
  local n = math.min(SOAK_AT_ONCE, SOAK - done)
  if done < warm_up then n = math.min(n, warm_up - done) end
  ok_total = ok_total + soak_batch(n)
  done = done + n
  if done == warm_up then rss_warm = vm(worker, "VmRSS") end
end
local rss_end, hwm = vm(worker, "VmRSS"), vm(worker, "VmHWM")
local workers_after = nginx.worker_pids(srv)
local left = #airlock.list_sessions({ base_url = server.url, api_key = key })
local log = nginx.stop(srv)
airlockd.stop(server)
proc.remove_tree(ping_dir)
print(string.format("soak   %d x POST /run, %d at a time, %.0f s: %d answered 200; worker VmRSS %.1f MiB after %d, %.1f MiB at the end "
  .. "(%+.1f%%), VmHWM %.1f MiB; sessions left %d; crashes %d; worker restarts %d",
  SOAK, SOAK_AT_ONCE, socket.gettime() - t0, ok_total, (rss_warm or 0) / 1024, warm_up, (rss_end or 0) / 1024,
  rss_warm and (rss_end - rss_warm) / rss_warm * 100 or 0, (hwm or 0) / 1024, left, #nginx.crashes(log),
  (#workers_after == 1 and workers_after[1] == worker) and 0 or 1))
