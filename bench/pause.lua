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
--   bare runsc       `runsc run true` beside it (support.bare_runsc), twice: as the issue measured
--                    it (--ignore-cgroups: its threads in this process's cgroup) and in a cgroup
--                    of its own (cpu, memory, pids), as airlockd runs each sandbox. On a quiet
--                    host they are the same; on a loaded one a sandbox in a cgroup of its own
--                    gets one group's share of the CPU where runsc's threads in the root group
--                    get one share each, so both are printed and the goals are given against each
-- and, paused with memory (a session with a kernel: runsc checkpoint / restore), side by side
-- with the same bare runsc:
--   kernel pause     POST /pause of a session whose kernel holds x (small) or 150 MB
--   kernel resume    the paused session's next cell, 0.5 s after its pause (resume: disk mounted,
--                    sandbox restored into the one made ahead for its tenant at the pause, the
--                    cell answered; how many resumes found one is printed), and the same on an
--                    airlockd with SANDBOX_RESTORE_AHEAD=0 (runsc restore makes its own sandbox)
--   rebuild          what the kernel would redo without its memory: the 150 MB it holds are an
--                    agent's loaded data, records parsed from a JSON file in its workspace
--                    (json.load of ~30 MB into 225,000 dicts, ~150 MB of Python objects; the
--                    RSS it adds is printed), so rebuilding it is loading that file again
--   allocation       a cell allocating 150 MB of bytes and dropping them: not a rebuild (no agent
--                    state is a bytes object made from nothing), a floor printed beside it; the
--                    bench measured this as its "rebuild" before
--   bare restore     `runsc restore` of a bare Python process holding x, checkpointed once outside
--                    airlockd (support.bare_runsc.restorer, as the issue measured it): restored with
--                    "x + 1" on its stdin, answered, ended. runsc's own floor for a small resume:
--                    the small kernel's resume is printed against it too
--   image restore    `runsc restore` of a copy of the small kernel's own memory image (taken at
--                    its first pause), outside airlockd (support.bare_runsc.image_restorer): its
--                    agent's answer to a ping. Beside the small kernel's resume it says what of
--                    the resume is runsc restoring that sandbox and what is airlockd's; run as the
--                    plain bare runs are (--ignore-cgroups) and printed against both bare runs
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
-- the records the big kernel holds: ~150 MB of Python objects once parsed (225,000 dicts)
local RECORDS = 225000
local WRITE_DATA = ([[
import json
json.dump([{"id": i, "name": "user-%07d" % i, "email": "user%07d@example.com" % i, "score": i * 0.37,
            "active": i % 3 == 0, "tags": ["t%d" % (i % 17), "g%d" % (i % 5)]} for i in range(N)],
          open("/workspace/data.json", "w"))
]]):gsub("N", tostring(RECORDS))
local RSS_MB = "int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) // 1024"
local BUILD = "rows = json.load(open('/workspace/data.json'))"
local ALLOCATE = "c = bytes(range(256)) * (150 * 4096)\ndel c"
local cold = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session", SANDBOX_WARM_NEW = "0" } })
-- resumes that restore the usual way: no sandbox made ahead for them (SANDBOX_RESTORE_AHEAD=0)
local usual = airlockd.start({ tenants = { bench = "bk_" .. airlockd.random_hex(16) },
  env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_EXEC_MODE = "session", SANDBOX_RESTORE_AHEAD = "0" } })
local key = server.tenants.bench

local function new_session(on, body)
  on = on or server
  local status, r = call(on, "POST", "/v1/sessions", on.tenants.bench, body or "{}")
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

local function new_kernel(id, on)
  on = on or server
  local status, r = call(on, "POST", "/v1/sessions/" .. id .. "/kernels", on.tenants.bench, cjson.encode({ language = "python" }))
  check(status == 201, cjson.encode(r))
  return r.kernel_id
end

-- (a minute for the answer: writing or parsing the records takes seconds, more on a loaded host)
local function run_cell(id, kid, code, on)
  on = on or server
  local status, r = harness.call_url(on.url, "POST", "/v1/sessions/" .. id .. "/kernels/" .. kid .. "/execute", on.tenants.bench,
    cjson.encode({ code = code, timeout = 60 }), 65)
  check(status == 200 and r and r.error == cjson.null, cjson.encode(r or { status = status }))
  return r
end

local function pause_bytes(id, on)
  on = on or server
  local status, r = harness.call_url(on.url, "POST", "/v1/sessions/" .. id .. "/pause", on.tenants.bench, nil, 65)
  check(status == 200 and r and r.state == "paused", cjson.encode(r or { status = status }))
  return r.image_bytes
end

-- How many of session id's resumes went into a sandbox made ahead, of all its resumes (its log lines).
local function resumes_ahead(on, id)
  local all, ahead = 0, 0
  for line in airlockd.log(on):gmatch("session " .. id .. " resumed in [^\n]*") do
    all = all + 1
    if line:find("into one made ahead", 1, true) then ahead = ahead + 1 end
  end
  return ahead, all
end

local stats, load_average = require("stats").p50_p95, harness.loadavg

local function row(label, st)
  print(string.format("%-52s %10.1f %10.1f", label, st.p50, st.p95))
end

-- "<what> / <bare>" against both bare runs, the goal after them
local function ratios(what, p50, s, goal)
  print(string.format("%s / bare runsc run true: %.2fx; / bare in a cgroup of its own: %.2fx%s", what, p50 / s.bare.p50,
    p50 / s.bare_cg.p50, goal and (" (goal <= " .. goal .. ")") or ""))
end

local cg_root = "airlockd-bench-pause-" .. airlockd.random_hex(4)
local ok, err = pcall(function()
  check(airlockd.log(server):find("(isolation: gvisor)", 1, true), "airlockd is not on gVisor")
  local load_before = load_average()
  local plain, in_cg = bare_runsc.runner(server, "-pause"), bare_runsc.runner(server, "-pause-cg", cg_root)
  local function bare_true(runner) return function() check(runner("true") == "", "bare true") end end
  local kept = new_session()
  call(server, "POST", "/v1/sessions/" .. kept .. "/write", key, cjson.encode({ path = "f.txt", content = "kept" }))
  exec_true(kept)
  local t = { pause = {}, resume = {}, create = {}, create_cold = {}, bare = {}, bare_cg = {} }
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
    t.bare[#t.bare + 1] = timed(bare_true(plain))
    t.bare_cg[#t.bare_cg + 1] = timed(bare_true(in_cg))
  end
  local s = {}
  for k, v in pairs(t) do s[k] = stats(v) end
  print(string.format("pause and resume, files only: %d rounds interleaved; load average %s before, %s after", ROUNDS,
    load_before, load_average()))
  print(string.format("%-52s %10s %10s", "", "p50 ms", "p95 ms"))
  row("pause (sandbox running)", s.pause)
  row("paused session: exec true (resume + answer)", s.resume)
  row("create session + first exec true (spare)", s.create)
  row("create session + first exec true (no spare)", s.create_cold)
  row("bare runsc run true (--ignore-cgroups)", s.bare)
  row("bare runsc run true (in a cgroup of its own)", s.bare_cg)
  print(string.format("resume → answer / create → answer (spare): %.2fx", s.resume.p50 / s.create.p50))
  print(string.format("resume → answer / create → answer (no spare): %.2fx", s.resume.p50 / s.create_cold.p50))
  ratios("resume → answer", s.resume.p50, s)
  ratios("pause", s.pause.p50, s)

  -- with memory: a small kernel (x), and one holding ~150 MB of records parsed from its
  -- workspace (more memory than the default 256 MB: the allocation floor adds 150 MB)
  local small, big = new_session(), new_session(nil, cjson.encode({ memory_mb = 1024 }))
  local ks, kb = new_kernel(small), new_kernel(big)
  local small_usual = new_session(usual)
  local ks_usual = new_kernel(small_usual, usual)
  run_cell(small, ks, "x = 41")
  run_cell(small_usual, ks_usual, "x = 41", usual)
  run_cell(big, kb, WRITE_DATA)
  local before = tonumber(run_cell(big, kb, "import json\n" .. RSS_MB).results[1]["text/plain"])
  run_cell(big, kb, BUILD)
  local held = tonumber(run_cell(big, kb, RSS_MB).results[1]["text/plain"]) - before
  local bare_restore, bare_restore_stop = bare_runsc.restorer(server, "-pause")
  local image_restore, image_restore_stop
  local m = { pause_small = {}, resume_small = {}, pause_big = {}, resume_big = {}, rebuild = {}, allocate = {}, bare = {},
    bare_cg = {}, bare_restore = {}, image_restore = {}, resume_usual = {} }
  local bytes_small, bytes_big = 0, 0
  local load_mem = load_average()
  for _ = 1, ROUNDS do
    proc.sleep(0.3)
    m.pause_small[#m.pause_small + 1] = timed(function() bytes_small = pause_bytes(small) end)
    if not image_restore then -- (its image copied while it is paused, once)
      image_restore, image_restore_stop = bare_runsc.image_restorer(server, server.dir .. "/state/images/" .. small .. ".ckpt",
        "-pause")
    end
    -- (a paused session is resumed later, not at once: the sandbox made ahead at its pause, in
    -- ~0.15 s, is there by then; the same wait before the usual restore)
    proc.sleep(0.5)
    m.resume_small[#m.resume_small + 1] = timed(function()
      check(run_cell(small, ks, "x + 1").results[1]["text/plain"] == "42", "x + 1 after the resume")
    end)
    pause_bytes(small_usual, usual)
    proc.sleep(0.5)
    m.resume_usual[#m.resume_usual + 1] = timed(function()
      check(run_cell(small_usual, ks_usual, "x + 1", usual).results[1]["text/plain"] == "42", "x + 1 after the usual resume")
    end)
    proc.sleep(0.3)
    m.pause_big[#m.pause_big + 1] = timed(function() bytes_big = pause_bytes(big) end)
    proc.sleep(0.5)
    m.resume_big[#m.resume_big + 1] = timed(function()
      check(run_cell(big, kb, "len(rows)").results[1]["text/plain"] == tostring(RECORDS), "len(rows) after the resume")
    end)
    m.rebuild[#m.rebuild + 1] = timed(function() run_cell(big, kb, "del rows\n" .. BUILD) end)
    m.allocate[#m.allocate + 1] = timed(function() run_cell(big, kb, ALLOCATE) end)
    m.bare[#m.bare + 1] = timed(bare_true(plain))
    m.bare_cg[#m.bare_cg + 1] = timed(bare_true(in_cg))
    m.bare_restore[#m.bare_restore + 1] = timed(function() check(bare_restore() == "42\n", "bare restore: x + 1") end)
    m.image_restore[#m.image_restore + 1] = timed(function()
      local answer = image_restore()
      check(answer:find("^ ! 001"), "the restored image's agent did not answer its ping: " .. answer)
    end)
  end
  bare_restore_stop()
  image_restore_stop()
  local ms = {}
  for k, v in pairs(m) do ms[k] = stats(v) end
  print(string.format("pause and resume with memory (kernels): %d rounds interleaved; load average %s before, %s after",
    ROUNDS, load_mem, load_average()))
  print(string.format("image %.1f MB (x = 41), %.1f MB (%d records parsed from JSON: %d MB of RSS)", bytes_small / 1048576,
    bytes_big / 1048576, RECORDS, held))
  print(string.format("%-52s %10s %10s", "", "p50 ms", "p95 ms"))
  row("pause, kernel holding x", ms.pause_small)
  row("paused: cell x + 1 (resume + answer)", ms.resume_small)
  row("the same, restored the usual way (none made ahead)", ms.resume_usual)
  row("pause, kernel holding the records", ms.pause_big)
  row("paused: cell len(rows) (resume + answer)", ms.resume_big)
  row("rebuild: cell parsing the records again", ms.rebuild)
  row("floor, not a rebuild: cell allocating 150 MB of bytes", ms.allocate)
  row("bare runsc run true (--ignore-cgroups)", ms.bare)
  row("bare runsc run true (in a cgroup of its own)", ms.bare_cg)
  row("bare runsc restore of a Python process: x + 1", ms.bare_restore)
  row("bare runsc restore of the small kernel's image: ping", ms.image_restore)
  local ahead_small, all_small = resumes_ahead(server, small)
  local ahead_big, all_big = resumes_ahead(server, big)
  print(string.format("resumes into a sandbox made ahead: small kernel %d of %d, 150 MB %d of %d", ahead_small, all_small,
    ahead_big, all_big))
  ratios("resume → cell (small kernel)", ms.resume_small.p50, ms, "1.2x")
  ratios("the same, restored the usual way", ms.resume_usual.p50, ms)
  print(string.format("resume → cell (small kernel) / restored the usual way: %.2fx", ms.resume_small.p50 / ms.resume_usual.p50))
  ratios("bare runsc restore → answer", ms.bare_restore.p50, ms)
  print(string.format("resume → cell (small kernel) / bare runsc restore → answer: %.2fx",
    ms.resume_small.p50 / ms.bare_restore.p50))
  ratios("bare runsc restore of the small kernel's image → ping", ms.image_restore.p50, ms)
  print(string.format("resume → cell (small kernel) / bare runsc restore of its image → ping: %.2fx",
    ms.resume_small.p50 / ms.image_restore.p50))
  ratios("resume → cell (150 MB)", ms.resume_big.p50, ms, "2.5x")
  print(string.format("resume → cell (150 MB) / rebuilding it (parsing the records): %.2fx (goal <= 0.5x)",
    ms.resume_big.p50 / ms.rebuild.p50))
  print(string.format("resume → cell (150 MB) / allocating 150 MB of bytes (a floor, not a rebuild): %.2fx",
    ms.resume_big.p50 / ms.allocate.p50))
  print(string.format("pause of 150 MB: %.0f ms p50 (goal <= 1200 ms)", ms.pause_big.p50))
end)
bare_runsc.remove_cgroup_root(cg_root)
airlockd.stop(server)
airlockd.stop(cold)
airlockd.stop(usual)
if not ok then error(err, 0) end
