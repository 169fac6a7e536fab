-- luacheck: max line length 140
-- Pause and resume, files only (issue #26): in one run, interleaved round by round on one
-- airlockd (SANDBOX_EXEC_MODE=session, as it comes), side by side:
--   pause            POST /pause of a session whose sandbox runs (its sandbox stopped, its disk
--                    unmounted, the state saved)
--   resume → answer  a paused session's `true` (the exec resumes it: disk mounted, sandbox booted,
--                    command run)
--   create → answer  POST /v1/sessions + the first `true` (what a resume competes with), on
--                    the same airlockd (a spare sandbox booted ahead for it) and on one without
--                    spares (SANDBOX_WARM_NEW=0: its sandbox boots then, as a resumed one's does)
--   bare runsc       `runsc run true` beside it (support.bare_runsc)
-- and, paused with memory (a session with a kernel: runsc checkpoint / restore), side by side
-- with the same bare runsc:
--   kernel pause     POST /pause of a session whose kernel holds x (small) or 150 MB
--   kernel resume    the paused session's next cell (resume: disk mounted, sandbox restored,
--                    the cell answered)
--   rebuild          the cell that makes the 150 MB again (what a resume saves)
-- and prints p50/p95 and the ratios of the p50s. This machine is shared and loaded: only figures
-- taken together mean anything (the load average is printed with them). No assertion.
--
--   lua5.4 bench/pause.lua [rounds]      BENCH_SMOKE=1: 3 rounds
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local airlockd = require "support.airlockd"
local bare_runsc = require "support.bare_runsc"
local proc = require "support.proc"
local cjson = require "cjson"

local SMOKE = os.getenv("BENCH_SMOKE") == "1"
local ROUNDS = SMOKE and 3 or math.max(5, tonumber(arg and arg[1]) or 15)

local check, call, timed = harness.check, harness.call, harness.timed

local LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000,"max_concurrent_exec":8}}'
local server = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session" } })
local cold = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session", SANDBOX_WARM_NEW = "0" } })
local key = server.tenants.bench

local function new_session(on)
  on = on or server
  local status, r = call(on, "POST", "/v1/sessions", on.tenants.bench, "{}")
  check(status == 201, cjson.encode(r))
  return r.session_id
end

local function exec_true(id, on)
  on = on or server
  local status, r = call(on, "POST", "/v1/sessions/" .. id .. "/exec", on.tenants.bench, cjson.encode({ command = "true" }))
  check(status == 200 and r.exit_code == 0, cjson.encode(r))
  return r
end

local function pause(id)
  local status, r = call(server, "POST", "/v1/sessions/" .. id .. "/pause", key)
  check(status == 200 and r.state == "paused", cjson.encode(r))
end

local function new_kernel(id)
  local status, r = call(server, "POST", "/v1/sessions/" .. id .. "/kernels", key, cjson.encode({ language = "python" }))
  check(status == 201, cjson.encode(r))
  return r.kernel_id
end

local function run_cell(id, kid, code)
  local status, r = call(server, "POST", "/v1/sessions/" .. id .. "/kernels/" .. kid .. "/execute", key,
    cjson.encode({ code = code, timeout = 60 }))
  check(status == 200 and r.error == cjson.null, cjson.encode(r))
  return r
end

local function pause_bytes(id)
  local status, r = call(server, "POST", "/v1/sessions/" .. id .. "/pause", key)
  check(status == 200 and r.state == "paused", cjson.encode(r))
  return r.image_bytes
end

local function stats(t)
  table.sort(t)
  local function at(p) return t[math.max(1, math.min(#t, math.ceil(p / 100 * #t)))] end
  return { p50 = at(50), p95 = at(95) }
end

local ok, err = pcall(function()
  check(airlockd.log(server):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor")
  local load_before = (proc.read_file("/proc/loadavg") or "?"):match("^(%S+ %S+ %S+)")
  local bare = bare_runsc.runner(server, "-pause")
  local kept = new_session()
  call(server, "POST", "/v1/sessions/" .. kept .. "/write", key, cjson.encode({ path = "f.txt", content = "kept" }))
  exec_true(kept)
  local t = { pause = {}, resume = {}, create = {}, create_cold = {}, bare = {} }
  for _ = 1, ROUNDS do
    proc.sleep(0.3) -- its sandbox is settled and waiting, as between an agent's calls
    t.pause[#t.pause + 1] = timed(function() pause(kept) end)
    t.resume[#t.resume + 1] = timed(function() check(exec_true(kept).resumed == true, "not resumed") end)
    local id
    t.create[#t.create + 1] = timed(function()
      id = new_session()
      exec_true(id)
    end)
    call(server, "DELETE", "/v1/sessions/" .. id, key)
    t.create_cold[#t.create_cold + 1] = timed(function()
      id = new_session(cold)
      exec_true(id, cold)
    end)
    call(cold, "DELETE", "/v1/sessions/" .. id, cold.tenants.bench)
    t.bare[#t.bare + 1] = timed(function() check(bare("true") == "", "bare true") end)
  end
  local s = {}
  for k, v in pairs(t) do s[k] = stats(v) end
  print(string.format("pause and resume, files only: %d rounds interleaved; load average %s before, %s after", ROUNDS,
    load_before, (proc.read_file("/proc/loadavg") or "?"):match("^(%S+ %S+ %S+)")))
  print(string.format("%-46s %10s %10s", "", "p50 ms", "p95 ms"))
  for _, row in ipairs({ { "pause", "pause (sandbox running)" }, { "resume", "paused session: exec true (resume + answer)" },
      { "create", "create session + first exec true (spare)" },
      { "create_cold", "create session + first exec true (no spare)" }, { "bare", "bare runsc run true" } }) do
    print(string.format("%-46s %10.1f %10.1f", row[2], s[row[1]].p50, s[row[1]].p95))
  end
  print(string.format("resume → answer / create → answer (spare): %.2fx", s.resume.p50 / s.create.p50))
  print(string.format("resume → answer / create → answer (no spare): %.2fx", s.resume.p50 / s.create_cold.p50))
  print(string.format("resume → answer / bare runsc run true: %.2fx", s.resume.p50 / s.bare.p50))
  print(string.format("pause / bare runsc run true: %.2fx", s.pause.p50 / s.bare.p50))

  -- with memory: a small kernel and one holding 150 MB (touched: bytes, not a lazy bytearray)
  local small, big = new_session(), new_session()
  local ks, kb = new_kernel(small), new_kernel(big)
  run_cell(small, ks, "x = 41")
  local BUILD = "b = bytes(range(256)) * (150 * 4096)"
  run_cell(big, kb, BUILD)
  local m = { pause_small = {}, resume_small = {}, pause_big = {}, resume_big = {}, rebuild = {}, bare = {} }
  local bytes_small, bytes_big = 0, 0
  for _ = 1, ROUNDS do
    proc.sleep(0.3)
    m.pause_small[#m.pause_small + 1] = timed(function() bytes_small = pause_bytes(small) end)
    m.resume_small[#m.resume_small + 1] = timed(function()
      check(run_cell(small, ks, "x + 1").results[1]["text/plain"] == "42", "x + 1 after the resume")
    end)
    proc.sleep(0.3)
    m.pause_big[#m.pause_big + 1] = timed(function() bytes_big = pause_bytes(big) end)
    m.resume_big[#m.resume_big + 1] = timed(function()
      check(run_cell(big, kb, "len(b)").results[1]["text/plain"] == tostring(150 * 1024 * 1024), "len(b) after the resume")
    end)
    m.rebuild[#m.rebuild + 1] = timed(function() run_cell(big, kb, "del b\n" .. BUILD) end)
    m.bare[#m.bare + 1] = timed(function() check(bare("true") == "", "bare true") end)
  end
  local ms = {}
  for k, v in pairs(m) do ms[k] = stats(v) end
  print(string.format("pause and resume with memory (kernels): %d rounds interleaved; image %.1f MB (x = 41), %.1f MB (150 MB held)",
    ROUNDS, bytes_small / 1048576, bytes_big / 1048576))
  print(string.format("%-46s %10s %10s", "", "p50 ms", "p95 ms"))
  for _, row in ipairs({ { "pause_small", "pause, kernel holding x" }, { "resume_small", "paused: cell x + 1 (resume + answer)" },
      { "pause_big", "pause, kernel holding 150 MB" }, { "resume_big", "paused: cell len(b) (resume + answer)" },
      { "rebuild", "cell rebuilding the 150 MB" }, { "bare", "bare runsc run true" } }) do
    print(string.format("%-46s %10.1f %10.1f", row[2], ms[row[1]].p50, ms[row[1]].p95))
  end
  print(string.format("resume → cell (small kernel) / bare runsc run true: %.2fx (goal <= 1.2x)", ms.resume_small.p50 / ms.bare.p50))
  print(string.format("resume → cell (150 MB) / bare runsc run true: %.2fx (goal <= 2.5x)", ms.resume_big.p50 / ms.bare.p50))
  print(string.format("resume → cell (150 MB) / rebuilding it: %.2fx (goal <= 0.5x)", ms.resume_big.p50 / ms.rebuild.p50))
  print(string.format("pause of 150 MB: %.0f ms p50 (goal <= 1200 ms)", ms.pause_big.p50))
end)
airlockd.stop(server)
airlockd.stop(cold)
if not ok then error(err, 0) end
