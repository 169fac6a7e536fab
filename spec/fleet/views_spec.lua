-- luacheck: max line length 160
-- The fleet's views for operators (docs/fleet.md "Looking at a fleet"), on a real 3-node
-- fleet brought up once for this file and always taken down: /healthz through the router
-- gives the fleet's count (and says so), `fleet.sh status` prints the router, each node and
-- the sessions, the admin audit and egress views read every node's rows from the database, and
-- during a database outage GET /v1/admin/nodes answers from the node's last view marked stale,
-- /healthz says it is one node's, and the status page shows what the node knows in headless
-- Chromium.
local cjson = require "cjson"
local egress = require "support.egress"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "views-key-" .. string.rep("a", 24)
local ADMIN = "views-admin-" .. string.rep("e", 30)

describe("a fleet's views", function()
  local f

  setup(function()
    f = fleet.up{ nodes = 3, env = {
      SANDBOX_API_KEYS = "main:" .. KEY, SANDBOX_ADMIN_KEY = ADMIN,
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 20, requests_per_minute = 100000 } },
      SANDBOX_FLEET_LOST_AFTER = "60", SANDBOX_EGRESS_POLICY = cjson.encode{ main = { "allowed.test" } },
    } }
  end)

  teardown(function()
    fleet.down(f)
  end)

  local function healthz()
    return http.request(f.router, "GET", "/healthz")
  end

  local function admin_nodes()
    return http.request(f.router, "GET", "/v1/admin/nodes", { key = ADMIN })
  end

  it("reports the fleet's sessions through the router's /healthz, and whose view it is", function()
    local ids = {}
    for i = 1, 3 do
      local r = http.create(f.router, KEY)
      assert.are.equal(201, r.status, r.body)
      ids[i] = r.json.session_id
    end
    -- each node's view is refreshed by its heartbeat: every node soon counts all three
    local seen = {}
    local last
    assert.is_true(proc.wait_until(30, function()
      last = healthz()
      if last.status == 200 and last.json.scope == "fleet" and last.json.active_sessions == 3 then
        seen[last.json.node] = true
      end
      local n = 0
      for _ in pairs(seen) do n = n + 1 end
      return n == 3
    end, 0.2), "every node's /healthz with the fleet's 3 sessions; last: " .. (last and last.body or "none"))
    local h = last.json
    assert.are.same({ "healthy", "fleet", 3, 3, false }, { h.status, h.scope, h.fleet.nodes, h.fleet.nodes_active, h.fleet.stale })
    assert.are.equal(3, h.fleet.sessions)
    assert.is_number(h.node_sessions)
    assert.is_number(h.fleet.as_of)
    -- a node's own count is its share: the three nodes' shares add up to the fleet's
    local total = 0
    for _, n in pairs(f.nodes) do
      local r = http.request(n, "GET", "/healthz")
      assert.are.equal(n.id, r.json.node)
      total = total + r.json.node_sessions
    end
    assert.are.equal(3, total)
    for _, id in ipairs(ids) do assert.are.equal(200, http.delete(f.router, KEY, id).status) end
  end)

  it("fleet.sh status prints the router, the database, each node and the sessions by tenant", function()
    local s = http.create(f.router, KEY).json.session_id
    local ok, out = fleet.sh(f.env, { "status", f.dir })
    assert.are.equal(200, http.delete(f.router, KEY, s).status)
    assert.is_true(ok, out)
    assert.truthy(out:find("router    " .. f.router.url .. "  answers /healthz", 1, true), out)
    assert.truthy(out:find("database  127.0.0.1:%d+  up"), out)
    assert.truthy(out:find("NODE%s+SLOT%s+STATE"), out)
    for id, n in pairs(f.nodes) do
      -- its row: id, slot, state ... process, healthz, the router's view of it, its URL
      local line = out:match("\n(" .. id .. "%s[^\n]*)")
      assert.truthy(line, "no row for " .. id .. " in:\n" .. out)
      assert.truthy(line:find("%s+%x%x%s+active%s"), line)
      assert.truthy(line:find("running%s+ok%s+UP%s+" .. n.url:gsub("%p", "%%%0")), line)
    end
    assert.truthy(out:find("\nmain%s+node%d%s+active%s+1\n"), out)
    -- a wrong directory is refused by name
    local bad_ok, bad = fleet.sh(f.env, { "status", f.dir .. "/nodes" })
    assert.is_false(bad_ok)
    assert.truthy(bad:find("holds no fleet", 1, true), bad)
  end)

  it("lists every node's audit rows and egress denials to the admin key, from the database", function()
    local sid = egress.session(f.router, KEY, { "allowed.test" })
    assert.are.equal(200, http.exec(f.router, KEY, sid, "echo views-audit").status)
    assert.are.same({ { status = 403 } }, egress.probe(f.router, KEY, sid, { { op = "connect", target = "denied.test:443" } }))
    local by_slot = {}
    for _, n in ipairs(admin_nodes().json.nodes) do by_slot[n.slot] = n.id end
    local owner = by_slot[sid:sub(5, 6)]
    -- whichever node answers (the router picks any), the rows of the session's node are there
    local audit, denial
    assert.is_true(proc.wait_until(20, function()
      local a = http.request(f.router, "GET", "/v1/admin/audit?limit=20", { key = ADMIN })
      local e = http.request(f.router, "GET", "/v1/admin/egress?limit=20", { key = ADMIN })
      audit, denial = nil, nil
      for _, row in ipairs(a.json and a.json.entries or {}) do
        if row.command == "echo views-audit" then audit = row end
      end
      for _, ev in ipairs(e.json and e.json.denials or {}) do
        if ev.session_id == sid and ev.host == "denied.test" then denial = ev end
      end
      return a.json and a.json.scope == "fleet" and e.json and e.json.scope == "fleet" and audit and denial
    end, 0.25), "the fleet's audit row and egress denial")
    assert.are.same({ "main", owner, sid, 0 }, { audit.tenant_id, audit.node, audit.session_id, audit.exit_code })
    assert.are.same({ "deny", "host not on allowlist" }, { denial.decision, denial.reason })
    assert.are.equal(200, http.delete(f.router, KEY, sid).status)
  end)

  it("answers the admin views from the node's last view while the database is down, marked stale", function()
    -- waits until every node's view (its /healthz) counts n sessions
    local function every_view_counts(n)
      local counted
      assert.is_true(proc.wait_until(20, function()
        counted = {}
        for id, node in pairs(f.nodes) do
          local h = http.request(node, "GET", "/healthz").json
          if not (h and h.scope == "fleet" and h.active_sessions == n) then return false end
          counted[#counted + 1] = id
        end
        return true
      end, 0.2), "every node's view counts " .. n .. " sessions; those that did: " .. table.concat(counted or {}, " "))
    end
    -- each node's view sums the nodes' own counts as of their last heartbeats: first every view
    -- without the sessions earlier tests deleted (else a node still counting one of those, and the
    -- new session's node not yet counting it, add up to the 1 waited for next)
    every_view_counts(0)
    local s = http.create(f.router, KEY).json.session_id
    every_view_counts(1) -- every node has a view with the session in it before the outage
    local before = admin_nodes()
    assert.are.same({ 200, false }, { before.status, before.json.stale })
    local ok, out = fleet.sh(f.env, { "db-stop", f.dir })
    assert.is_true(ok, out)
    local res
    assert.is_true(proc.wait_until(20, function()
      res = admin_nodes()
      return res.status == 200 and res.json.stale == true
    end, 0.2), "GET /v1/admin/nodes stale during the outage; last: " .. (res and res.raw or "none"))
    assert.are.equal(3, #res.json.nodes)
    assert.is_number(res.json.as_of)
    assert.is_true(res.json.as_of <= os.time() + 1)
    local sessions = 0
    for _, n in ipairs(res.json.nodes) do
      assert.are.equal("active", n.state)
      sessions = sessions + n.sessions
    end
    assert.are.equal(1, sessions)
    -- /healthz says it is one node's view now, with the fleet's last totals marked stale
    local h
    assert.is_true(proc.wait_until(20, function()
      h = healthz()
      return h.status == 200 and h.json.scope == "node"
    end, 0.2), "scope node; last: " .. (h and h.body or "none"))
    assert.are.same({ true, 3 }, { h.json.fleet.stale, h.json.fleet.nodes })
    assert.are.equal(h.json.node_sessions, h.json.active_sessions)
    -- the page's other views answer from the node's own records
    local st -- (each node learns of the outage at its own next heartbeat; the router picks any)
    assert.is_true(proc.wait_until(20, function()
      st = http.request(f.router, "GET", "/v1/admin/status", { key = ADMIN })
      return st.status == 200 and st.json.database_reachable == false
    end, 0.2), "GET /v1/admin/status says the database is unreachable; last: " .. (st and st.body or "none"))
    assert.are.same({ 200, false, true }, { st.status, st.json.database_reachable, st.json.fleet })
    local eg = http.request(f.router, "GET", "/v1/admin/egress", { key = ADMIN })
    assert.are.same({ 200, "node", true }, { eg.status, eg.json.scope, eg.json.stale })
    local au = http.request(f.router, "GET", "/v1/admin/audit", { key = ADMIN })
    assert.are.same({ 200, "node", true }, { au.status, au.json.scope, au.json.stale })
    -- fleet.sh status still lists each node: a node's last view (asked with the fleet's admin
    -- key), marked stale; with a key the nodes refuse, each node's own answer
    local sok, sout = fleet.sh(f.env, { "status", f.dir })
    assert.is_true(sok, sout)
    assert.truthy(sout:find("DOWN: node rows below are node node%d's last view, as of %d%d:%d%d:%d%d %(stale%)"), sout)
    for id in pairs(f.nodes) do assert.truthy(sout:find("\n" .. id .. "%s+%x%x%s+active%s"), sout) end
    assert.truthy(sout:find("sessions: the database cannot be reached", 1, true), sout)
    local env = {}
    for k, v in pairs(f.env) do env[k] = v end
    env.SANDBOX_ADMIN_KEY = "not-the-admin-key-" .. string.rep("x", 20)
    sok, sout = fleet.sh(env, { "status", f.dir })
    assert.is_true(sok, sout)
    assert.truthy(sout:find("DOWN: node rows below are each node's own answer", 1, true), sout)
    for id in pairs(f.nodes) do assert.truthy(sout:find("\n" .. id .. "%s+%?%s"), sout) end

    -- the status page in headless Chromium through the router: the node's view, marked
    local dir = proc.make_temp_dir()
    local rc, page = proc.run_capture(string.format("timeout -k 5 300 /usr/bin/python3 %s %s %s %s %s outage",
      proc.shell_quote(proc.repo_root() .. "/spec/support/status_page_browser.py"), proc.shell_quote(f.router.url),
      proc.shell_quote(ADMIN), proc.shell_quote(KEY), proc.shell_quote(dir)))
    local left = proc.output("pgrep -f " .. proc.shell_quote(dir .. "/[p]rofile") .. " || true") -- [p]: not pgrep's own shell
    for pid in left:gmatch("%d+") do proc.stop_process(tonumber(pid), 1) end
    proc.remove_tree(dir .. "/profile")
    local seen = cjson.decode(page:match("(%b{})%s*$") or "{}")
    assert.are.same({ 0, nil }, { rc, seen.error }, page)
    assert.are.equal("", left, "browser processes left running")
    assert.truthy(seen.banner:find("cannot be reached", 1, true), seen.banner)
    assert.truthy(seen.nodes_note:find("last view, as of", 1, true), seen.nodes_note)
    assert.are.equal(3, #seen.nodes)
    print("status page during the outage: " .. seen.screenshot)

    ok, out = fleet.sh(f.env, { "db-start", f.dir })
    assert.is_true(ok, out)
    fleet.reload(f)
    assert.is_true(proc.wait_until(30, function()
      res = admin_nodes()
      return res.status == 200 and res.json.stale == false
    end, 0.2), "fresh again after the outage; last: " .. (res and res.raw or "none"))
    assert.is_true(proc.wait_until(30, function()
      return http.delete(f.router, KEY, s).status == 200
    end, 0.5))
  end)
end)
