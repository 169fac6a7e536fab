-- A real 3-node fleet on loopback (scripts/fleet.sh: a private PostgreSQL, HAProxy, airlockd
-- on 127.0.0.2-4), brought up once for this file and always taken down: routing by the slot
-- in a session id, spread of new sessions, exact limits under parallel load (exec slots leased by
-- the nodes and asked for by the others; audit rows group-committed: seen on every node at the
-- answer), key revocation across nodes, the Lua SDK's quick start through the router, a
-- database outage, kill -9 of a node, and nothing left running after `down`.
local cjson = require "cjson"
local egress = require "support.egress"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "fleet-key-" .. string.rep("a", 24)
local LIMITED = "fleet-limited-" .. string.rep("b", 20)
local RATED = "fleet-rated-" .. string.rep("c", 22)
local BUSY = "fleet-busy-" .. string.rep("d", 23)
local HAMMER = "fleet-hammer-" .. string.rep("f", 21)
local HAMMER_RPM = 600
local ADMIN = "fleet-admin-" .. string.rep("e", 30)
local LOST_AFTER = 10
local CAPACITY = 10 -- sessions per node

describe("a 3-node fleet", function()
  local f

  setup(function()
    f = fleet.up{ nodes = 3, env = {
      SANDBOX_API_KEYS = "main:" .. KEY .. ",limited:" .. LIMITED .. ",rated:" .. RATED .. ",busy:" .. BUSY
        .. ",hammer:" .. HAMMER,
      SANDBOX_ADMIN_KEY = ADMIN,
      SANDBOX_TENANT_LIMITS = cjson.encode{
        main = { max_sessions = 100, requests_per_minute = 100000 }, limited = { max_sessions = 10 },
        rated = { requests_per_minute = 10 }, busy = { max_concurrent_exec = 2, max_sessions = 20 },
        hammer = { requests_per_minute = HAMMER_RPM } },
      SANDBOX_FLEET_LOST_AFTER = tostring(LOST_AFTER),
      -- a key cache longer than any wait below: only the revocation notice can end a key
      SANDBOX_FLEET_KEY_CACHE_S = "60",
      SANDBOX_FLEET_CAPACITY = tostring(CAPACITY),
      SANDBOX_EGRESS_POLICY = cjson.encode{ main = { "pypi" } },
    } }
  end)

  teardown(function()
    fleet.down(f)
  end)

  it("writes fleet.json with the router, the database, PostgreSQL, HAProxy and each node", function()
    local info = f.info
    assert.matches("^http://127%.0%.0%.1:%d+$", info.router)
    assert.matches("^postgresql://", info.database)
    assert.is_true(proc.alive(info.postgres.pid))
    assert.is_string(info.postgres.data_dir)
    assert.is_true(proc.alive(info.haproxy.pid))
    assert.is_string(proc.read_file(info.haproxy.config))
    -- the router program that keeps HAProxy's moved sessions and servers current
    assert.is_true(proc.alive(info.haproxy.router_pid))
    assert.are.equal(3, #info.nodes)
    for i, n in ipairs(info.nodes) do
      assert.are.equal("node" .. i, n.id)
      assert.matches("^http://127%.0%.0%." .. (i + 1) .. ":%d+$", n.url)
      assert.is_true(proc.alive(n.pid))
      assert.is_string(n.state_dir)
    end
  end)

  it("says each step of fleet.sh up as it goes (stderr), each with its time", function()
    local steps = {}
    for line in f.up_output:gmatch("[^\n]+") do steps[#steps + 1] = line:match("^fleet%.sh: %[%d+ s%] (.*)$") end
    assert.are.same({ "starting PostgreSQL", "starting 3 nodes", "node1 is up", "node2 is up", "node3 is up",
      "starting the router" }, steps)
  end)

  it("keeps the database password out of every command line and every log", function()
    local password = f.info.database:match("^postgresql://[^:]+:([^@]+)@")
    assert.is_string(password)
    local ps = proc.output("ps -eo args")
    assert.is_nil(ps:find(password, 1, true))
    for _, n in ipairs(f.info.nodes) do
      assert.is_nil(fleet.node_log(f, n.id):find(password, 1, true))
    end
  end)

  it("never shows a database password when it cannot connect, from the variable or the flag", function()
    local bin = proc.shell_quote(os.getenv("AIRLOCKD_BIN") or (proc.repo_root() .. "/build/airlockd"))
    local dir = proc.make_temp_dir()
    local wrong = f.info.database:gsub("^(postgresql://[^:]+:)[^@]+@", "%1not-the-Secret-pw@")
    local nowhere = "postgresql://u:not-the-Secret-pw@127.0.0.1:1/x"
    for _, how in ipairs({
      { env = "SANDBOX_DATABASE_URL=" .. proc.shell_quote(wrong), args = "" },
      { env = "", args = "--database " .. proc.shell_quote(wrong) },
      { env = "SANDBOX_DATABASE_URL=" .. proc.shell_quote(nowhere), args = "" },
    }) do
      local rc, out = proc.run_capture(string.format(
        "SANDBOX_API_KEY=k-%s %s timeout 60 %s --listen 127.0.0.1:0 --state-dir %s %s",
        string.rep("z", 20), how.env, bin, proc.shell_quote(dir .. "/state"), how.args))
      assert.are_not.equal(0, rc)
      assert.matches("database", out)
      assert.is_nil(out:find("not-the-Secret-pw", 1, true), out)
    end
    proc.remove_tree(dir)
  end)

  it("lists every node with its state, sessions, commands and heartbeat (admin key only)", function()
    local _, by_id, list = fleet.nodes(f, ADMIN)
    assert.are.equal(3, #list)
    for _, n in ipairs(f.info.nodes) do
      local row = by_id[n.id]
      assert.are.equal("active", row.state)
      assert.are.equal(n.url, row.url)
      assert.matches("^%x%x$", row.slot)
      assert.is_number(row.sessions)
      assert.is_number(row.commands_running)
      assert.is_number(row.last_heartbeat)
    end
    assert.are.equal(401, http.request(f.router, "GET", "/v1/admin/nodes", { key = KEY }).status)
  end)

  it("lists every session with its node to the admin, live figures for the node's own; /metrics per node", function()
    local here, there = fleet.create_on(f, ADMIN, KEY, "node1"), fleet.create_on(f, ADMIN, KEY, "node2")
    local node1 = f.nodes.node1
    local res = http.request(node1, "GET", "/v1/admin/sessions", { key = ADMIN })
    assert.are.equal(200, res.status, res.body)
    assert.are.equal("node1", res.json.node)
    assert.are.equal("ok", res.json.database)
    local by_id = {}
    for _, row in ipairs(res.json.sessions) do by_id[row.id] = row end
    assert.are.equal("node1", by_id[here].node)
    assert.is_true(by_id[here].live)
    assert.are.equal("main", by_id[here].tenant)
    assert.is_number(by_id[here].disk_used_bytes)
    assert.are.equal("node2", by_id[there].node)
    assert.is_false(by_id[there].live)
    assert.are.equal("elsewhere", by_id[there].state)
    -- the same fields, those only its own node knows null
    local fields = {}
    for k in pairs(by_id[here]) do fields[#fields + 1] = k end
    for _, k in ipairs(fields) do assert.are_not.equal(nil, by_id[there][k], k) end
    for _, k in ipairs({ "cpu_seconds", "memory_bytes", "processes", "commands_run", "running", "last_command" }) do
      assert.are.equal(cjson.null, by_id[there][k], k)
    end
    -- the node's Prometheus text: its heartbeat reached the database within the last few seconds
    res = http.request(node1, "GET", "/metrics", { headers = { "Authorization: Bearer " .. ADMIN } })
    assert.are.equal(200, res.status, res.body)
    local age = tonumber(res.body:match("\nairlockd_fleet_heartbeat_age_seconds (%S+)\n"))
    assert.is_true(age ~= nil and age >= 0 and age < LOST_AFTER, tostring(age))
    assert.are.equal("1", res.body:match("\nairlockd_fleet_database_reachable (%S+)\n"))
    assert.is_truthy(res.body:match('\nairlockd_fleet_outbox_rows{outbox="audit"} %d+\n'), res.body)
    assert.is_truthy(res.body:match("\nairlockd_fleet_database_errors_total %d+\n"), res.body)
    local path = proc.temp_path()
    proc.write_file(path, res.body)
    local rc, out = proc.run_capture("promtool check metrics < " .. proc.shell_quote(path))
    os.remove(path)
    assert.are.equal(0, rc, out)
    assert.are.equal(200, http.delete(f.router, KEY, here).status)
    assert.are.equal(200, http.delete(f.router, KEY, there).status)
  end)

  it("routes each session's requests to the node its id names, and spreads new sessions", function()
    local by_slot = fleet.nodes(f, ADMIN)
    local ids, per_node = {}, {}
    for i = 1, 9 do
      local res = http.create(f.router, KEY)
      assert.are.equal(201, res.status, res.body)
      local id = res.json.session_id
      assert.matches("^sbx_%x%x%x%x%x%x%x%x%x%x%x%x$", id)
      local owner = by_slot[fleet.slot_of(id)]
      assert.is_table(owner, "no node has the slot of " .. id)
      per_node[owner.id] = (per_node[owner.id] or 0) + 1
      ids[i] = { id = id, node = owner }
      assert.are.equal(200, http.write(f.router, KEY, id, "who.txt", "session " .. i).status)
    end
    -- round robin over three accepting nodes: every node takes some
    for _, n in ipairs(f.info.nodes) do assert.is_true((per_node[n.id] or 0) >= 1, n.id) end
    for i, s in ipairs(ids) do
      local res = http.read(f.router, KEY, s.id, "who.txt")
      assert.are.equal(200, res.status)
      assert.are.equal("session " .. i, res.json.content)
      -- straight to its node: the same file; to another node: never another workspace
      assert.are.equal("session " .. i, http.read({ url = s.node.url }, KEY, s.id, "who.txt").json.content)
      for _, other in ipairs(f.info.nodes) do
        if other.id ~= s.node.id then
          local wrong = http.read({ url = other.url }, KEY, s.id, "who.txt")
          assert.are.equal(503, wrong.status, wrong.body)
          assert.matches(s.node.id, wrong.json.detail, 1, true)
          assert.is_string(wrong.headers["retry-after"])
        end
      end
    end
    -- a tenant-level request on any node sees every node's sessions
    for _, n in ipairs(f.info.nodes) do
      local list = http.request({ url = n.url }, "GET", "/v1/sessions", { key = KEY })
      assert.are.equal(200, list.status)
      local seen = {}
      for _, s in ipairs(list.json.sessions) do seen[s.session_id] = true end
      for _, s in ipairs(ids) do assert.is_true(seen[s.id], s.id) end
    end
    -- an id no node ever made: 404 through the router and on every node
    assert.are.equal(404, http.read(f.router, KEY, "sbx_01aaaaaaaaaa", "x").status)
    assert.are.equal(404, http.read(f.router, KEY, "sbx_ffaaaaaaaaaa", "x").status)
    for _, s in ipairs(ids) do assert.are.equal(200, http.delete(f.router, KEY, s.id).status) end
  end)

  it("places new sessions by load: weights from each node's free room, a full node takes none", function()
    local by_slot, by_id = fleet.nodes(f, ADMIN)
    for _, n in ipairs(f.info.nodes) do
      assert.are.equal(CAPACITY, by_id[n.id].capacity)
      assert.are.equal("ready up 100%", fleet.agent(f, n.id))
    end
    local made = {}
    finally(function()
      for _, s in ipairs(made) do http.delete(f.router, KEY, s) end
    end)
    -- node1 filled to its capacity straight (not through the router)
    for i = 1, CAPACITY do
      local c = http.create({ url = f.nodes.node1.url }, KEY)
      assert.are.equal(201, c.status, c.body)
      made[#made + 1] = c.json.session_id
      if i == 3 then assert.are.equal("ready up 70%", fleet.agent(f, "node1")) end
    end
    assert.are.equal("ready up 0%", fleet.agent(f, "node1"))
    local full = http.create({ url = f.nodes.node1.url }, KEY)
    assert.are.equal(503, full.status)
    assert.matches("full", full.json.detail, 1, true)
    assert.are.equal(503, http.request({ url = f.nodes.node1.url }, "GET", "/v1/fleet/accepting").status)
    -- HAProxy reads the agent: node1's weight in `create` drops to 0, the others keep theirs
    local weight = function(id) return fleet.haproxy(f, "get weight create/" .. id) end
    assert.is_true(proc.wait_until(10, function() return weight("node1"):match("^0 ") ~= nil end), weight("node1"))
    assert.matches("^100 ", weight("node2"))
    -- every create through the router goes to the nodes with room
    for _ = 1, 6 do
      local c = http.create(f.router, KEY)
      assert.are.equal(201, c.status, c.body)
      made[#made + 1] = c.json.session_id
      assert.are_not.equal("node1", by_slot[fleet.slot_of(c.json.session_id)].id)
    end
    -- room again: node1 reports it and HAProxy gives it a weight again
    for i = 1, CAPACITY do assert.are.equal(200, http.delete(f.router, KEY, made[i]).status) end
    assert.are.equal("ready up 100%", fleet.agent(f, "node1"))
    assert.is_true(proc.wait_until(10, function() return weight("node1"):match("^100 ") ~= nil end), weight("node1"))
  end)

  it("admits exactly max_sessions of 60 parallel creates spread over the nodes", function()
    local counts = fleet.parallel(f.router.url, 60, 30, "POST", "/v1/sessions", LIMITED, "{}")
    assert.are.equal(10, counts[201])
    assert.are.equal(50, counts[429])
    local usage = http.request(f.router, "GET", "/v1/usage", { key = LIMITED })
    assert.are.equal(10, usage.json.sessions_open)
    local list = http.request(f.router, "GET", "/v1/sessions", { key = LIMITED })
    assert.are.equal(10, #list.json.sessions)
    local slots = {}
    for _, s in ipairs(list.json.sessions) do slots[fleet.slot_of(s.session_id)] = true end
    local n = 0
    for _ in pairs(slots) do n = n + 1 end
    assert.is_true(n >= 2, "the 10 sessions landed on one node")
    for _, s in ipairs(list.json.sessions) do http.delete(f.router, LIMITED, s.session_id) end
    assert.are.equal(0, http.request(f.router, "GET", "/v1/usage", { key = LIMITED }).json.sessions_open)
  end)

  it("grants the fleet one request bucket per tenant: 10 per minute across all nodes", function()
    local t0 = os.time()
    local counts = fleet.parallel(f.router.url, 40, 20, "GET", "/v1/egress/policy", RATED)
    -- the bucket holds 10 and refills one every 6 s (whole seconds elapsed, rounded up)
    local refilled = math.floor((os.time() - t0 + 1) / 6)
    local seen = string.format("%d granted, %d refused", counts[200] or 0, counts[429] or 0)
    assert.is_true(counts[200] >= 10 and counts[200] <= 10 + refilled, seen)
    assert.are.equal(40, counts[200] + (counts[429] or 0))
  end)

  it("holds one tenant to its allowance plus the lease bound when all 3 nodes are hammered at once", function()
    -- finding 8: three nodes admitted 2.5-3.2 times the allowance (the database read its clock
    -- before the bucket's lock, so requests queued on it refilled one interval more than once).
    -- Now each node leases at most max(1, min(rpm * 2 s / 60, rpm / (8 * nodes))) tokens at a
    -- time (docs/fleet.md "The cost of a call"): 20 here, so the fleet admits at most 3 * 20
    -- beyond the bucket and its refill
    local lease_max = math.max(1, math.floor(math.min(HAMMER_RPM * 2 / 60, HAMMER_RPM / 24)))
    local per_node = 400
    local jobs = {}
    for _, n in ipairs(f.info.nodes) do
      jobs[#jobs + 1] = string.format("seq %d | xargs -P 8 -I@ curl -s -o /dev/null -w '%%{http_code}\\n'"
        .. " --max-time 60 -H %s %s", per_node, proc.shell_quote("X-API-Key: " .. HAMMER), proc.shell_quote(n.url
        .. "/v1/egress/policy"))
    end
    local t0 = os.time()
    local out = proc.output("(" .. table.concat(jobs, " & ") .. "; wait)")
    local window = os.time() - t0 + 1 -- whole seconds, rounded up
    local counts = {}
    for code in out:gmatch("%d+") do counts[code] = (counts[code] or 0) + 1 end
    local admitted = counts["200"] or 0
    local most = HAMMER_RPM + math.ceil(window * HAMMER_RPM / 60) + 3 * lease_max
    local seen = string.format("%d admitted, %d refused in %d s (at most %d)", admitted, counts["429"] or 0,
      window, most)
    assert.are.equal(3 * per_node, admitted + (counts["429"] or 0), seen)
    assert.is_true(admitted <= most, seen)
    assert.is_true(admitted >= math.min(3 * per_node, HAMMER_RPM - 3 * lease_max), seen)
  end)

  it("holds max_concurrent_exec across nodes", function()
    local by_slot = fleet.nodes(f, ADMIN)
    local ids, on = {}, {}
    while #ids < 3 do -- one session on each node
      local s = http.create(f.router, BUSY).json.session_id
      local node = by_slot[fleet.slot_of(s)].id
      if on[node] then http.delete(f.router, BUSY, s) else on[node] = true; ids[#ids + 1] = s end
    end
    local running = {}
    for i = 1, 6 do running[i] = http.exec_async(f.router, BUSY, ids[(i - 1) % 3 + 1], "sleep 3", 20) end
    local ok, refused = 0, 0
    for i = 1, 6 do
      local body = running[i].wait(120)
      if body and body.exit_code == 0 then ok = ok + 1
      elseif body and tostring(body.detail):find("Too many commands", 1, true) then refused = refused + 1 end
    end
    -- two at once at most: the six overlap (a refused one returns at once, a run takes 3 s)
    assert.is_true(ok >= 2, "ok " .. ok)
    assert.are.equal(6, ok + refused)
    assert.is_true(refused >= 1, "none refused")
    for _, s in ipairs(ids) do http.delete(f.router, BUSY, s) end
  end)

  -- Every node gave the tenant's exec slots back (none running, none kept idle a little while
  -- for a next command), read in the database: the fleet's usage counts the answering node's
  -- running commands and the slots the other nodes hold, so its 0 can leave the answering
  -- node's idle slot, which the next node's usage then counts. After that, the usage says 0.
  local function slots_given_back(key)
    local held
    assert.is_true(proc.wait_until(60, function()
      held = tonumber(fleet.sql(f, "SELECT coalesce(sum(running), 0) FROM command_counts WHERE tenant = 'busy'"))
      return held == 0
    end, 0.2), "slots still held in the database: " .. tostring(held))
    assert.are.equal(0, http.request(f.router, "GET", "/v1/usage", { key = key }).json.commands_running)
  end

  -- Exec slots are leased by the nodes and kept for their next commands (docs/fleet.md "Exec
  -- slots"): seen from inside the commands (each prints when it ran, on the machine's one
  -- clock), never more than max_concurrent_exec (2) of the tenant run at once on the 3 nodes,
  -- and a node holding none gets one at once from the others' idle ones.
  it("runs at most max_concurrent_exec of a tenant's commands at once; a node without slots gets idle ones", function()
    local on = {}
    for n = 1, 3 do on[n] = fleet.create_on(f, ADMIN, BUSY, "node" .. n) end
    local function ran(body) -- the interval a command printed: start and end, ns
      local a, b = tostring(body and body.stdout):match("(%d+)%s+(%d+)")
      return tonumber(a), tonumber(b)
    end
    for round = 1, 3 do
      -- node1 and node2 run one each (and keep their slots); node3, holding none, runs two
      -- at once right after: it gets the idle slots, asked for
      local r1 = http.exec_async(f.router, BUSY, on[1], "echo one " .. round)
      local r2 = http.exec_async(f.router, BUSY, on[2], "echo two " .. round)
      for _, r in ipairs({ r1, r2 }) do
        local body, raw = r.wait(120)
        assert.are.equal(0, body and body.exit_code, raw)
      end
      local t1 = http.exec_async(f.router, BUSY, on[3], "echo three " .. round)
      local t2 = http.exec_async(f.router, BUSY, on[3], "echo four " .. round)
      for _, r in ipairs({ t1, t2 }) do
        local body, raw = r.wait(120)
        assert.are.equal(0, body and body.exit_code, raw)
      end
    end
    -- 9 at once, 3 on each node: those admitted never overlap more than 2 at a time
    local running = {}
    for i = 1, 9 do
      running[i] = http.exec_async(f.router, BUSY, on[(i - 1) % 3 + 1], "date +%s%N; sleep 0.7; date +%s%N", 20)
    end
    local edges, ok = {}, 0
    for i = 1, 9 do
      local body, raw = running[i].wait(120)
      if body and body.exit_code == 0 then
        local a, b = ran(body)
        assert.is_number(a, raw)
        assert.is_number(b, raw)
        ok = ok + 1
        edges[#edges + 1] = { a, 1 }
        edges[#edges + 1] = { b, -1 }
      else
        assert.matches("Too many commands", tostring(body and body.detail), 1, true)
      end
    end
    table.sort(edges, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
    local now, most = 0, 0
    for _, e in ipairs(edges) do
      now = now + e[2]
      most = math.max(most, now)
    end
    assert.is_true(ok >= 2, "admitted " .. ok)
    assert.is_true(most <= 2, most .. " at once of " .. ok)
    slots_given_back(BUSY)
    for _, s in ipairs(on) do http.delete(f.router, BUSY, s) end
  end)

  it("says in usage what runs on the answering node, not the idle slot it keeps after a command", function()
    local sid = fleet.create_on(f, ADMIN, BUSY, "node1")
    local node1 = { url = f.nodes.node1.url }
    local function held() -- node1's slots of the tenant in the database
      return tonumber(fleet.sql(f, "SELECT coalesce(sum(running), 0) FROM command_counts"
        .. " WHERE tenant = 'busy' AND node = 'node1'"))
    end
    -- a usage answered while node1 keeps the idle slot of the command just ended (asked again
    -- if the slot went back meanwhile: it is kept 2-4 s)
    local seen
    for _ = 1, 20 do
      assert.are.equal(0, http.exec(node1, BUSY, sid, "true").json.exit_code)
      if held() >= 1 then
        local running = http.request(node1, "GET", "/v1/usage", { key = BUSY }).json.commands_running
        if held() >= 1 then seen = running break end
      end
    end
    assert.are.equal(0, seen)
    http.delete(f.router, BUSY, sid)
  end)

  -- Each exec's audit row (and a slot it gives back) reaches the database in a group commit with
  -- the others that finish with it (fleet/audit.c), before the exec answers; a slot kept idle by
  -- a node is had by another that asks.
  it("group-commits exec ends: the audit row is seen on every node when it answers, its slot had by others", function()
    local a = fleet.create_on(f, ADMIN, BUSY, "node1")
    local b = fleet.create_on(f, ADMIN, BUSY, "node1")
    local c = fleet.create_on(f, ADMIN, BUSY, "node2")
    local d = fleet.create_on(f, ADMIN, BUSY, "node3")
    -- pairs of commands at once (the tenant's max_concurrent_exec is 2): each pair admitted
    -- only if the last pair's slots were free on every node when it answered
    local function pair(s1, c1, s2, c2)
      local r1, r2 = http.exec_async(f.router, BUSY, s1, c1), http.exec_async(f.router, BUSY, s2, c2)
      local b1, raw1 = r1.wait()
      local b2, raw2 = r2.wait()
      assert.are.equal(0, b1 and b1.exit_code, raw1)
      assert.are.equal(0, b2 and b2.exit_code, raw2)
    end
    local function logged(node, commands)
      local res = http.request({ url = f.nodes[node].url }, "GET", "/v1/audit?limit=20", { key = BUSY })
      assert.are.equal(200, res.status, res.body)
      local seen = {}
      for _, e in ipairs(res.json.entries) do seen[e.command] = true end
      for _, command in ipairs(commands) do assert.is_true(seen[command], node .. ": " .. command) end
    end
    for round = 1, 4 do
      local on1 = { "echo gc " .. round .. " a", "echo gc " .. round .. " b" }
      pair(a, on1[1], b, on1[2]) -- both end on node1: their ends may share a shipment
      logged("node2", on1)
      local across = { "echo gc " .. round .. " c", "echo gc " .. round .. " d" }
      pair(c, across[1], d, across[2])
      logged("node1", across)
    end
    -- commands that take their turn and run nothing (a NUL in the command: 500) free it
    -- before they answer, too
    local n1, n2 = http.exec_async(f.router, BUSY, a, "echo \0"), http.exec_async(f.router, BUSY, b, "echo \0")
    local _, raw1 = n1.wait()
    local _, raw2 = n2.wait()
    for _, raw in ipairs({ raw1, raw2 }) do -- answered (a 500), not run
      assert.are_not.equal("", raw)
      assert.is_nil(raw:find('"exit_code"', 1, true), raw)
    end
    pair(c, "echo after the nul c", d, "echo after the nul d")
    slots_given_back(BUSY)
    for _, s in ipairs({ a, b, c, d }) do http.delete(f.router, BUSY, s) end
  end)

  it("stops a revoked key on every node at once (a notice, not the cache's time)", function()
    local made = http.request(f.router, "POST", "/v1/admin/keys",
      { key = ADMIN, body = cjson.encode{ tenant = "selfserve", name = "ci" } })
    assert.are.equal(201, made.status, made.body)
    local key = made.json.api_key
    for _, n in ipairs(f.info.nodes) do -- each node looks it up (and caches it)
      assert.are.equal(200, http.request({ url = n.url }, "GET", "/v1/usage", { key = key }).status)
    end
    local revoked = http.request(f.router, "DELETE", "/v1/admin/keys/" .. made.json.key_id, { key = ADMIN })
    assert.are.equal(200, revoked.status)
    assert.is_false(revoked.json.active)
    for _, n in ipairs(f.info.nodes) do
      assert.is_true(proc.wait_until(10, function()
        return http.request({ url = n.url }, "GET", "/v1/usage", { key = key }).status == 401
      end), n.id)
    end
  end)

  -- the audit entries of command, from any node (polled: each node ships its outbox every second)
  local function audited(command)
    local n = 0
    local res = http.request(f.router, "GET", "/v1/audit?limit=500", { key = KEY })
    if res.status == 503 then return -1 end -- the database is back, a node's pool not yet
    assert.are.equal(200, res.status, res.body)
    for _, e in ipairs(res.json.entries) do if e.command == command then n = n + 1 end end
    return n
  end

  it("keeps one audit log of every node's commands", function()
    local by_slot = fleet.nodes(f, ADMIN)
    local on = {}
    for i = 1, 6 do
      local s = http.create(f.router, KEY).json.session_id
      on[by_slot[fleet.slot_of(s)].id] = true
      assert.are.equal(200, http.exec(f.router, KEY, s, "echo audited " .. i).status)
      -- read at once, from every node: a command's row is in the database before its answer
      for _, n in ipairs(f.info.nodes) do
        local res = http.request({ url = n.url }, "GET", "/v1/audit?limit=1", { key = KEY })
        assert.are.equal(200, res.status, res.body)
        assert.are.equal("echo audited " .. i, res.json.entries[1].command, n.id)
      end
      http.delete(f.router, KEY, s)
    end
    for _, n in ipairs(f.info.nodes) do assert.is_true(on[n.id], n.id) end
    for i = 1, 6 do assert.are.equal(1, audited("echo audited " .. i), i) end
    -- the same answer from every node
    for _, n in ipairs(f.info.nodes) do
      local res = http.request({ url = n.url }, "GET", "/v1/audit?limit=2", { key = KEY })
      assert.are.equal(2, #res.json.entries)
      assert.is_string(res.json.next)
    end
  end)

  it("runs the Lua SDK's quick start through the router", function()
    local root = proc.repo_root()
    local cmd = string.format("cd %s && SANDBOX_API_URL=%s SANDBOX_API_KEY=%s %s examples/quickstart.lua 2>&1",
      proc.shell_quote(root), proc.shell_quote(f.router.url), proc.shell_quote(KEY), proc.lua_interpreter())
    assert.are.equal("65536\n0\n", proc.output(cmd))
  end)

  it("keeps a paused session on its node: the fleet's list shows it paused, a call resumes it", function()
    local id = http.create(f.router, KEY, '{"on_idle": "pause"}').json.session_id
    assert.are.equal(200, http.write(f.router, KEY, id, "kept.txt", "in the fleet").status)
    local p = http.request(f.router, "POST", "/v1/sessions/" .. id .. "/pause", { key = KEY })
    assert.are.same({ 200, "paused" }, { p.status, p.json.state })
    local function listed()
      for _, s in ipairs(http.request(f.router, "GET", "/v1/sessions", { key = KEY }).json.sessions) do
        if s.session_id == id then return s end
      end
    end
    assert.are.same({ "paused", "pause" }, { listed().state, listed().on_idle }) -- from the database
    local at = fleet.sql(f, "SELECT paused_at FROM sessions WHERE id = '" .. id .. "' AND paused_at IS NOT NULL")
    assert.is_not_nil(at:match("%d"), at)
    local r = http.exec(f.router, KEY, id, "cat kept.txt")
    assert.are.same({ 200, "in the fleet", "1" }, { r.status, r.json.stdout, r.headers["x-airlock-resumed"] })
    assert.are.equal("active", listed().state)
    assert.are.equal(200, http.delete(f.router, KEY, id).status)
  end)

  it("fails creates closed while the database is down, keeps commands running, then recovers", function()
    local s = http.create(f.router, KEY).json.session_id
    local eg = http.create(f.router, KEY, cjson.encode{ egress = { "pypi" } }).json.session_id
    local ok, out = fleet.sh(f.env, { "db-stop", f.dir })
    assert.is_true(ok, out)
    local refused = http.create(f.router, KEY)
    assert.are.equal(503, refused.status, refused.body)
    -- one of the texts docs/fleet.md shows for a create during an outage (a node's, or HAProxy's own
    -- once every node has failed its check: under load that can come first)
    local doc = proc.read_file(proc.repo_root() .. "/docs/fleet.md")
    assert.truthy(doc:find('`"' .. refused.json.detail .. '"`', 1, true), refused.json.detail)
    local ran = http.exec(f.router, KEY, s, "echo still here")
    assert.are.equal(200, ran.status, ran.body)
    assert.are.equal("still here\n", ran.json.stdout)
    -- an egress event meanwhile waits in its node's outbox (the log shows it from the node)
    assert.are.same({ { status = 403 } },
      egress.probe(f.router, KEY, eg, { { op = "connect", target = "outage.example:443" } }))
    assert.are.equal("outage.example", egress.events(f.router, KEY, eg)[1].host)
    ok, out = fleet.sh(f.env, { "db-start", f.dir })
    assert.is_true(ok, out)
    fleet.reload(f)
    assert.is_true(proc.wait_until(20, function() return http.create(f.router, KEY).status == 201 end))
    -- the command run during the outage reaches the audit log once, with what follows it
    assert.are.equal(200, http.exec(f.router, KEY, s, "echo after the outage").status)
    assert.is_true(proc.wait_until(10, function() return audited("echo after the outage") == 1 end))
    assert.are.equal(1, audited("echo still here"))
    -- and reaches the database once (the log now read from there)
    local events = egress.events(f.router, KEY, eg)
    assert.are.equal(1, #events)
    assert.are.same({ "outage.example", "deny" }, { events[1].host, events[1].decision })
    local list
    assert.is_true(proc.wait_until(10, function()
      list = http.request(f.router, "GET", "/v1/sessions", { key = KEY })
      return list.status == 200 and list.json ~= nil
    end), list and list.raw)
    for _, x in ipairs(list.json.sessions) do http.delete(f.router, KEY, x.session_id) end
  end)

  -- POST path straight to node id's node-to-node listener with "Authorization: Bearer
  -- <secret>" (raw HTTP: the secret never goes on a command line); the status.
  local function internal_post(id, path, secret)
    local socket = require "socket"
    local host, port = fleet.setting(f, "node:" .. id .. ":internal"):match("^([%d.]+):(%d+)$")
    local c = assert(socket.connect(host, tonumber(port)))
    c:settimeout(30)
    c:send("POST " .. path .. " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n"
      .. (secret and ("Authorization: Bearer " .. secret .. "\r\n") or "") .. "\r\n")
    local status = tonumber((c:receive("*l") or ""):match("^HTTP/1%.%d (%d+)"))
    c:close()
    return status
  end

  it("drains a node: its sessions move with their ids and files, it takes no new session", function()
    local by_slot = fleet.nodes(f, ADMIN)
    local moving, sums = {}, {}
    -- the third one sized (issue #24): its template and size go with it
    local SIZED = { template = "python:3.11-slim", memory_mb = 512, cpus = 1.5, disk_mb = 64, max_processes = 100 }
    for i = 1, 3 do
      local id = fleet.create_on(f, ADMIN, KEY, "node2", i == 3 and cjson.encode(SIZED) or nil)
      moving[i] = id
      assert.are.equal(200, http.write(f.router, KEY, id, "notes/a.txt", "file a of " .. id).status)
      assert.are.equal(200, http.write(f.router, KEY, id, "b.txt", string.rep("b" .. i, 3000)).status)
      local res = http.exec(f.router, KEY, id,
        "head -c 65536 /dev/urandom > bin.dat && ln -s notes/a.txt link && sha256sum bin.dat")
      assert.are.equal(200, res.status, res.body)
      sums[i] = res.json.stdout
    end
    -- a session with egress: its proxy's events (denials here: no traffic leaves the machine)
    -- go through its node's outbox to the database, so they move with it
    local eg = fleet.create_on(f, ADMIN, KEY, "node2", cjson.encode{ egress = { "pypi" } })
    assert.are.same({ { status = 403 }, { status = 403 } }, egress.probe(f.router, KEY, eg,
      { { op = "connect", target = "evil.example:443" }, { op = "connect", target = "pypi.org:22" } }))
    local eg_events = egress.events(f.router, KEY, eg)
    assert.are.same({ "evil.example", "host not on allowlist" }, { eg_events[1].host, eg_events[1].reason })
    assert.are.same({ "pypi.org", "port 22 not allowed" }, { eg_events[2].host, eg_events[2].reason })
    assert.are.equal(2, #eg_events)
    local open_before = http.request(f.router, "GET", "/v1/usage", { key = KEY }).json.sessions_open
    -- node-to-node routes: never through the router; never without the fleet's secret; and a
    -- node takes only a session the database says is moving to it
    local internal = "/v1/fleet/internal/sessions/" .. moving[1]
    local denied = http.request(f.router, "POST", internal, { key = KEY })
    assert.are.equal(404, denied.status)
    assert.are.same({ detail = "Not Found" }, denied.json) -- HAProxy's own answers in airlockd's shape
    assert.are.equal(404, http.request(f.router, "GET", internal .. "/archive", { key = KEY }).status)
    -- and not on a node's own address either (they live on its node-to-node listener)
    assert.are.equal(404, http.request({ url = f.nodes.node1.url }, "POST", internal, { key = KEY }).status)
    assert.are.equal(401, internal_post("node1", internal))
    assert.are.equal(401, internal_post("node1", internal, string.rep("0", 64)))
    local secret = assert(proc.read_file(f.dir .. "/fleet.secret"))
    assert.are.equal(403, internal_post("node1", internal, secret))
    -- a command in progress finishes where it runs; its session moves after it
    local running = http.exec_async(f.router, KEY, moving[1], "touch started; sleep 2; echo finished", 30)
    assert.is_true(proc.wait_until(15, function()
      return http.exists(f.router, KEY, moving[1], "started")
    end))
    -- the admin route alone: the router program routes each move (told by the database)
    local res = http.request(f.router, "POST", "/v1/admin/nodes/node2/drain", { key = ADMIN })
    assert.are.equal(200, res.status, res.body)
    assert.are.equal("draining", res.json.state)
    assert.are.equal(404, http.request(f.router, "POST", "/v1/admin/nodes/nope/drain", { key = ADMIN }).status)
    -- a caller reading its session all along sees its file, or a 503 + Retry-After while the
    -- session moves, and never anything else
    local seen = {}
    assert.is_true(proc.wait_until(120, function()
      local r = http.read(f.router, KEY, moving[2], "notes/a.txt")
      seen[#seen + 1] = r.status
      if r.status == 503 then
        assert.truthy(r.headers["retry-after"], r.body)
      else
        assert.are.equal(200, r.status, r.body)
        assert.are.equal("file a of " .. moving[2], r.json.content)
      end
      local _, by = fleet.nodes(f, ADMIN)
      return by.node2.state == "drained" and r.status == 200
    end, 0.05), "node2 did not drain")
    assert.are.equal(200, seen[#seen])
    local ran = running.wait()
    assert.is_table(ran)
    assert.are.equal("finished\n", ran.stdout)
    local _, after = fleet.nodes(f, ADMIN)
    assert.are.equal("drained", after.node2.state)
    assert.are.equal(0, after.node2.sessions)
    -- the router program routes each move as it is told of it (the last one may have moved a
    -- moment ago): until then a caller gets 503 + Retry-After, never anything else
    for _, id in ipairs({ moving[1], moving[2], moving[3], eg }) do
      assert.is_true(proc.wait_until(15, function()
        local r = http.read(f.router, KEY, id, "x")
        if r.status == 503 then assert.truthy(r.headers["retry-after"], r.body) end
        return r.status == 200
      end, 0.1), id .. " is not routed")
    end
    -- every session kept its id and every byte of its files, now on another node; none lost
    for i, id in ipairs(moving) do
      local a = http.read(f.router, KEY, id, "notes/a.txt")
      assert.are.equal(200, a.status, a.body)
      assert.are.equal("file a of " .. id, a.json.content)
      assert.are.equal(string.rep("b" .. i, 3000), http.read(f.router, KEY, id, "b.txt").json.content)
      local check = http.exec(f.router, KEY, id, "sha256sum bin.dat && readlink link")
      assert.are.equal(200, check.status, check.body)
      assert.are.equal(sums[i] .. "notes/a.txt\n", check.json.stdout)
      -- straight on the drained node: it names the session's new node (503, never its files)
      assert.are.equal(503, http.read({ url = f.nodes.node2.url }, KEY, id, "b.txt").status)
    end
    assert.are.equal(open_before, http.request(f.router, "GET", "/v1/usage", { key = KEY }).json.sessions_open)
    -- the sized session has its template and size on its new node, and in the fleet's list
    local function shape(s)
      return { template = s.template, memory_mb = s.memory_mb, cpus = s.cpus, disk_mb = s.disk_mb,
               max_processes = s.max_processes }
    end
    local got = http.request(f.router, "GET", "/v1/sessions/" .. moving[3], { key = KEY })
    assert.are.equal(200, got.status, got.body)
    assert.are.same(SIZED, shape(got.json))
    local listed
    for _, s in ipairs(http.request(f.router, "GET", "/v1/sessions", { key = KEY }).json.sessions) do
      if s.session_id == moving[3] then listed = s end
    end
    assert.are.same(SIZED, shape(listed))
    local mem = http.exec(f.router, KEY, moving[3], "grep MemTotal /proc/meminfo")
    assert.truthy(mem.json.stdout:find("MemTotal:%s+524288 kB"), mem.body)
    -- the egress log moved with its session: the same events, once each, from its new node
    assert.are.same(eg_events, egress.events(f.router, KEY, eg))
    assert.are.equal(200, http.delete(f.router, KEY, eg).status)
    -- and it goes with the session (nothing can read it any more)
    assert.are.equal("0", fleet.sql(f, "SELECT count(*) FROM egress_events WHERE session_id = '" .. eg .. "'"))
    -- new sessions go elsewhere; the drained node refuses them
    local made = {}
    for i = 1, 3 do
      local c = http.create(f.router, KEY)
      assert.are.equal(201, c.status, c.body)
      assert.are_not.equal("node2", by_slot[fleet.slot_of(c.json.session_id)].id)
      made[i] = c.json.session_id
    end
    assert.are.equal(503, http.create({ url = f.nodes.node2.url }, KEY).status)
    for _, s in ipairs(made) do http.delete(f.router, KEY, s) end
    for _, s in ipairs(moving) do assert.are.equal(200, http.delete(f.router, KEY, s).status) end
  end)

  it("answers 503 naming a killed node's sessions, then 410 lost, freeing the tenant's slots", function()
    local _, by_id = fleet.nodes(f, ADMIN)
    local victim = by_id.node3
    local mine = { fleet.create_on(f, ADMIN, KEY, "node3", cjson.encode{ egress = { "pypi" } }),
                   fleet.create_on(f, ADMIN, KEY, "node3") }
    -- an egress event of a session that will be lost: it goes when the session is declared lost
    assert.are.same({ { status = 403 } },
      egress.probe(f.router, KEY, mine[1], { { op = "connect", target = "evil.example:443" } }))
    local events_of_lost = "SELECT count(*) FROM egress_events WHERE session_id = '" .. mine[1] .. "'"
    assert.is_true(proc.wait_until(10, function() return fleet.sql(f, events_of_lost) == "1" end))
    local open_before = http.request(f.router, "GET", "/v1/usage", { key = KEY }).json.sessions_open
    assert.is_true(proc.succeeded(os.execute("kill -9 " .. f.nodes.node3.pid)))
    assert.is_true(proc.wait_until(5, function() return not proc.alive(f.nodes.node3.pid) end))
    -- a create at once: HAProxy retries the connection node3 refuses on another node
    local function create_elsewhere()
      local res = http.create(f.router, KEY)
      assert.are.equal(201, res.status, res.body)
      assert.are_not.equal(victim.slot, fleet.slot_of(res.json.session_id))
      return res.json.session_id
    end
    local created = { create_elsewhere() }
    -- until HAProxy's checks mark node3 down, HAProxy itself answers 503; then another node
    -- answers from the database, naming node3 (checked before more creates: its sessions
    -- are declared lost LOST_AFTER s after its last heartbeat)
    local waiting
    assert.is_true(proc.wait_until(10, function()
      waiting = http.read(f.router, KEY, mine[1], "x")
      assert.are.equal(503, waiting.status, waiting.body)
      assert.is_string(waiting.headers["retry-after"])
      return waiting.json.detail:find("node3", 1, true) ~= nil
    end), waiting.body)
    -- creates keep succeeding on the other nodes
    for i = 2, 6 do created[i] = create_elsewhere() end
    local lost
    assert.is_true(proc.wait_until(LOST_AFTER + 15, function()
      lost = http.read(f.router, KEY, mine[1], "x")
      return lost.status == 410
    end), lost and lost.body)
    assert.matches("lost with its node 'node3'", lost.json.detail, 1, true)
    assert.is_true(proc.wait_until(5, function() return fleet.sql(f, events_of_lost) == "0" end))
    local usage = http.request(f.router, "GET", "/v1/usage", { key = KEY }).json
    assert.are.equal(open_before - 2 + 6, usage.sessions_open)
    local _, after = fleet.nodes(f, ADMIN)
    assert.are.equal("dead", after.node3.state)
    -- the node comes back on its state directory: alive again, its lost sessions stay lost
    local ok, out = fleet.sh(f.env, { "start-node", f.dir, "node3" })
    assert.is_true(ok, out)
    fleet.reload(f)
    assert.is_true(proc.wait_until(10, function()
      local _, b = fleet.nodes(f, ADMIN)
      return b.node3.state == "active"
    end))
    assert.are.equal(410, http.read(f.router, KEY, mine[2], "x").status)
    assert.are.equal(410, http.read({ url = f.nodes.node3.url }, KEY, mine[2], "x").status)
    for _, s in ipairs(created) do http.delete(f.router, KEY, s) end
  end)

  it("keeps every route when the router is reloaded", function()
    local ids = {}
    for i = 1, 4 do
      ids[i] = http.create(f.router, KEY).json.session_id
      assert.are.equal(200, http.write(f.router, KEY, ids[i], "keep.txt", "kept " .. i).status)
    end
    local before = f.info.haproxy.pid
    local ok, out = fleet.sh(f.env, { "router", f.dir })
    assert.is_true(ok, out)
    fleet.reload(f)
    assert.are_not.equal(before, f.info.haproxy.pid)
    assert.is_true(proc.wait_until(10, function() return not proc.alive(before) end))
    for i, id in ipairs(ids) do
      assert.are.equal("kept " .. i, http.read(f.router, KEY, id, "keep.txt").json.content)
      assert.are.equal(200, http.delete(f.router, KEY, id).status)
    end
  end)

  it("declares a stopped (SIGSTOP) node's sessions lost, and the node drops them on SIGCONT", function()
    local s = fleet.create_on(f, ADMIN, KEY, "node1")
    local pid = f.nodes.node1.pid
    assert.is_true(proc.succeeded(os.execute("kill -STOP " .. pid)))
    local ok, err = pcall(function()
      -- a request may hang on the stopped node until HAProxy's checks take it out: short tries
      local answer
      assert.is_true(proc.wait_until(LOST_AFTER + 20, function()
        local tried, res = pcall(http.request, f.router, "GET", "/v1/sessions/" .. s .. "/read?path=x",
          { key = KEY, max_time = 3 })
        answer = tried and res or answer
        return tried and res.status == 410
      end), answer and answer.body)
      assert.matches("lost with its node 'node1'", answer.json.detail, 1, true)
    end)
    os.execute("kill -CONT " .. pid)
    assert.is_true(ok, err)
    assert.is_true(proc.wait_until(10, function()
      local _, b = fleet.nodes(f, ADMIN)
      return b.node1.state == "active"
    end))
    assert.are.equal(410, http.read({ url = f.nodes.node1.url }, KEY, s, "x").status)
  end)

  it("declares lost at once the sessions a node comes back without (its state wiped)", function()
    local s = fleet.create_on(f, ADMIN, KEY, "node1")
    local open_before = http.request(f.router, "GET", "/v1/usage", { key = KEY }).json.sessions_open
    local pid = f.nodes.node1.pid
    assert.is_true(proc.succeeded(os.execute("kill -9 " .. pid)))
    assert.is_true(proc.wait_until(5, function() return not proc.alive(pid) end))
    os.remove(f.dir .. "/nodes/node1/state/sessions.json")
    local ok, out = fleet.sh(f.env, { "start-node", f.dir, "node1" })
    assert.is_true(ok, out)
    fleet.reload(f)
    assert.are.equal(410, http.read({ url = f.nodes.node1.url }, KEY, s, "x").status)
    assert.are.equal(open_before - 1, http.request(f.router, "GET", "/v1/usage", { key = KEY }).json.sessions_open)
  end)

  it("drains a node from the command line; its moved session keeps its route when the router restarts", function()
    local s = fleet.create_on(f, ADMIN, KEY, "node1")
    assert.are.equal(200, http.write(f.router, KEY, s, "kept.txt", "kept by " .. s).status)
    local ok, out = fleet.sh(f.env, { "drain", f.dir, "node1" })
    assert.is_true(ok, out)
    assert.matches("node node1 drained in [%d.]+ s", out)
    local _, by = fleet.nodes(f, ADMIN)
    assert.are.equal("drained", by.node1.state)
    local r = http.read(f.router, KEY, s, "kept.txt")
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("kept by " .. s, r.json.content)
    -- the router dies and is started again: same address, the moved session still routed
    local router, old = f.info.router, f.info.haproxy.pid
    assert.is_true(proc.succeeded(os.execute("kill -9 " .. old)))
    assert.is_true(proc.wait_until(5, function() return not proc.alive(old) end))
    local started, says = fleet.sh(f.env, { "router", f.dir })
    assert.is_true(started, says)
    fleet.reload(f)
    assert.are.equal(router, f.info.router)
    assert.are_not.equal(old, f.info.haproxy.pid)
    assert.is_true(proc.alive(f.info.haproxy.router_pid))
    r = http.read(f.router, KEY, s, "kept.txt")
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("kept by " .. s, r.json.content)
    assert.are.equal(200, http.delete(f.router, KEY, s).status)
    local bad_ok, bad = fleet.sh(f.env, { "drain", f.dir, "nope" })
    assert.is_false(bad_ok)
    assert.matches("no node nope", bad)
  end)

  it("leaves nothing running after down", function()
    local pids = fleet.pids(f)
    -- beside the fleet.json ones: PostgreSQL's backends, each node's cgroup guard
    assert.is_true(#pids > 2 + 2 * #f.info.nodes, #pids .. " processes")
    fleet.down(f)
    for _, pid in ipairs(pids) do assert.is_false(proc.alive(pid), "pid " .. pid .. " still runs") end
  end)
end)
