-- luacheck: max line length 140
-- What a memory snapshot saves (issue 26 item 3), side by side in one run, interleaved (these
-- machines are noisy: only figures measured together mean anything):
--   1. POST /v1/sessions/{id}/snapshots {"memory": true} of a session whose Python kernel holds
--      the state below (its image's size printed), beside a files-only snapshot of it;
--   2. a session from that memory snapshot until its kernel answers with the state (create +
--      one cell), beside rebuilding it: a new session, a kernel, the cell that builds it;
-- p50/p95 over RUNS rounds each, in milliseconds, and the ratios of the medians.
--
--   lua5.4 bench/memsnap.lua [runs [work]]      (needs root, like airlockd; work: hashes per item, 8)
-- No assertion anywhere: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local stats = require "stats"
local airlockd = require "support.airlockd"
local cjson = require "cjson"

local RUNS = math.max(3, tonumber(arg and arg[1]) or 5)
-- the state: ~40 MB of strings, each WORK hashes deep (WORK sets how dear it is to rebuild)
local WORK = math.max(1, tonumber(arg and arg[2]) or 8)
local BUILD = "import hashlib\ndef deep(i):\n  h = str(i).encode()\n  for _ in range(" .. WORK .. "):\n"
  .. "    h = hashlib.sha256(h).digest()\n  return h.hex()\ndata = [deep(i) for i in range(300000)]"
local CHECK = "len(data)"

local call, timed, summary = harness.call, harness.timed, stats.p50_p95

local s = airlockd.start({ env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WORKSPACE_QUOTA_MB = "64", SANDBOX_WARM_NEW = "0",
  SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000,"max_snapshots":1000,"max_snapshot_mb":100000}}' }, wait = 60 })
local key = s.tenants.acme

local function session(body) return harness.session(s, key, body) end
local function cell(sid, kid, code) return harness.cell(s, key, sid, kid, code) end
local function kernel(sid) return harness.kernel(s, key, sid) end

local origin = session()
local kid = kernel(origin)
cell(origin, kid, BUILD)

local snap_mem, snap_files, fork, rebuild = {}, {}, {}, {}
local mem_bytes
for i = 1, RUNS do
  local ms, st, body = timed(function()
    return call(s, "POST", "/v1/sessions/" .. origin .. "/snapshots", key, '{"memory": true}')
  end)
  harness.check(st == 201 and body.memory == true, "memory snapshot: " .. tostring(st) .. " " .. cjson.encode(body))
  snap_mem[i], mem_bytes = ms, body.memory_bytes
  local id = body.snapshot_id
  local ms2, st2, body2 = timed(function() return call(s, "POST", "/v1/sessions/" .. origin .. "/snapshots", key, "{}") end)
  harness.check(st2 == 201, "snapshot: " .. tostring(st2))
  snap_files[i] = ms2
  local forked
  fork[i] = timed(function()
    forked = session(cjson.encode({ from_snapshot = id }))
    cell(forked, kid, CHECK)
  end)
  local fresh
  rebuild[i] = timed(function()
    fresh = session()
    cell(fresh, kernel(fresh), BUILD .. "\n" .. CHECK)
  end)
  for _, sid in ipairs({ forked, fresh }) do call(s, "DELETE", "/v1/sessions/" .. sid, key) end
  for _, snap in ipairs({ id, body2.snapshot_id }) do call(s, "DELETE", "/v1/snapshots/" .. snap, key) end
end
airlockd.stop(s)

local m, f, k, r = summary(snap_mem), summary(snap_files), summary(fork), summary(rebuild)
print(string.format("memory snapshots, %d rounds interleaved (ms; a Python kernel holding ~40 MB, %d hashes per item)", RUNS, WORK))
print(string.format("  %-52s p50 %7.1f  p95 %7.1f   (image %.1f MB)", "memory snapshot", m.p50, m.p95, mem_bytes / 1048576))
print(string.format("  %-52s p50 %7.1f  p95 %7.1f", "files-only snapshot of the same session", f.p50, f.p95))
print(string.format("  %-52s p50 %7.1f  p95 %7.1f", "session from the memory snapshot, first cell", k.p50, k.p95))
print(string.format("  %-52s p50 %7.1f  p95 %7.1f", "new session + kernel + rebuilding the state", r.p50, r.p95))
print(string.format("  ratios of medians: memory / files-only snapshot %.2f×, fork / rebuild %.2f×", m.p50 / f.p50, k.p50 / r.p50))
