-- luacheck: max line length 140
-- What a files-only snapshot costs (issue 26: "files-only snapshot of a 100 MB workspace ≤ 1 s"),
-- side by side in one run, interleaved (these machines are noisy: only figures measured
-- together mean anything):
--   1. POST /v1/sessions/{id}/snapshots of a session holding 100 MB of files (random: nothing
--      to skip), and of an empty one;
--   2. POST /v1/sessions {"from_snapshot"} of that 100 MB snapshot, beside a plain create;
-- p50/p95 over RUNS rounds each, in milliseconds, and the ratios of the medians.
--
--   lua5.4 bench/snapshots.lua [runs]      (needs root, like airlockd)
-- No assertion anywhere: it prints a table.
package.path = "spec/?.lua;" .. package.path
local airlockd = require "support.airlockd"
local fuzz = require "support.fuzz" -- its raw lua-socket client: no curl process per call
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(3, tonumber(arg and arg[1]) or 10)

local function percentile(sorted, p)
  return sorted[math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))]
end

local function summary(t)
  table.sort(t)
  return { p50 = percentile(t, 50), p95 = percentile(t, 95) }
end

local function call(server, method, path, key, body)
  local status, raw, rbody = fuzz.request(server, method, path, key, body)
  assert(status, "no answer: " .. tostring(raw))
  local ok, decoded = pcall(cjson.decode, rbody or "")
  return status, ok and decoded or rbody
end

local function timed(fn)
  local t0 = socket.gettime()
  local a, b = fn()
  return (socket.gettime() - t0) * 1000, a, b
end

local s = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "256", SANDBOX_DISK_TOTAL_MB = "8192", SANDBOX_WARM_NEW = "0",
  SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000,"max_snapshots":1000,"max_snapshot_mb":100000}}' } })
local key = s.tenants.acme
local function session()
  local status, body = call(s, "POST", "/v1/sessions", key, "{}")
  assert(status == 201, "create: " .. tostring(status))
  return body.session_id
end
local full, empty = session(), session()
local status, res = call(s, "POST", "/v1/sessions/" .. full .. "/exec", key,
  cjson.encode({ command = "head -c 100000000 /dev/urandom > data && sync && du -sm data", timeout_seconds = 60 }))
assert(status == 200 and res.exit_code == 0, "fill: " .. cjson.encode(res))
call(s, "POST", "/v1/sessions/" .. empty .. "/exec", key, cjson.encode({ command = "true" }))

local snap_full, snap_empty, fork, plain = {}, {}, {}, {}
local bytes
for i = 1, RUNS do
  local ms, st, body = timed(function() return call(s, "POST", "/v1/sessions/" .. full .. "/snapshots", key, "{}") end)
  assert(st == 201, "snapshot: " .. tostring(st) .. " " .. cjson.encode(body))
  snap_full[i], bytes = ms, body.bytes
  local id = body.snapshot_id
  local ms2, st2, body2 = timed(function() return call(s, "POST", "/v1/sessions/" .. empty .. "/snapshots", key, "{}") end)
  assert(st2 == 201, "snapshot: " .. tostring(st2))
  snap_empty[i] = ms2
  local ms3, st3, body3 = timed(function() return call(s, "POST", "/v1/sessions", key, cjson.encode({ from_snapshot = id })) end)
  assert(st3 == 201, "fork: " .. tostring(st3) .. " " .. cjson.encode(body3))
  fork[i] = ms3
  local ms4, st4, body4 = timed(function() return call(s, "POST", "/v1/sessions", key, "{}") end)
  assert(st4 == 201, "create: " .. tostring(st4))
  plain[i] = ms4
  for _, sid in ipairs({ body3.session_id, body4.session_id }) do call(s, "DELETE", "/v1/sessions/" .. sid, key) end
  for _, snap in ipairs({ id, body2.snapshot_id }) do call(s, "DELETE", "/v1/snapshots/" .. snap, key) end
end
airlockd.stop(s)

local f, e, k, p = summary(snap_full), summary(snap_empty), summary(fork), summary(plain)
print(string.format("snapshots, %d rounds interleaved (ms; a 256 MB workspace disk)", RUNS))
print(string.format("  %-44s p50 %7.1f  p95 %7.1f   (snapshot %.1f MB)", "snapshot, 100 MB of files", f.p50, f.p95, bytes / 1048576))
print(string.format("  %-44s p50 %7.1f  p95 %7.1f", "snapshot, empty workspace", e.p50, e.p95))
print(string.format("  %-44s p50 %7.1f  p95 %7.1f", "new session from the 100 MB snapshot", k.p50, k.p95))
print(string.format("  %-44s p50 %7.1f  p95 %7.1f", "new empty session", p.p50, p.p95))
print(string.format("  ratios of medians: 100 MB snapshot / empty snapshot %.2f×, fork / plain create %.2f×; goal: 100 MB ≤ 1000 ms: %s",
  f.p50 / e.p50, k.p50 / p.p50, f.p50 <= 1000 and "met" or "NOT met"))
