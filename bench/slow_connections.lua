-- luacheck: max line length 140
-- airlockd's exec latency with 1,000 slow connections held open vs without (issue #8's measure:
-- at most 1.2x), side by side in one run (these machines are noisy: only ratios measured
-- together mean anything).
--
--   make bench        (or: lua5.4 bench/slow_connections.lua [runs])
--
-- Starts airlockd on 127.0.0.1 via spec/support/airlockd.lua, then alternates rounds of
-- `exec true` (and GET /healthz) without and with 1,000 slowloris clients (a header line every
-- 5 s from 127.0.0.2-21, reconnecting when cut: spec/c/slow_clients.c on one epoll loop, so the
-- attacker costs almost no CPU). Prints p50/p95 per side and the ratio of the medians. Needs
-- root (runsc), like airlockd. No assertion: it prints a table. Then the second red team's
-- flood (6,000 idle connections from 127.0.0.10-49, reopened when cut): /healthz and GET
-- /v1/sessions latency while it holds airlockd at its connection cap.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local slow_clients = require "support.slow_clients"
local fuzz = require "support.fuzz" -- its raw lua-socket client: no curl process per call
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(30, tonumber(arg and arg[1]) or 40)
local ROUNDS = 4 -- without, with, without, with, ...: drift of a busy machine hits both sides
local SLOW = 1000

local function percentile(sorted, p)
  local idx = math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))
  return sorted[idx]
end

local check = harness.check

local server
-- The second red team's flood (issue 16): 6,000 idle connections from 40 addresses (150 each,
-- under the per-address cap), each reopened as soon as it is cut, against the default cap of
-- 4,096: /healthz and an authenticated GET /v1/sessions while it holds (it was 9-20 s).
local function flood_round(key)
  local flood = slow_clients.start(server, { mode = "idle", count = 6000, addrs = 40, first = 10, reconnect = true,
    duration = 600 })
  local up = false
  local t_end = socket.gettime() + 60
  while not up and socket.gettime() < t_end do
    up = airlockd.log(server):find("closing the oldest owing their request headers", 1, true) ~= nil
    if not up then socket.sleep(0.2) end
  end
  check(up, "the flood did not reach the cap: " .. slow_clients.describe(flood.status()))
  local lat = { healthz = {}, sessions = {} }
  for _ = 1, 20 do
    local t0 = socket.gettime()
    check(fuzz.request(server, "GET", "/healthz") == 200, "healthz under the flood")
    lat.healthz[#lat.healthz + 1] = (socket.gettime() - t0) * 1000
    t0 = socket.gettime()
    check(fuzz.request(server, "GET", "/v1/sessions", key) == 200, "GET /v1/sessions under the flood")
    lat.sessions[#lat.sessions + 1] = (socket.gettime() - t0) * 1000
  end
  local st = flood.stop()
  print(string.format("flood of 6,000 idle connections from 40 addresses, reopened when cut (cap 4,096): %s",
    slow_clients.describe(st)))
  for _, name in ipairs({ "healthz", "sessions" }) do
    table.sort(lat[name])
    print(string.format("%-10s p50 %8.1fms  p95 %8.1fms  max %8.1fms", name == "sessions" and "GET list" or name,
      percentile(lat[name], 50), percentile(lat[name], 95), lat[name][#lat[name]]))
  end
end

server = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000}}' } })
local ok, err = pcall(function()
  check(airlockd.log(server):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(server))
  local key = server.tenants.bench
  local status, raw, body = fuzz.request(server, "POST", "/v1/sessions", key, "{}")
  check(status == 201, raw)
  local base = "/v1/sessions/" .. cjson.decode(body).session_id
  local samples = { exec = { quiet = {}, slow = {} }, healthz = { quiet = {}, slow = {} } }
  local function timed(list, fn)
    local t0 = socket.gettime()
    fn()
    list[#list + 1] = (socket.gettime() - t0) * 1000
  end
  local held = {}
  for round = 1, ROUNDS * 2 do
    local side = round % 2 == 1 and "quiet" or "slow"
    local slow
    if side == "slow" then
      slow = slow_clients.start(server, { mode = "headers", count = SLOW, addrs = 20, interval = 5, reconnect = true,
        duration = 600 })
      local up, st = slow.wait_for(60, function(s) return s.open >= SLOW end)
      check(up, "slow clients not held: " .. slow_clients.describe(st))
    end
    for _ = 1, math.ceil(RUNS / ROUNDS) do
      timed(samples.exec[side], function()
        local s, r = fuzz.request(server, "POST", base .. "/exec", key, '{"command":"true"}')
        check(s == 200, r)
      end)
      timed(samples.healthz[side], function()
        check(fuzz.request(server, "GET", "/healthz") == 200, "healthz")
      end)
    end
    if slow then
      local st = slow.stop()
      held[#held + 1] = slow_clients.describe(st)
    end
  end
  print(string.format("airlockd with %d slowloris connections held (header line every 5 s, cut and reopened) vs none, "
    .. "%d samples per side, rounds alternated", SLOW, #samples.exec.quiet))
  print(string.format("%-10s %12s %12s %12s %12s %8s", "", "none p50", "none p95", "slow p50", "slow p95", "ratio"))
  for _, name in ipairs({ "exec", "healthz" }) do
    local a, b = samples[name].quiet, samples[name].slow
    table.sort(a)
    table.sort(b)
    print(string.format("%-10s %10.1fms %10.1fms %10.1fms %10.1fms %7.2fx", name == "exec" and "exec true" or name,
      percentile(a, 50), percentile(a, 95), percentile(b, 50), percentile(b, 95), percentile(b, 50) / percentile(a, 50)))
  end
  print("slow clients per round: " .. table.concat(held, "; "))
  flood_round(key)
end)
airlockd.stop(server)
if not ok then error(err, 0) end
