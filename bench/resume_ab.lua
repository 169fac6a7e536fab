-- luacheck: max line length 140
-- A/B of two airlockd builds' resume with memory (issue #26), e.g. main against a branch that
-- changes the resume path: both servers up at once (SANDBOX_EXEC_MODE=session), each with a
-- session whose kernel holds x = 41 (small) and, with BENCH_BIG=1, one holding ~150 MB of
-- records (225,000 dicts built in the cell), measured in interleaved rounds (A then B, then B
-- then A, ...) beside a bare `runsc run true` and a bare `runsc restore` of a Python process
-- (support.bare_runsc): only figures taken side by side mean anything on this shared host.
-- A round: pause each session (0.3 s after its last cell), then time its next cell (the
-- resume: disk mounted, sandbox restored and checked, the cell answered).
--
--   BENCH_A=/tmp/main/build/airlockd BENCH_B=build/airlockd lua5.4 bench/resume_ab.lua [rounds]
--   (defaults: A /work/main/build/airlockd, B build/airlockd, 10 rounds; each build's agent is
--   the one beside it; needs root, like airlockd)
--
-- Prints p50/p95 of each, the ratios of the p50s to the bare run and the bare restore, and
-- B/A; the load average before and after. No assertion.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local bare_runsc = require "support.bare_runsc"
local proc = require "support.proc"
local cjson = require "cjson"

local ROUNDS = math.max(2, tonumber(arg and arg[1]) or 10)
local BIG = os.getenv("BENCH_BIG") == "1"
local RECORDS = 225000
local BUILD = ('rows = [{"id": i, "name": "user-%07d" % i, "email": "user%07d@example.com" % i, "score": i * 0.37, '
  .. '"active": i % 3 == 0, "tags": ["t%d" % (i % 17), "g%d" % (i % 5)]} for i in range(N)]'):gsub("N", tostring(RECORDS))
local check, call, timed = harness.check, harness.call, harness.timed

local LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000,"max_concurrent_exec":8}}'
local function start(bin)
  return airlockd.start({ binary = bin, tenants = { bench = "bk_" .. airlockd.random_hex(16) },
    env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session" } })
end

-- A session on server s with a kernel that ran setup; returns one round: pause, then the
-- time of the cell `ask`, whose text/plain must be `want`.
local function kernel_session(s, body, setup, ask, want)
  local key = s.tenants.bench
  local status, r = call(s, "POST", "/v1/sessions", key, body)
  check(status == 201, cjson.encode(r))
  local id = r.session_id
  local kstatus, k = call(s, "POST", "/v1/sessions/" .. id .. "/kernels", key, cjson.encode({ language = "python" }))
  check(kstatus == 201, cjson.encode(k))
  local function cell(code)
    local st, c = harness.call_url(s.url, "POST", "/v1/sessions/" .. id .. "/kernels/" .. k.kernel_id .. "/execute", key,
      cjson.encode({ code = code, timeout = 60 }), 65)
    check(st == 200 and c and c.error == cjson.null, cjson.encode(c or { status = st }))
    return c
  end
  for _, code in ipairs(setup) do cell(code) end
  return function()
    proc.sleep(0.3) -- its sandbox settled, as between an agent's calls
    local st, p = harness.call_url(s.url, "POST", "/v1/sessions/" .. id .. "/pause", key, nil, 65)
    check(st == 200 and p and p.state == "paused", cjson.encode(p or { status = st }))
    return timed(function()
      local c = cell(ask)
      check(c.resumed == true and c.results[1] and c.results[1]["text/plain"] == want, cjson.encode(c))
    end)
  end
end

local stats, load_average = require("stats").p50_p95, harness.loadavg

local A = start(os.getenv("BENCH_A") or "/work/main/build/airlockd")
local B = start(os.getenv("BENCH_B") or "build/airlockd")
local ok, err = pcall(function()
  local plain = bare_runsc.runner(A, "-resume-ab")
  local bare_restore, bare_restore_stop = bare_runsc.restorer(A, "-resume-ab")
  local kinds = { "small" }
  if BIG then kinds[2] = "big" end
  local rounds = {}
  for _, which in ipairs({ "A", "B" }) do
    local s = which == "A" and A or B
    rounds[which .. " small"] = kernel_session(s, "{}", { "x = 41" }, "x + 1", "42")
    if BIG then
      rounds[which .. " big"] = kernel_session(s, cjson.encode({ memory_mb = 1024 }), { BUILD }, "len(rows)", tostring(RECORDS))
    end
  end
  local t = { bare = {}, bare_restore = {} }
  for k in pairs(rounds) do t[k] = {} end
  local load_before = load_average()
  for i = 1, ROUNDS do
    local order = i % 2 == 1 and { "A", "B" } or { "B", "A" }
    for _, kind in ipairs(kinds) do
      for _, which in ipairs(order) do
        local name = which .. " " .. kind
        t[name][#t[name] + 1] = rounds[name]()
      end
    end
    t.bare[#t.bare + 1] = timed(function() check(plain("true") == "", "bare true") end)
    t.bare_restore[#t.bare_restore + 1] = timed(function() check(bare_restore() == "42\n", "bare restore: x + 1") end)
  end
  bare_restore_stop()
  local s = {}
  for k, v in pairs(t) do s[k] = stats(v) end
  print(string.format("resume → cell, A %s, B %s: %d rounds interleaved; load average %s before, %s after",
    os.getenv("BENCH_A") or "/work/main/build/airlockd", os.getenv("BENCH_B") or "build/airlockd", ROUNDS, load_before,
    load_average()))
  print(string.format("%-58s %10s %10s", "", "p50 ms", "p95 ms"))
  local function row(label, st) print(string.format("%-58s %10.1f %10.1f", label, st.p50, st.p95)) end
  for _, kind in ipairs(kinds) do
    for _, which in ipairs({ "A", "B" }) do
      row(which .. (kind == "small" and ": paused, cell x + 1 (resume + answer)" or ": paused, cell len(rows), 150 MB"),
        s[which .. " " .. kind])
    end
  end
  row("bare runsc run true (--ignore-cgroups)", s.bare)
  row("bare runsc restore of a Python process: x + 1", s.bare_restore)
  for _, kind in ipairs(kinds) do
    for _, which in ipairs({ "A", "B" }) do
      local p50 = s[which .. " " .. kind].p50
      print(string.format("%s %s: / bare runsc run true %.2fx (goal <= %s); / bare runsc restore %.2fx", which, kind,
        p50 / s.bare.p50, kind == "small" and "1.2x" or "2.5x", p50 / s.bare_restore.p50))
    end
    print(string.format("%s: B / A %.2fx", kind, s["B " .. kind].p50 / s["A " .. kind].p50))
  end
  print(string.format("bare runsc restore / bare runsc run true: %.2fx", s.bare_restore.p50 / s.bare.p50))
end)
airlockd.stop(A)
airlockd.stop(B)
if not ok then error(err, 0) end
