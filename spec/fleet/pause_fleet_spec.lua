-- Paused sessions in a fleet's shared store (issue 26 item 5, docs/fleet.md "The shared store"):
-- a real 3-node fleet (scripts/fleet.sh) whose nodes share one SANDBOX_SNAPSHOT_DIR. A session
-- paused on a node leaves its image in the store and no node holds it: the first node a call
-- reaches takes it (of two racing, exactly one), a killed node does not lose it, a drain hands
-- its paused and pause-when-idle sessions over without copying, and a deleted one leaves
-- nothing in the store.
local cjson = require "cjson"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "pause-fleet-" .. string.rep("c", 24)
local ADMIN = "pause-admin-" .. string.rep("d", 30)
local LOST_AFTER = 6

describe("paused sessions in a 3-node fleet's shared store", function()
  local f, shared, store

  setup(function()
    shared = proc.make_temp_dir()
    store = shared .. "/snapshots/paused/"
    f = fleet.up{ nodes = 3, env = {
      SANDBOX_API_KEYS = "main:" .. KEY, SANDBOX_ADMIN_KEY = ADMIN,
      SANDBOX_SNAPSHOT_DIR = shared .. "/snapshots",
      SANDBOX_FLEET_LOST_AFTER = tostring(LOST_AFTER),
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 20, requests_per_minute = 100000 } },
    } }
  end)

  teardown(function()
    fleet.down(f)
    proc.remove_tree(shared)
  end)

  local function row(id)
    return fleet.sql(f, "SELECT node || ' ' || state || ' ' || coalesce(stored->>'workspace', '-')"
      .. " FROM sessions WHERE id = '" .. id .. "'")
  end

  -- a session on node_id with a file, paused through the router: its image is in the store
  local function paused_on(node_id, content, body)
    local id = fleet.create_on(f, ADMIN, KEY, node_id, body)
    assert.are.equal(0, http.exec(f.router, KEY, id, "echo " .. content .. " > f.txt").json.exit_code)
    local p = http.request(f.router, "POST", "/v1/sessions/" .. id .. "/pause", { key = KEY })
    assert.are.same({ 200, "paused" }, { p.status, p.json.state })
    assert.are.equal(node_id .. " active paused/" .. id .. ".img", row(id))
    assert.is_true(proc.run("test -f " .. proc.shell_quote(store .. id .. ".img")))
    return id
  end

  local function in_store(id) return proc.run("test -e " .. proc.shell_quote(store .. id .. ".img")) end

  it("lets exactly one of two nodes racing for a paused session take it, with its files", function()
    local id = paused_on("node1", "raced")
    local path = "/v1/sessions/" .. id .. "/resume"
    local cmd = {}
    for _, n in ipairs{ "node1", "node2" } do
      cmd[#cmd + 1] = string.format("curl -s -o /dev/null -w '%s %%{http_code}\\n' --max-time 60 -X POST -H %s %s &",
        n, proc.shell_quote("X-API-Key: " .. KEY), proc.shell_quote(f.nodes[n].url .. path))
    end
    local out = proc.output("(" .. table.concat(cmd, " ") .. " wait)")
    local winners = {}
    for n, code in out:gmatch("(node%d) (%d+)") do
      if code == "200" then winners[#winners + 1] = n else assert.are.equal("503", code, out) end
    end
    assert.are.equal(1, #winners, out)
    assert.are.equal(winners[1] .. " active -", row(id))
    assert.is_false(in_store(id))
    assert.are.equal("raced\n", http.exec(f.router, KEY, id, "cat f.txt").json.stdout)
    assert.are.equal(200, http.delete(f.router, KEY, id).status)
  end)

  it("keeps a killed node's paused session: declared dead, it resumes through the router elsewhere", function()
    local id = paused_on("node3", "survives")
    assert.is_true(proc.succeeded(os.execute("kill -9 " .. f.nodes.node3.pid)))
    assert.is_true(proc.wait_until(LOST_AFTER + 15, function()
      return fleet.sql(f, "SELECT state FROM nodes WHERE id = 'node3'") == "dead"
    end))
    assert.are.equal("node3 active paused/" .. id .. ".img", row(id)) -- not lost: no 410
    local res
    assert.is_true(proc.wait_until(20, function()
      res = http.exec(f.router, KEY, id, "cat f.txt")
      return res.status == 200
    end), res and res.body)
    assert.are.equal("survives\n", res.json.stdout)
    assert.are.equal("1", res.headers["x-airlock-resumed"])
    assert.matches("^node[12] active %-$", row(id))
    assert.is_false(in_store(id))
    -- the router sends it to its new node from now on (its map follows the database's notice)
    local slot = fleet.sql(f, "SELECT lpad(to_hex(n.slot), 2, '0') FROM nodes n JOIN sessions s ON s.node = n.id"
      .. " WHERE s.id = '" .. id .. "'")
    assert.is_true(proc.wait_until(5, function()
      return proc.read_file(f.dir .. "/haproxy/router.log"):find("session " .. id .. " routed to slot_" .. slot, 1,
        true) ~= nil
    end))
    assert.are.equal("survives\n", http.exec(f.router, KEY, id, "cat f.txt").json.stdout)
    assert.are.equal(200, http.delete(f.router, KEY, id).status)
  end)

  it("drains a node by handing over its paused and pause-when-idle sessions without copying", function()
    local paused = paused_on("node2", "was-paused")
    local idle = fleet.create_on(f, ADMIN, KEY, "node2", '{"on_idle": "pause"}')
    assert.are.equal(0, http.exec(f.router, KEY, idle, "echo was-idle > f.txt").json.exit_code)
    local d = http.request(f.router, "POST", "/v1/admin/nodes/node2/drain", { key = ADMIN })
    assert.are.equal(200, d.status, d.body)
    assert.is_true(proc.wait_until(30, function()
      return fleet.sql(f, "SELECT state FROM nodes WHERE id = 'node2'") == "drained"
    end))
    -- both in the store, handed to node1 (the only active node), none reported unmoved
    assert.are.equal("node1 active paused/" .. paused .. ".img", row(paused))
    assert.are.equal("node1 active paused/" .. idle .. ".img", row(idle))
    local _, by_id = fleet.nodes(f, ADMIN)
    assert.are.same({}, by_id.node2.unmoved or {})
    for id, content in pairs{ [paused] = "was-paused\n", [idle] = "was-idle\n" } do
      local res = http.exec(f.router, KEY, id, "cat f.txt")
      assert.are.same({ 200, content }, { res.status, res.json.stdout }, res.body)
      assert.are.equal("node1 active -", row(id))
      assert.is_false(in_store(id))
    end
  end)

  it("leaves nothing in the store when a paused session is deleted", function()
    local id = paused_on("node1", "gone")
    assert.are.equal(200, http.delete(f.router, KEY, id).status)
    assert.is_false(in_store(id))
    assert.are.equal("", row(id))
    assert.are.equal(404, http.exec(f.router, KEY, id, "true").status)
    assert.are.equal("", proc.output("ls -A " .. proc.shell_quote(store)))
  end)
end)

describe("a stored paused session past SANDBOX_PAUSED_TTL", function()
  local f, shared

  setup(function()
    shared = proc.make_temp_dir()
    f = fleet.up{ nodes = 1, env = { -- any node sweeps: one shows it
      SANDBOX_API_KEYS = "main:" .. KEY, SANDBOX_SNAPSHOT_DIR = shared .. "/snapshots",
      SANDBOX_SESSION_TTL = "4", SANDBOX_PAUSED_TTL = "2", -- the reaper sweeps every second
    } }
  end)

  teardown(function()
    fleet.down(f)
    proc.remove_tree(shared)
  end)

  it("is deleted by a node's sweep, its image gone from the store", function()
    local id = http.create(f.router, KEY).json.session_id
    assert.are.equal(200, http.request(f.router, "POST", "/v1/sessions/" .. id .. "/pause", { key = KEY }).status)
    local img = shared .. "/snapshots/paused/" .. id .. ".img"
    assert.is_true(proc.run("test -f " .. proc.shell_quote(img)))
    assert.is_true(proc.wait_until(15, function()
      return fleet.sql(f, "SELECT count(*) FROM sessions WHERE id = '" .. id .. "'") == "0"
    end))
    assert.is_true(proc.wait_until(5, function() return not proc.run("test -e " .. proc.shell_quote(img)) end))
    assert.are.equal(404, http.exec(f.router, KEY, id, "true").status)
  end)
end)
