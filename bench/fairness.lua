-- luacheck: max line length 140
-- Another tenant's exec latency while one tenant runs 4 CPU burners, vs idle (issue #8 measure:
-- at most 1.5x), side by side in one run; and, to show what the per-tenant CPU weight does, the
-- same 4 burners run by the measuring tenant itself (same group, no protection).
--
--   make bench        (or: lua5.4 bench/fairness.lua [runs])
--
-- One airlockd on 127.0.0.1 (spec/support/airlockd.lua) with tenants `busy` and `calm` (8
-- commands each; the host cap is the default, 4 per CPU). Phases, in this order: idle; 4
-- burners (`while :; do :; done`, 1 CPU each by the per-command quota) of `busy`; idle again;
-- 4 burners of `calm` itself. In each phase `calm` times up to 15 execs (at least 3, fewer
-- when the burners' minute runs short) of `true` and of `python3 -c 'sum(range(10**6))'` (a
-- CPU-bound command) over lua-socket. Ratios are p50
-- and p95 against the mean of the two idle phases. The machine's other load shows in every
-- phase alike. Needs root (runsc). No assertion: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local fuzz = require "support.fuzz"
local http_client = require "support.http_client"
local proc = require "support.proc"
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(3, tonumber(arg and arg[1]) or 15)
local BURN_SECONDS = 60 -- each burner's own timeout (the most an exec may have); a phase ends before

local check = harness.check

local function percentile(sorted, p)
  return sorted[math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))]
end

-- Up to RUNS execs of command, fewer when the phase's time is up (at least 3).
local function measure(server, key, id, command, deadline)
  local t = {}
  for i = 1, RUNS do
    if i > 3 and socket.gettime() > deadline then break end
    local body = cjson.encode({ command = command })
    local t0 = socket.gettime()
    local status, raw, answer = fuzz.raw(server, table.concat({ "POST /v1/sessions/" .. id .. "/exec HTTP/1.1", "Host: 127.0.0.1",
      "Connection: close", "X-API-Key: " .. key, "Content-Type: application/json", "Content-Length: " .. #body, "", body }, "\r\n"), 120)
    t[i] = (socket.gettime() - t0) * 1000
    check(status == 200 and cjson.decode(answer).exit_code == 0,
      string.format("exec of %s after %.1f s: %s", command, t[i] / 1000, tostring(raw)))
  end
  table.sort(t)
  return { p50 = percentile(t, 50), p95 = percentile(t, 95), n = #t }
end

local COMMANDS = { { "true", "true" }, { "python3 CPU", "python3 -c 'sum(range(10**6))'" } }

local tenants = { busy = "bk_" .. airlockd.random_hex(16), calm = "ck_" .. airlockd.random_hex(16) }
local server = airlockd.start({ tenants = tenants,
  env = { SANDBOX_TENANT_LIMITS = '{"*":{"max_concurrent_exec":8,"requests_per_minute":100000}}' } })
local ok, err = pcall(function()
  check(airlockd.log(server):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor:\n" .. airlockd.log(server))
  local calm = http_client.create(server, tenants.calm).json.session_id
  local busy = http_client.create(server, tenants.busy).json.session_id

  -- Commands the tenant of key has running (GET /v1/usage): cold or handed a warm sandbox alike.
  local function running(key)
    local body = http_client.request(server, "GET", "/v1/usage", { key = key }).body
    return tonumber(body:match('"commands_running":(%d+)')) or 0
  end

  local function phase(burner_key, burner_id)
    local jobs = {}
    if burner_key then
      for i = 1, 4 do
        jobs[i] = http_client.exec_async(server, burner_key, burner_id, "while :; do :; done", BURN_SECONDS)
      end
      check(proc.wait_until(30, function() return running(burner_key) >= 4 end, 0.1), "burners did not start")
      socket.sleep(2) -- past their boots: only the burning is left
    end
    local r = {}
    local t0 = socket.gettime()
    for i, c in ipairs(COMMANDS) do
      r[c[1]] = measure(server, tenants.calm, calm, c[2], t0 + i * (BURN_SECONDS - 20) / #COMMANDS)
    end
    check(not burner_key or running(burner_key) >= 4,
      string.format("the phase (%.0f s) outlasted the burners", socket.gettime() - t0))
    for _, j in ipairs(jobs) do
      local res = j.wait(BURN_SECONDS + 30)
      check(res and res.timed_out, "a burner did not run to its timeout")
    end
    return r
  end

  local idle1 = phase()
  local other = phase(tenants.busy, busy)
  local idle2 = phase()
  local same = phase(tenants.calm, calm)

  print(string.format("exec latency of tenant `calm`, %d runs per command and phase (ms; ratios vs the mean idle)", RUNS))
  print(string.format("%-14s %-30s %4s %9s %9s %8s %8s", "command", "phase", "runs", "p50", "p95", "x p50", "x p95"))
  for _, c in ipairs(COMMANDS) do
    local name = c[1]
    local base50 = (idle1[name].p50 + idle2[name].p50) / 2
    local base95 = (idle1[name].p95 + idle2[name].p95) / 2
    local rows = { { "idle", idle1 }, { "4 burners of another tenant", other }, { "idle again", idle2 },
      { "4 burners of calm itself", same } }
    for _, row in ipairs(rows) do
      local m = row[2][name]
      print(string.format("%-14s %-30s %4d %9.1f %9.1f %8.2f %8.2f", name, row[1], m.n, m.p50, m.p95, m.p50 / base50,
        m.p95 / base95))
    end
  end
  print("(the issue's measure: `4 burners of another tenant` x p50 <= 1.5)")
end)
airlockd.stop(server)
if not ok then
  io.stderr:write("bench failed: ", tostring(err), "\n")
  os.exit(1)
end
