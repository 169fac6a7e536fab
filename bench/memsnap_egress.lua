-- luacheck: max line length 140
-- What egress costs a memory snapshot and its fork (issue 26), side by side in one run,
-- interleaved (these machines are noisy: only figures measured together mean anything). Two
-- sessions whose Python kernel holds the same state (~10 MB of strings), one with egress rules
-- (a loopback stand-in upstream, support.egress), one without:
--   1. POST /v1/sessions/{id}/snapshots {"memory": true} of each;
--   2. a session from each snapshot until its kernel answers with the state (create + one cell;
--      the egress fork's create makes its own namespace pair and proxy listener);
--   3. for the egress fork, a command that goes out through its proxy to the allowed host.
-- p50/p95 over RUNS rounds, in milliseconds, the ratios of the medians, and the load average.
--
--   lua5.4 bench/memsnap_egress.lua [runs]      (needs root, like airlockd)
-- No assertion anywhere: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local stats = require "stats"
local egress = require "support.egress"
local cjson = require "cjson"

local RUNS = math.max(3, tonumber(arg and arg[1]) or 5)
local BUILD = "data = [str(i) * 4 for i in range(200000)]\nx = 41"
local CHECK = "x + len(data) - 200000 + 1"

local call, timed, summary = harness.call, harness.timed, stats.p50_p95

local ctx = egress.start({ env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WORKSPACE_QUOTA_MB = "64", SANDBOX_WARM_NEW = "0",
  SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000,"max_snapshots":1000,"max_snapshot_mb":100000}}' } })
local s, key = ctx.server, ctx.key

local function session(body) return harness.session(s, key, body) end
local function cell(sid, kid, code) return harness.cell(s, key, sid, kid, code) end

local function origin(body)
  local sid = session(body)
  local status, res = call(s, "POST", "/v1/sessions/" .. sid .. "/kernels", key, '{"language": "python"}')
  harness.check(status == 201, "kernel: " .. tostring(status))
  cell(sid, res.kernel_id, BUILD)
  return sid, res.kernel_id
end

local plain, kid = origin()
local with_egress, ekid = origin('{"egress": ["sink.test"]}')
local load_before = harness.loadavg()
local snap = { plain = {}, egress = {} }
local fork = { plain = {}, egress = {} }
local out = {}
local bytes = {}
for i = 1, RUNS do
  for _, which in ipairs(i % 2 == 1 and { "plain", "egress" } or { "egress", "plain" }) do
    local sid, k = which == "plain" and plain or with_egress, which == "plain" and kid or ekid
    local ms, st, body = timed(function()
      return call(s, "POST", "/v1/sessions/" .. sid .. "/snapshots", key, '{"memory": true}')
    end)
    harness.check(st == 201 and body.memory == true, "memory snapshot: " .. tostring(st) .. " " .. cjson.encode(body))
    snap[which][i], bytes[which] = ms, body.memory_bytes
    local forked
    fork[which][i] = timed(function()
      forked = session(cjson.encode({ from_snapshot = body.snapshot_id }))
      local res = cell(forked, k, CHECK)
      harness.check(res.results[1]["text/plain"] == "42", "fork's state: " .. cjson.encode(res))
    end)
    if which == "egress" then
      out[i] = timed(function()
        local probe = egress.probe(s, key, forked, { { op = "connect", target = "sink.test:443" } })
        harness.check(probe[1].status == 200, "fork's egress: " .. cjson.encode(probe))
      end)
    end
    call(s, "DELETE", "/v1/sessions/" .. forked, key)
    call(s, "DELETE", "/v1/snapshots/" .. body.snapshot_id, key)
  end
end
local load_after = harness.loadavg()
egress.stop(ctx)

local sp, se, fp, fe, o = summary(snap.plain), summary(snap.egress), summary(fork.plain), summary(fork.egress), summary(out)
print(string.format("memory snapshots with and without egress, %d rounds interleaved (ms; a Python kernel holding ~10 MB)", RUNS))
print(string.format("  %-48s p50 %7.1f  p95 %7.1f   (image %.1f MB)", "memory snapshot, no egress", sp.p50, sp.p95, bytes.plain / 1048576))
print(string.format("  %-48s p50 %7.1f  p95 %7.1f   (image %.1f MB)", "memory snapshot, egress", se.p50, se.p95, bytes.egress / 1048576))
print(string.format("  %-48s p50 %7.1f  p95 %7.1f", "fork until its kernel answers, no egress", fp.p50, fp.p95))
print(string.format("  %-48s p50 %7.1f  p95 %7.1f", "fork until its kernel answers, egress", fe.p50, fe.p95))
print(string.format("  %-48s p50 %7.1f  p95 %7.1f", "egress fork: a command through its proxy", o.p50, o.p95))
print(string.format("  ratios of medians, egress / none: snapshot %.2f×, fork %.2f×", se.p50 / sp.p50, fe.p50 / fp.p50))
print(string.format("  load average before %s, after %s", load_before, load_after))
