-- luacheck: max line length 140
-- airlockd's egress, side by side in one run (these machines are noisy: only ratios measured
-- together mean anything):
--
--   make bench        (or: lua5.4 bench/egress.lua [runs])
--
-- 1. Exec latency of `true` in a session with egress (a fresh namespace pair, a proxy
--    listener, runsc --network=sandbox) vs one without (--network=none), interleaved.
-- 2. One tunnel, 100 MB over HTTPS from the loopback upstream (spec/support/egress_upstream.py)
--    with curl on the host: through the proxy (entered in the sandbox's proxy-side namespace,
--    see bench/egress_tunnel.py) vs direct, alternating; and, for reference, the same download
--    by curl inside the sandbox (gVisor's network stack and the 1-CPU limit included).
-- Needs root (runsc, namespaces), like airlockd. No assertion anywhere: it prints a table.
package.path = "spec/?.lua;" .. package.path
local egress = require "support.egress"
local http_client = require "support.http_client"
local proc = require "support.proc"
local socket = require "socket"
local cjson = require "cjson"

local RUNS = math.max(10, tonumber(arg and arg[1]) or 20)
local MB = 100

local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  return s[math.ceil(#s / 2)]
end

local ctx = egress.start()
local ok, err = pcall(function()
  local server, key = ctx.server, ctx.key
  local plain = egress.session(server, key, {})
  local net = egress.session(server, key, { "pypi" })

  -- 1. exec latency
  local t_plain, t_net = {}, {}
  local function timed(sid)
    local t0 = socket.gettime()
    local r = egress.exec(server, key, sid, "true")
    assert(r.exit_code == 0, r.output)
    return (socket.gettime() - t0) * 1000
  end
  timed(plain)
  timed(net)
  for i = 1, RUNS do
    if i % 2 == 0 then
      t_plain[#t_plain + 1] = timed(plain)
      t_net[#t_net + 1] = timed(net)
    else
      t_net[#t_net + 1] = timed(net)
      t_plain[#t_plain + 1] = timed(plain)
    end
  end
  local p_plain, p_net = median(t_plain), median(t_net)
  print(string.format("egress bench (%d runs each, interleaved)", RUNS))
  print(string.format("  exec `true`   without egress p50 %6.0f ms   with egress p50 %6.0f ms   ratio %.2f",
    p_plain, p_net, p_net / p_plain))

  -- 2. one tunnel, 100 MB over HTTPS
  local pass = egress.exec(server, key, net, "echo $HTTPS_PROXY").stdout:match("^http://[^:]+:(%x+)@")
  local hold = http_client.exec_async(server, key, net, "sleep 55", 55)
  local listening = proc.wait_until(20, function()
    return proc.run("ls -l /proc/" .. server.pid .. "/fd | grep -q 'net:' && ls -l /proc/" .. server.pid ..
      "/fd | grep -c net: | grep -q 2")
  end)
  assert(listening, "the egress sandbox did not start")
  local out = proc.output(string.format("python3 bench/egress_tunnel.py %d %s %s %s %s %d 3 2>&1", server.pid, net, pass,
    ctx.up.https, proc.shell_quote(ctx.up.ca), MB))
  local tput = cjson.decode(out:match("{\"direct.*}") or error("egress_tunnel.py: " .. out))
  local d, p = median(tput.direct), median(tput.proxy)
  print(string.format("  %d MB HTTPS   direct %6.0f MB/s   through the proxy %6.0f MB/s   ratio %.2f   (3 each, alternating)",
    MB, d, p, p / d))
  hold.wait(90)
  local r = egress.exec(server, key, net, string.format("curl -sS -o /dev/null -w '%%{speed_download}' https://pypi.org/big/%d", MB), 60)
  local inside = (tonumber(r.stdout) or 0) / 1e6
  print(string.format("  %d MB HTTPS   curl inside the sandbox through the proxy %6.0f MB/s   (vs direct on the host: %.2f)",
    MB, inside, inside / d))
end)
egress.stop(ctx)
if not ok then error(err, 0) end
