-- luacheck: max line length 160
-- Red team for egress (issue 12, deliverable 5; the other attacks are in redteam_spec.lua):
-- every attack runs from inside a real gVisor sandbox of a session with egress, and each test
-- asserts what the attacker gets and the event the proxy logged (when the attempt reaches the
-- proxy). Network rule: the host only ever talks to loopback; the non-loopback targets are
-- TEST-NET addresses tried from inside sandboxes, which have no route to them (asserted).
-- Lua 5.1-compatible.
local cjson = require "cjson"
local egress = require "support.egress"
local http_client = require "support.http_client"
local proc = require "support.proc"

describe("red team: egress attacks from inside the sandbox", function()
  local ctx, server, key, sid

  local function probe(steps, id, timeout)
    return (egress.probe(server, key, id or sid, steps, timeout))
  end

  -- runs steps and returns their results and the events they added to the session's log
  -- (want: the events to wait for, a tunnel's logged when it closes)
  local function attempt(steps, id, want)
    local before = #egress.events(server, key, id or sid, 1000)
    local results = probe(steps, id)
    return results, egress.new_events(server, key, id or sid, before, want)
  end

  local function pass_of(id)
    local env = egress.exec(server, key, id, "echo $HTTPS_PROXY").stdout
    return assert(env:match("^http://" .. id .. ":(%x+)@"), env)
  end

  lazy_setup(function()
    ctx = egress.start({ env = { SANDBOX_EGRESS_IDLE_SECONDS = "3" } })
    server, key = ctx.server, ctx.key
    sid = egress.session(server, key, { "pypi", "sink.test", "refused.test", "loopback.test", "metadata.test",
      "private.test", "v6loopback.test", "mapped.test", "mixed.test", "cgnat.test", "nxdomain.test", "*.wild.test", "10.9.8.7" })
  end)

  lazy_teardown(function()
    if ctx then egress.stop(ctx) end
  end)

  it("cannot CONNECT to an IP literal, nor to an IP the rules name when it is private", function()
    local r, ev = attempt({
      { op = "connect", target = "203.0.113.5:443" }, { op = "connect", target = "[::1]:443" },
      { op = "connect", target = "127.0.0.1:443" }, { op = "connect", target = "10.9.8.7:443" },
    })
    assert.are.same({ { status = 403 }, { status = 403 }, { status = 403 }, { status = 403 } }, r)
    assert.are.same({ "203.0.113.5", "host not on allowlist" }, { ev[1].host, ev[1].reason })
    assert.are.same({ "::1", "host not on allowlist" }, { ev[2].host, ev[2].reason })
    assert.are.same({ "127.0.0.1", "host not on allowlist" }, { ev[3].host, ev[3].reason })
    assert.are.same({ "10.9.8.7", "resolves to a private or reserved address", { "10.9.8.7" } }, { ev[4].host, ev[4].reason, ev[4].ips })
    for _, e in ipairs(ev) do assert.are.same({ "deny", 443, sid, "acme" }, { e.decision, e.port, e.session, e.tenant }) end
  end)

  it("cannot CONNECT to ports 22, 80 or 8443, even of an allowed host", function()
    local r, ev = attempt({
      { op = "connect", target = "pypi.org:22" }, { op = "connect", target = "pypi.org:80" }, { op = "connect", target = "pypi.org:8443" },
    })
    assert.are.same({ { status = 403 }, { status = 403 }, { status = 403 } }, r)
    for i, port in ipairs({ 22, 80, 8443 }) do
      assert.are.same({ decision = "deny", host = "pypi.org", port = port, reason = "port " .. port .. " not allowed",
        session = sid, tenant = "acme", ts = ev[i].ts, duration_ms = ev[i].duration_ms }, ev[i])
    end
  end)

  it("cannot reach a host off the rules or a wildcard's apex; a wildcard's subdomain passes the rules", function()
    local r, ev = attempt({
      { op = "connect", target = "evil.example:443" }, { op = "connect", target = "wild.test:443" },
      { op = "connect", target = "PyPI.org.evil.example:443" }, { op = "connect", target = "a.b.wild.test:443" },
    })
    assert.are.same({ { status = 403 }, { status = 403 }, { status = 403 }, { status = 502 } }, r)
    assert.are.same({ "evil.example", "host not on allowlist" }, { ev[1].host, ev[1].reason })
    assert.are.same({ "wild.test", "host not on allowlist" }, { ev[2].host, ev[2].reason })
    assert.are.same({ "pypi.org.evil.example", "host not on allowlist" }, { ev[3].host, ev[3].reason })
    -- allowed by *.wild.test; the test DNS has no such name
    assert.are.same({ "a.b.wild.test", "DNS lookup failed" }, { ev[4].host, ev[4].reason })
  end)

  it("cannot reach names that resolve to loopback, metadata, private, CGNAT, ::1 or ::ffff:127.0.0.1 (rebinding)", function()
    local names = { "loopback.test", "metadata.test", "private.test", "cgnat.test", "v6loopback.test", "mapped.test", "mixed.test", "Loopback.Test." }
    local steps = {}
    for i, n in ipairs(names) do steps[i] = { op = "connect", target = n .. ":443" } end
    local r, ev = attempt(steps)
    local ips = { { "127.0.0.1" }, { "169.254.169.254" }, { "10.1.2.3" }, { "100.64.0.1" }, { "::1" }, { "127.0.0.1" },
      { "203.0.113.9", "127.0.0.1" }, { "127.0.0.1" } }
    for i, n in ipairs(names) do
      assert.are.same({ status = 403 }, r[i], n)
      assert.are.same({ decision = "deny", host = (n:lower():gsub("%.$", "")), port = 443, session = sid, tenant = "acme",
        reason = "resolves to a private or reserved address", ips = ips[i], ts = ev[i].ts, duration_ms = ev[i].duration_ms }, ev[i])
    end
    -- a name the DNS does not know, and an upstream that refuses, are 502s
    r, ev = attempt({ { op = "connect", target = "nxdomain.test:443" }, { op = "connect", target = "refused.test:443" } })
    assert.are.same({ { status = 502 }, { status = 502 } }, r)
    assert.are.same({ "DNS lookup failed" }, { ev[1].reason })
    assert.are.same({ "upstream connection failed", { "127.0.0.1" } }, { ev[2].reason, ev[2].ips })
  end)

  it("has no route around the proxy: direct TCP and UDP to a public address, to the proxy's host and to the host fail at once", function()
    local host_ip = proc.output("ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1"):gsub("%s+$", "")
    local steps = {
      { op = "tcp", host = "198.51.100.7", port = 443 }, { op = "udp", host = "198.51.100.7", port = 53 },
      { op = "tcp", host = "10.0.2.0", port = 22 }, { op = "tcp", host = "10.0.2.0", port = 443 },
      { op = "udp", host = "10.0.2.0", port = 53 }, { op = "tcp", host = "127.0.0.1", port = tonumber(server.port) },
      { op = "tcp", host = "169.254.169.254", port = 80 },
    }
    if host_ip ~= "" then steps[#steps + 1] = { op = "tcp", host = host_ip, port = tonumber(server.port) } end
    local r, ev = attempt(steps)
    assert.are.same({ result = "EHOSTUNREACH", fast = true }, r[1])
    assert.are.same({ send = "EHOSTUNREACH", recv = "timeout" }, r[2])
    assert.are.same({ result = "ECONNREFUSED", fast = true }, r[3]) -- the proxy's side listens on 3128 only
    assert.are.same({ result = "ECONNREFUSED", fast = true }, r[4])
    assert.are_not.equal("answer", r[5].recv)                    -- no DNS server there
    assert.are.same({ result = "ECONNREFUSED", fast = true }, r[6]) -- gVisor's own loopback
    assert.are.same({ result = "EHOSTUNREACH", fast = true }, r[7])
    if r[8] then assert.are.same({ result = "EHOSTUNREACH", fast = true }, r[8]) end
    assert.are.same({}, ev) -- none of it reached the proxy
  end)

  it("cannot resolve names inside: no resolver, no DNS server reachable", function()
    local r, ev = attempt({
      { op = "resolve", name = "pypi.org" }, { op = "udp", host = "10.0.2.0", port = 53 },
      { op = "udp", host = "198.51.100.53", port = 53 }, { op = "udp", host = "::1", port = 53 },
    })
    assert.are.same({ result = "gaierror -3" }, r[1])
    assert.are_not.equal("answer", r[2].recv)
    assert.are.same({ send = "EHOSTUNREACH", recv = "timeout" }, r[3])
    assert.are_not.equal("answer", r[4].recv)
    assert.are.same({}, ev)
  end)

  it("gets 407 with another session's pass, a made-up one, none, or a deleted session's", function()
    local b = egress.session(server, key, { "pypi" })
    local b_pass = pass_of(b)
    local a_pass = pass_of(sid)
    assert.are_not.equal(a_pass, b_pass)
    local c = egress.session(server, key, { "pypi" })
    local c_pass = pass_of(c)
    assert.are.equal(200, http_client.delete(server, key, c).status)
    -- A's pass with its last character changed (never the same character: it is made up)
    local made_up = a_pass:sub(1, 31) .. (a_pass:sub(32, 32) == "0" and "1" or "0")
    local r, ev = attempt({
      { op = "connect", target = "pypi.org:443", auth = b .. ":" .. b_pass },   -- B's whole pass
      { op = "connect", target = "pypi.org:443", auth = sid .. ":" .. b_pass }, -- B's pass for A
      { op = "connect", target = "pypi.org:443", auth = sid .. ":" .. made_up },
      { op = "connect", target = "pypi.org:443", auth = "none" },
      { op = "connect", target = "pypi.org:443", auth = c .. ":" .. c_pass },   -- deleted C's
      { op = "connect", target = "pypi.org:443", header = "Proxy-Authorization: Basic !!notbase64!!\r\n" },
      { op = "connect", target = "pypi.org:443" },                              -- A's own: fine
    }, nil, 7)
    for i = 1, 6 do
      assert.are.same({ status = 407 }, r[i], i)
      assert.are.same({ decision = "deny", host = "pypi.org", port = 443, reason = "missing, invalid or expired pass",
        ts = ev[i].ts, duration_ms = ev[i].duration_ms }, ev[i]) -- no session or tenant: the pass was not valid
    end
    assert.are.same({ status = 200 }, r[7])
    assert.are.same({ "allow", sid }, { ev[7].decision, ev[7].session })
  end)

  it("loses the proxy as soon as its session is deleted, even in a running command", function()
    local victim = egress.session(server, key, { "pypi" })
    -- a first tunnel works; then, while the command sleeps, its session is deleted
    local job = egress.probe_async(server, key, victim, { { op = "connect", target = "pypi.org:443" } }, "first", 30, nil,
      "; touch first; sleep 4; timeout 10 python3 .probe.py @.probe.json 2>&1; echo rc=$?")
    assert.are.equal(200, http_client.delete(server, key, victim).status)
    local res = job.wait(60)
    assert.truthy(res, "no answer")
    local first, rest = res.stdout:match('^({"status": 200})\n(.*)$')
    assert.truthy(first, res.stdout)
    assert.is_nil(rest:find('"status": 200', 1, true), rest) -- the second attempt got nowhere
    assert.truthy(rest:find("rc=%d+\n$"), rest)
  end)

  it("gets 405 for plain HTTP through the proxy, logged with the target", function()
    local r, ev = attempt({ { op = "http", url = "http://pypi.org/simple/" }, { op = "http", url = "http://10.0.2.0:3128/" } })
    assert.are.same({ { status = 405 }, { status = 405 } }, r)
    assert.are.same({ decision = "deny", target = "http://pypi.org/simple/", reason = "only HTTPS (CONNECT) is supported",
      session = sid, tenant = "acme", ts = ev[1].ts, duration_ms = ev[1].duration_ms }, ev[1])
    assert.are.same({ "http://10.0.2.0:3128/", "only HTTPS (CONNECT) is supported" }, { ev[2].target, ev[2].reason })
  end)

  it("holds the per-session cap when one sandbox opens 200 tunnels at once; other sessions are unaffected", function()
    local hog = egress.session(server, key, { "sink.test" })
    local job = egress.probe_async(server, key, hog, { { op = "many", target = "sink.test:443", n = 200, hold = 8, marker = "answered" } },
      "answered", 40)
    -- while the hog holds its 32 tunnels: another session's tunnel opens normally
    local other = egress.session(server, key, { "pypi" })
    local r = probe({ { op = "connect", target = "pypi.org:443" } }, other)
    assert.are.same({ { status = 200 } }, r)
    local res = assert(job.wait(90), "no answer from the hog")
    assert.are.same({ statuses = { ["200"] = 32, ["429"] = 168 } }, cjson.decode(res.stdout))
    local ev = egress.new_events(server, key, hog, 0, 200)
    local count = { allow = 0, cap = 0 }
    for _, e in ipairs(ev) do
      if e.decision == "allow" then count.allow = count.allow + 1 end
      if e.reason == "proxy error: TooManyTunnels" then count.cap = count.cap + 1 end
    end
    assert.are.same({ allow = 32, cap = 168 }, count)
  end)

  it("closes a tunnel held idle past its limit (3 s here) and logs it as allowed with its bytes", function()
    local r, ev = attempt({ { op = "idle", target = "sink.test:443", wait = 10 } }, nil, 1)
    assert.are.equal(200, r[1].status)
    assert.truthy(r[1].closed_after and r[1].closed_after >= 2 and r[1].closed_after <= 7, cjson.encode(r[1]))
    assert.are.same({ decision = "allow", host = "sink.test", port = 443, ip = "127.0.0.1", bytes_up = 0, bytes_down = 0,
      session = sid, tenant = "acme", ts = ev[1].ts, duration_ms = ev[1].duration_ms }, ev[1])
    assert.truthy(ev[1].duration_ms >= 2000, ev[1].duration_ms)
  end)
end)
