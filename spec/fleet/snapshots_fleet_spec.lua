-- Snapshots in a fleet on one machine (issue 26 item 3): a real 2-node fleet (scripts/fleet.sh)
-- whose nodes share one SANDBOX_SNAPSHOT_DIR. A snapshot taken on the session's node (the router
-- sends the session's requests there) is listed and read through the router whichever node
-- answers, sessions made from it through the router start with its files on either node, and a
-- DELETE through any node removes it for all.
local cjson = require "cjson"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "fleet-key-" .. string.rep("b", 24)

describe("snapshots in a 2-node fleet sharing SANDBOX_SNAPSHOT_DIR", function()
  local f, shared

  setup(function()
    shared = proc.make_temp_dir()
    f = fleet.up{ nodes = 2, env = {
      SANDBOX_API_KEYS = "main:" .. KEY, SANDBOX_SNAPSHOT_DIR = shared .. "/snapshots",
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 20, requests_per_minute = 100000 } },
    } }
  end)

  teardown(function()
    fleet.down(f)
    proc.remove_tree(shared)
  end)

  it("takes a snapshot on the session's node and serves it from every node", function()
    local c = http.create(f.router, KEY)
    assert.are.equal(201, c.status, c.body)
    local id = c.json.session_id
    assert.are.equal(0, http.exec(f.router, KEY, id, "echo shared > f.txt").json.exit_code)
    local s = http.request(f.router, "POST", "/v1/sessions/" .. id .. "/snapshots",
      { key = KEY, body = '{"name": "x"}' })
    assert.are.equal(201, s.status, s.body)
    local snap = s.json.snapshot_id

    -- recorded in PostgreSQL by the node that took it; the list is read from there
    local node_of = fleet.sql(f, "SELECT node FROM snapshots WHERE id = '" .. snap .. "'")
    assert.is_truthy(f.nodes[node_of], node_of)
    fleet.sql(f, "UPDATE snapshots SET name = 'from-db' WHERE id = '" .. snap .. "'")
    for _, n in pairs(f.nodes) do
      local list = http.request(n, "GET", "/v1/snapshots", { key = KEY })
      assert.are.same({ snap, "from-db" }, { list.json.snapshots[1].snapshot_id, list.json.snapshots[1].name })
    end
    fleet.sql(f, "UPDATE snapshots SET name = 'x' WHERE id = '" .. snap .. "'")

    for _, n in pairs(f.nodes) do -- each node sees it, directly and through the router
      local one = http.request(n, "GET", "/v1/snapshots/" .. snap, { key = KEY })
      assert.are.equal(200, one.status, one.body)
      assert.are.same(s.json, one.json)
      local list = http.request(f.router, "GET", "/v1/snapshots", { key = KEY })
      assert.are.equal(1, #list.json.snapshots, list.body)
    end
    -- sessions from it, made on each node
    for node_id, n in pairs(f.nodes) do
      local fork = http.create(n, KEY, cjson.encode{ from_snapshot = snap })
      assert.are.equal(201, fork.status, node_id .. ": " .. fork.body)
      assert.are.equal("shared\n", http.exec(f.router, KEY, fork.json.session_id, "cat f.txt").json.stdout)
    end

    local d = http.request(f.router, "DELETE", "/v1/snapshots/" .. snap, { key = KEY })
    assert.are.equal(200, d.status, d.body)
    for _, n in pairs(f.nodes) do
      assert.are.equal(404, http.request(n, "GET", "/v1/snapshots/" .. snap, { key = KEY }).status)
    end
    local left = proc.output("ls -A " .. proc.shell_quote(shared .. "/snapshots"))
    assert.are.equal(".lock\npaused\n", left) -- the store's lock file and its (empty) paused sessions
    assert.are.equal("", proc.output("ls -A " .. proc.shell_quote(shared .. "/snapshots/paused")))
    assert.are.equal("0", fleet.sql(f, "SELECT count(*) FROM snapshots"))
  end)
end)
