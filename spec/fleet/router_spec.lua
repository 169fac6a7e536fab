-- A 2-node fleet (scripts/fleet.sh) tried as an attacker and an operator would: the fleet's
-- database role and the environments of PostgreSQL, HAProxy and the router program hold no
-- key; no spelling of a node-to-node path passes the router, a percent-encoded session path
-- reaches its node, HAProxy's own answers are JSON; a node started again from an empty
-- environment comes back as it was (keys, address, port); the router program (airlockd
-- router follow, told by the database) routes a moved session with no polling loop.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "router-key-" .. string.rep("a", 24)
local ADMIN = "router-admin-" .. string.rep("e", 30)

describe("the fleet's router and its least privilege", function()
  local f

  setup(function()
    f = fleet.up{ nodes = 2, env = {
      SANDBOX_API_KEYS = "main:" .. KEY,
      SANDBOX_ADMIN_KEY = ADMIN,
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 100, requests_per_minute = 100000 } },
    } }
  end)

  teardown(function()
    fleet.down(f)
  end)

  local function router_hostport()
    return f.router.url:match("^http://(.*)$")
  end

  it("gives the fleet a database role that cannot read the server's files or run programs", function()
    local pid = f.info.postgres.pid
    local read = fleet.sql(f, "SELECT pg_read_binary_file('/proc/" .. pid .. "/environ')")
    assert.matches("permission denied", read, 1, true)
    local run = fleet.sql(f, "COPY (SELECT 1) TO PROGRAM 'true'")
    assert.matches("must be superuser or have privileges of the pg_execute_server_program role", run, 1, true)
    assert.are.equal("f", fleet.sql(f, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"))
  end)

  it("keeps every key, the admin key, the password and the secret out of PostgreSQL, HAProxy and the router", function()
    local password = f.info.database:match("^postgresql://[^:]+:([^@]+)@")
    local secret = assert(proc.read_file(f.dir .. "/fleet.secret"))
    local pids = { postgres = f.info.postgres.pid, haproxy = f.info.haproxy.pid, router = f.info.haproxy.router_pid }
    for name, pid in pairs(pids) do
      local environ = assert(proc.read_file("/proc/" .. pid .. "/environ"), name)
      for _, what in ipairs({ KEY, ADMIN, password, secret, "SANDBOX_" }) do
        assert.is_nil(environ:find(what, 1, true), name .. " holds " .. what:sub(1, 8) .. "…")
      end
    end
    -- the router program is ours: airlockd router follow, with the role that only reads
    local cmdline = proc.read_file("/proc/" .. pids.router .. "/cmdline"):gsub("%z", " ")
    assert.matches("router follow --database-url-file", cmdline, 1, true)
  end)

  it("lets no spelling of a node-to-node path through the router: HAProxy's own JSON 404", function()
    local secret = assert(proc.read_file(f.dir .. "/fleet.secret"))
    local s = fleet.create_on(f, ADMIN, KEY, "node1")
    for _, path in ipairs({ "/v1/fleet/internal%2Fsessions/" .. s, "/v1/fleet/%69nternal/sessions/" .. s,
                            "/%761/fleet/internal/sessions/" .. s, "/v1//fleet/internal/sessions/" .. s,
                            "/v1/fleet/./internal/sessions/" .. s, "/v1/x/../fleet/internal/sessions/" .. s }) do
      -- with the fleet's secret: a node's internal route would answer 403 (not moving)
      local status, answer = fleet.raw(router_hostport(), "POST " .. path .. " HTTP/1.1\r\nHost: x\r\n"
        .. "Connection: close\r\nContent-Length: 0\r\nAuthorization: Bearer " .. secret .. "\r\n\r\n")
      assert.are.equal(404, status, path .. ": " .. answer)
      assert.matches('{"detail": "Not Found"}', answer, 1, true)
      assert.matches("application/json", answer, 1, true)
    end
    -- the public check stays reachable; the routes live on each node's own listener alone
    assert.are.equal(200, http.request(f.router, "GET", "/v1/fleet/accepting").status)
    local internal = fleet.setting(f, "node:node1:internal")
    assert.are_not.equal(f.nodes.node1.url, "http://" .. internal)
    local status = fleet.raw(internal, "POST /v1/fleet/internal/sessions/" .. s .. " HTTP/1.1\r\nHost: x\r\n"
      .. "Connection: close\r\nContent-Length: 0\r\nAuthorization: Bearer " .. secret .. "\r\n\r\n")
    assert.are.equal(403, status)
    assert.are.equal(200, http.delete(f.router, KEY, s).status)
  end)

  it("routes a percent-encoded session path to its node, and answers a malformed one with JSON", function()
    local s = fleet.create_on(f, ADMIN, KEY, "node2")
    assert.are.equal(200, http.write(f.router, KEY, s, "p.txt", "found").status)
    -- each read through any other route would meet the other node half the time
    for _ = 1, 8 do
      local r = http.request(f.router, "GET", "/v1/sessions/%73" .. s:sub(2) .. "/read?path=p.txt", { key = KEY })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal("found", r.json.content)
      r = http.request(f.router, "GET", "/v1//sessions/./" .. s .. "/read?path=p.txt", { key = KEY })
      assert.are.equal(200, r.status, r.body)
    end
    -- a malformed %-escape: HAProxy refuses it itself, in airlockd's shape
    local bad = http.request(f.router, "GET", "/v1/sessions/%zz" .. s .. "/read?path=p.txt", { key = KEY })
    assert.are.equal(400, bad.status, bad.body)
    assert.is_string(bad.json.detail)
    assert.are.equal(200, http.delete(f.router, KEY, s).status)
  end)

  it("stops a node on SIGTERM with its commands audited, starts it from an empty environment as it was", function()
    local s = fleet.create_on(f, ADMIN, KEY, "node2")
    assert.are.equal(200, http.write(f.router, KEY, s, "kept.txt", "kept").status)
    local before, pid = f.nodes.node2.url, f.nodes.node2.pid
    -- a command running when the node is told to stop: its audit row and its end reach the
    -- database before the node exits (nothing a group commit still held is lost)
    local running = http.exec_async({ url = before }, KEY, s, "sleep 2; echo stopped with sigterm")
    assert.is_true(proc.wait_until(30, function()
      return fleet.sql(f, "SELECT coalesce(sum(running), 0) FROM command_counts WHERE node = 'node2'") == "1"
    end))
    assert.is_true(proc.succeeded(os.execute("kill -TERM " .. pid)))
    assert.is_true(proc.wait_until(60, function() return not proc.alive(pid) end))
    running.wait()
    assert.are.equal("1", fleet.sql(f, "SELECT count(*) FROM audit WHERE node = 'node2'"
      .. " AND command = 'sleep 2; echo stopped with sigterm'"))
    assert.are.equal("0", fleet.sql(f, "SELECT coalesce(sum(running), 0) FROM command_counts WHERE node = 'node2'"))
    local rc, out = proc.run_capture("env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin " .. proc.shell_quote(
      proc.repo_root() .. "/scripts/fleet.sh") .. " start-node " .. proc.shell_quote(f.dir) .. " node2")
    assert.are.equal(0, rc, out)
    fleet.reload(f)
    assert.are.equal(before, f.nodes.node2.url)
    assert.are.equal(200, http.request({ url = f.nodes.node2.url }, "GET", "/v1/usage", { key = KEY }).status)
    -- reachable through the router as it was configured (no `fleet.sh router`)
    local r
    assert.is_true(proc.wait_until(20, function()
      r = http.read(f.router, KEY, s, "kept.txt")
      return r.status == 200
    end), r and r.body)
    assert.are.equal("kept", r.json.content)
    assert.are.equal(200, http.delete(f.router, KEY, s).status)
  end)

  it("follows a node that comes back at a new address, with no reload (the router program)", function()
    local s = fleet.create_on(f, ADMIN, KEY, "node2")
    assert.are.equal(200, http.write(f.router, KEY, s, "addr.txt", "here").status)
    local pid, reloads = f.nodes.node2.pid, f.info.haproxy.pid
    assert.is_true(proc.succeeded(os.execute("kill -TERM " .. pid)))
    assert.is_true(proc.wait_until(60, function() return not proc.alive(pid) end))
    -- the operator gives node2 another port in the fleet's settings
    local port = proc.output("python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.3\", 0));"
      .. " print(s.getsockname()[1])'"):match("%d+")
    local settings = proc.read_file(f.dir .. "/fleet.env")
    proc.write_file(f.dir .. "/fleet.env",
      (settings:gsub("node:node2:listen=[^\n]*", "node:node2:listen=127.0.0.3:" .. port)))
    local ok, out = fleet.sh({}, { "start-node", f.dir, "node2" })
    assert.is_true(ok, out)
    fleet.reload(f)
    assert.are.equal("http://127.0.0.3:" .. port, f.nodes.node2.url)
    local r
    assert.is_true(proc.wait_until(20, function()
      r = http.read(f.router, KEY, s, "addr.txt")
      return r.status == 200
    end), r and r.body)
    assert.are.equal("here", r.json.content)
    assert.are.equal(reloads, f.info.haproxy.pid) -- the same HAProxy, told over its runtime API
    assert.matches("node node2 now at 127.0.0.3:" .. port, proc.read_file(f.dir .. "/haproxy/router.log"), 1, true)
    assert.are.equal(200, http.delete(f.router, KEY, s).status)
  end)

  it("routes a moved session through the router program, with no polling loop beside it", function()
    local s = fleet.create_on(f, ADMIN, KEY, "node1")
    assert.are.equal(200, http.write(f.router, KEY, s, "m.txt", "moved with " .. s).status)
    local res = http.request(f.router, "POST", "/v1/admin/nodes/node1/drain", { key = ADMIN })
    assert.are.equal(200, res.status, res.body)
    local state
    assert.is_true(proc.wait_until(120, function()
      local _, by = fleet.nodes(f, ADMIN)
      state = by.node1.state
      return state == "drained"
    end), "node1 is " .. tostring(state))
    local r
    assert.is_true(proc.wait_until(15, function()
      r = http.read(f.router, KEY, s, "m.txt")
      if r.status == 503 then assert.truthy(r.headers["retry-after"], r.body) end
      return r.status == 200
    end, 0.1), r and r.body)
    assert.are.equal("moved with " .. s, r.json.content)
    -- told, not polling: no fleet.sh follower, no psql, and the router program said so
    -- (this fleet's processes only: the machine runs other fleets)
    local port = string.format("%d", f.info.postgres.port)
    for line in proc.output("ps -eo args"):gmatch("[^\n]+") do
      assert.is_nil(line:find("fleet.sh follow " .. f.dir, 1, true), line)
      assert.is_false(line:match("^psql ") ~= nil and line:find("-p " .. port .. " ", 1, true) ~= nil, line)
    end
    assert.matches("session " .. s .. " routed to slot_", proc.read_file(f.dir .. "/haproxy/router.log"), 1, true)
    -- one-off passes (fleet.sh drain runs one) at once with each other and the follower: each
    -- writes the map file under a name of its own (a shared one failed a drain under load)
    local sync = string.format("%s router sync --database-url-file %s --stats-socket %s --map %s",
      proc.shell_quote(airlockd.binary()), proc.shell_quote(f.dir .. "/router.url"),
      proc.shell_quote(f.dir .. "/haproxy/admin.sock"), proc.shell_quote(f.dir .. "/haproxy/moved.map"))
    for _ = 1, 3 do
      local rc, out = proc.run_capture("for i in 1 2 3 4 5 6; do " .. sync .. " & done 2>&1; fail=0; " ..
        "for j in $(jobs -p); do wait $j || fail=$((fail + 1)); done; echo failed=$fail")
      assert.are.equal(0, rc, out)
      assert.truthy(out:find("failed=0", 1, true), out)
    end
    assert.matches(s .. " slot_", proc.read_file(f.dir .. "/haproxy/moved.map"), 1, true)
    local left = proc.output("ls " .. proc.shell_quote(f.dir .. "/haproxy") .. " | grep -F moved.map.tmp || true")
    assert.are.equal("", left)
    assert.are.equal(200, http.delete(f.router, KEY, s).status)
  end)

  it("reloads HAProxy from the printed configuration without an alert", function()
    local before = f.info.haproxy.pid
    local ok, out = fleet.sh(f.env, { "router", f.dir })
    assert.is_true(ok, out)
    assert.is_nil(out:find("ALERT", 1, true), out)
    fleet.reload(f)
    assert.are_not.equal(before, f.info.haproxy.pid)
    assert.matches("Printed by `airlockd router config`", proc.read_file(f.info.haproxy.config), 1, true)
    assert.are.equal(200, http.request(f.router, "GET", "/healthz").status)
  end)
end)
