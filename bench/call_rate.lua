-- luacheck: max line length 140
-- Small-call rate of the SDK's libcurl transports against a raw libcurl keep-alive loop in C
-- (bench/raw_curl_rate.c), side by side on the same airlockd, in rounds that alternate so
-- that the machine's load hits every kind alike (only ratios measured together mean
-- anything here). A small call: GET /v1/usage with the tenant's key, answered 200 with a
-- short JSON body. Kinds:
--   raw C          build/bench/raw_curl_rate: one easy handle, sequential, body discarded
--   curl (block)   sbx:usage() in a loop on a sandbox handle: the SDK's whole path (request
--                  building, one libcurl transfer, retry policy, JSON decoding)
--   uv (task)      the same calls inside a task on a luv loop (airlock.transport.uv); only
--                  when luv is installed
-- Prints per kind the median calls/s, the median of each round's ratio to that round's raw C
-- run, and the client's CPU time per call (this process's, or raw_curl_rate's): the part of
-- a call's cost that is the client's own. Target for the curl transport: >= 0.9x. No
-- assertion.
--
--   make bench     (or: make build build/bench/raw_curl_rate && lua5.4 bench/call_rate.lua [calls] [rounds];
--                  under LuaJIT: make luajit-core, LUA_CPATH="$PWD/build/luajit/?.so;;" luajit bench/call_rate.lua)
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local socket = require "socket"
local stats = require "stats"

local CALLS = tonumber(arg and arg[1]) or 500
local ROUNDS = tonumber(arg and arg[2]) or 15
local RAW = os.getenv("RAW_CURL_RATE") or "build/bench/raw_curl_rate"
assert(proc.run("test -x " .. proc.shell_quote(RAW)), RAW .. " is missing: make build/bench/raw_curl_rate")

local srv = airlockd.start({ env = {
  SANDBOX_TENANT_LIMITS = '{"*":{"max_concurrent_exec":4,"max_sessions":20,"requests_per_minute":10000000}}' } })
local opts = { base_url = srv.url, api_key = srv.tenants.acme }
local url = srv.url .. "/v1/usage"
local curl_handle = airlock.attach("sbx_000000000000", { base_url = srv.url, api_key = opts.api_key, transport = "curl" })
local uv_handle = airlock.attach("sbx_000000000000", { base_url = srv.url, api_key = opts.api_key, transport = "uv" })

-- Each kind → calls per second and this process's CPU microseconds per call.
local function raw_rate()
  local out = proc.output(string.format("%s %s %s %d", RAW, proc.shell_quote(url), proc.shell_quote(opts.api_key), CALLS))
  local rate, cpu = out:match("rate=([%d.]+) cpu_us=([%d.]+)")
  return assert(tonumber(rate), "raw_curl_rate said: " .. out), tonumber(cpu)
end

local function timed(fn)
  local t0, c0 = socket.gettime(), os.clock()
  fn()
  local wall, cpu = socket.gettime() - t0, os.clock() - c0
  return CALLS / wall, cpu / CALLS * 1e6
end

local function curl_rate()
  return timed(function()
    for _ = 1, CALLS do curl_handle:usage() end
  end)
end

local ok_uv, luv = pcall(require, "luv")
local function uv_rate()
  local uvt = require("airlock.transport.uv").install(luv)
  local task
  local rate, cpu = timed(function()
    task = airlock.spawn(function()
      for _ = 1, CALLS do uv_handle:usage() end
    end)
    luv.run()
  end)
  assert(task.status == "done", tostring(task.error))
  assert(uvt.uninstall())
  luv.run("nowait")
  return rate, cpu
end

local kinds = { { "raw C", raw_rate }, { "curl (block)", curl_rate } }
if ok_uv then kinds[#kinds + 1] = { "uv (task)", uv_rate } end

-- a warm-up of each kind, then the rounds; each round's ratio is to that round's raw C run
for _, k in ipairs(kinds) do k[2]() end
local rates, ratios, cpus = {}, {}, {}
for round = 1, ROUNDS do
  local raw
  for _, k in ipairs(kinds) do
    local name = k[1]
    local rate, cpu = k[2]()
    raw = raw or rate
    rates[name], ratios[name], cpus[name] = rates[name] or {}, ratios[name] or {}, cpus[name] or {}
    rates[name][round], ratios[name][round], cpus[name][round] = rate, rate / raw, cpu
  end
end
airlockd.stop(srv)

local median = stats.median

print(string.format("%s, small calls (GET /v1/usage): %d rounds of %d calls per kind, medians; vs raw: the median"
  .. " of each round's ratio", type(jit) == "table" and jit.version or _VERSION, ROUNDS, CALLS))
print(string.format("%-14s %10s %8s %12s", "kind", "calls/s", "vs raw", "CPU us/call"))
for _, k in ipairs(kinds) do
  local name = k[1]
  print(string.format("%-14s %10.0f %7.2fx %12.1f", name, median(rates[name]), median(ratios[name]), median(cpus[name])))
end
