-- bench/openresty.lua at tiny sizes (BENCH_SMOKE=1: 4 concurrent commands, 100 small calls, a
-- 20-request soak), so that `make bench` does not rot: it runs to its end and prints every
-- measure, with no failed request, no session left and no crash. The figures themselves are
-- not checked (make bench prints them; timing on a shared machine means nothing here).
local proc = require "support.proc"

describe("bench/openresty.lua (smoke sizes)", function()
  it("runs and prints every measure", function()
    assert(proc.run("test -x build/bench/raw_curl_rate"), "build/bench/raw_curl_rate is missing: make build")
    local rc, out = proc.run_capture("BENCH_SMOKE=1 timeout 300 lua5.4 bench/openresty.lua")
    assert.are.equal(0, rc, out)
    for _, pattern in ipairs({
      "burst  4 x `sleep 1`:  nginx POST /run [%d.]+ s   plain%-Lua SDK spawn/poll [%d.]+ s   ratio [%d.]+"
        .. ".-, 0 failed%)",
      "worker CPU time while serving the bursts: %d+ ms",
      "ping   the worker serving the burst: +p50 [%d.]+ ms  p99 [%d.]+ ms  max [%d.]+ ms"
        .. "  %(%d+ pings, 0 failed%)",
      "rate   GET /healthz x 100.-raw libcurl %(C%) %d+/s   cosocket transport %d+/s %([%d.]+x%)"
        .. "   curl transport %d+/s",
      "soak   20 x POST /run.-20 answered 200; .-sessions left 0; crashes 0; worker restarts 0",
    }) do
      assert.is_truthy(out:find(pattern), "no line like " .. pattern .. " in:\n" .. out)
    end
  end)
end)

-- bench/kernels.lua at smoke sizes (BENCH_SMOKE=1: 3 rounds, a 100k-entry dict, 1 s idle): it
-- runs to its end and prints every measure (the figures are not checked).
describe("bench/kernels.lua (smoke sizes)", function()
  it("runs and prints every measure", function()
    local rc, out = proc.run_capture("BENCH_SMOKE=1 timeout 300 lua5.4 bench/kernels.lua")
    assert.are.equal(0, rc, out)
    for _, pattern in ipairs({
      "idle    kernel CPU over [%d.]+ s without cells: [%d.]+ ms",
      "memory  idle kernel VmRSS %d+ kB, bare python3 VmRSS %d+ kB: %+%-?[%d.]+ MB",
      "trivial cell `1 %+ 1` p50 +[%d.]+ ms   sbx:run%(\"python3 %-c pass\"%) p50 +[%d.]+ ms   ratio [%d.]+x",
      "a fresh run reloading it %(pickle%) +p50 +[%d.]+ ms   ratio [%d.]+x",
      "a fresh run reloading it %(csv%) +p50 +[%d.]+ ms   ratio [%d.]+x",
    }) do
      assert.is_truthy(out:find(pattern), "no line like " .. pattern .. " in:\n" .. out)
    end
  end)
end)
