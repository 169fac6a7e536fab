-- bench/warm.lua at smoke sizes (BENCH_SMOKE=1: 2 runs, 3 commands back to back, 2 sessions in parallel), so that
-- `make bench` does not rot: it runs to its end and prints every row of the issue's table
-- (cold path, warm path, session sandboxes and bare `runsc run` side by side) and the idle cost of a waiting
-- sandbox. The figures themselves are not checked (timing on a shared machine means nothing
-- here). Needs root and gVisor, like every server spec.
local proc = require "support.proc"

describe("bench/warm.lua (smoke sizes) #noasan", function()
  it("runs and prints every measure", function()
    local rc, out = proc.run_capture("BENCH_SMOKE=1 timeout 600 lua5.4 bench/warm.lua")
    assert.are.equal(0, rc, out)
    for _, pattern in ipairs({
      "warm sandboxes, 2 runs each, .- load average [%d.]+ [%d.]+ [%d.]+ %-> [%d.]+ [%d.]+ [%d.]+",
      "exec true [%d.]+ s apart, p50 / p95 +%d+ / %d+ +%d+ / %d+ +%d+ / %d+ +%d+ / %d+ +[%d.]+ +[%d.]+ +[%d.]+",
      "exec python3 %-c pass, p50 +%d+ +%d+ +%d+ +%d+ +[%d.]+ +[%d.]+ +[%d.]+",
      "create session %+ first exec true, p50 +%d+ +%d+ +%d+ +%d+ +[%d.]+ +[%d.]+ +[%d.]+",
      "3 x exec true back to back, total +%d+ +%d+ +%d+ +%d+ +[%d.]+ +[%d.]+ +[%d.]+",
      "host CPU ms per command %(back to back%) +%d+ +%d+ +%d+ +%- +[%d.]+ +[%d.]+ +%-",
      "commands/s, 2 sessions in parallel +[%d.]+ +[%d.]+ +[%d.]+ +%- +[%d.]+ +[%d.]+ +%-",
      "a sandbox waiting for its command %(%d+ now%): %d+ host processes, VmRSS sum [%d.]+ MB, Pss sum [%d.]+ MB, "
        .. "memory cgroup charge [%d.]+ MB",
      "a session's own sandbox, idle %(%d+ now%): %d+ host processes, VmRSS sum [%d.]+ MB, Pss sum [%d.]+ MB, "
        .. "memory cgroup charge [%d.]+ MB",
    }) do
      assert.is_truthy(out:find(pattern), "no line like " .. pattern .. " in:\n" .. out)
    end
  end)
end)
