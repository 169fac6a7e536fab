-- luacheck: max line length 160
-- Connections that cannot starve airlockd (issue 16, deliverable 1): the red team's flood, scaled
-- down. Idle connections from 40 loopback addresses, each under the per-address cap, together
-- far over the total cap (and its listen queue), each reopened as soon as it is cut. The flood
-- must reach the cap (airlockd says it evicts; its descriptors show the connections held), and
-- while it holds, /healthz and an authenticated request are answered before a generous deadline.
-- No latency is asserted: it is printed. The flood comes from 127.0.0.10-49
-- (spec/support/slow_clients.lua), the spec's own requests from 127.0.0.1. Loopback only.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local slow_clients = require "support.slow_clients"
local proc = require "support.proc"

local q = proc.shell_quote

local CAP = 256            -- SANDBOX_MAX_CONNECTIONS
local EVICT_AT = CAP - 16  -- a 16th below the cap (src/server/http/server.c, evict_at)
local ADDRS, PER_ADDR = 40, 40 -- 1,600 connections: six times the cap (the red team's 6,000 were 1.5 times 4,096)

local function open_fds(server)
  return tonumber(proc.output("ls /proc/" .. server.pid .. "/fd | wc -l"))
end

-- curl from 127.0.0.1 with a generous deadline: status code and seconds taken.
local function timed_get(server, path, key)
  local out = proc.output(string.format("curl -s -o /dev/null -w '%%{http_code} %%{time_total}' --max-time 20 %s %s",
    key and ("-H " .. q("X-API-Key: " .. key)) or "", q(server.url .. path)))
  local code, secs = out:match("^(%d+) ([%d.]+)")
  return tonumber(code), tonumber(secs)
end

describe("airlockd under a flood of idle connections from many addresses", function()
  it("evicts the oldest idle ones at the cap and keeps answering /healthz and authenticated requests", function()
    local server = airlockd.start({ env = { SANDBOX_MAX_CONNECTIONS = tostring(CAP) } })
    local flood
    local ok, err = pcall(function()
      local base = open_fds(server)
      flood = slow_clients.start(server, { mode = "idle", count = ADDRS * PER_ADDR, addrs = ADDRS, first = 10,
        reconnect = true, duration = 60 })
      -- the cap is reached: airlockd starts evicting (it says so once a minute)
      local reached = proc.wait_until(30, function()
        return airlockd.log(server):find("connections open on a listening socket: closing the oldest", 1, true) ~= nil
      end, 0.2)
      assert.is_true(reached, "no eviction: " .. slow_clients.describe(flood.status()) .. "\n" .. airlockd.log(server))
      local most, answered = 0, {}
      for _ = 1, 5 do
        most = math.max(most, open_fds(server) - base)
        local code, secs = timed_get(server, "/healthz")
        assert.are.equal(200, code)
        answered[#answered + 1] = string.format("healthz %.3fs", secs)
        code, secs = timed_get(server, "/v1/sessions", server.tenants.acme)
        assert.are.equal(200, code)
        answered[#answered + 1] = string.format("sessions %.3fs", secs)
        most = math.max(most, open_fds(server) - base)
      end
      local st = flood.stop()
      flood = nil
      print(string.format("flood of %d idle connections (cap %d): %s; airlockd held up to %d; answered: %s",
        ADDRS * PER_ADDR, CAP, slow_clients.describe(st), most, table.concat(answered, ", ")))
      -- the flood held the table at the cap while the requests were answered
      assert.truthy(most >= EVICT_AT, "airlockd held at most " .. most .. " connections")
      -- and it was cut and reopened all along, as the red team's was
      assert.truthy(st.connects > ADDRS * PER_ADDR and st.cut > 0, slow_clients.describe(st))
    end)
    if flood then flood.stop() end
    airlockd.stop(server)
    assert(ok, err)
  end)
end)
