-- Snapshots in a fleet on one machine (issue 26 item 3): a real 2-node fleet (scripts/fleet.sh)
-- whose nodes share one SANDBOX_SNAPSHOT_DIR. A snapshot taken on the session's node (the router
-- sends the session's requests there) is listed and read through the router whichever node
-- answers, sessions made from it through the router start with its files on either node, and a
-- DELETE through any node removes it for all. A memory snapshot (a kernel's state) taken on one
-- node makes a session on the other whose kernel has that state.
local cjson = require "cjson"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "fleet-key-" .. string.rep("b", 24)

describe("snapshots in a 2-node fleet sharing SANDBOX_SNAPSHOT_DIR", function()
  local f

  setup(function()
    f = fleet.up{ nodes = 2, shared_snapshots = true, env = {
      SANDBOX_API_KEYS = "main:" .. KEY,
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 20, requests_per_minute = 100000 } },
    } }
  end)

  teardown(function()
    fleet.down(f)
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
    local left = proc.output("ls -A " .. proc.shell_quote(f.snapshot_dir))
    assert.are.equal(".lock\npaused\n", left) -- the store's lock file and its (empty) paused sessions
    assert.are.equal("", proc.output("ls -A " .. proc.shell_quote(f.snapshot_dir .. "/paused")))
    assert.are.equal("0", fleet.sql(f, "SELECT count(*) FROM snapshots"))
  end)

  it("makes a session from a memory snapshot taken on the other node, its kernel's state restored there", function()
    local function call(n, method, path, body)
      return http.request(n, method, path, { key = KEY, body = body and cjson.encode(body), max_time = 120 })
    end
    local function value(n, sid, kid, code)
      local r = call(n, "POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute",
        { code = code, timeout = 30 })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal(cjson.null, r.json.error, r.body)
      return (r.json.results[1] or {})["text/plain"]
    end
    local c = http.create(f.router, KEY)
    assert.are.equal(201, c.status, c.body)
    local sid = c.json.session_id
    local k = call(f.router, "POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" })
    assert.are.equal(201, k.status, k.body)
    local kid = k.json.kernel_id
    value(f.router, sid, kid, "x = 41")
    local s = call(f.router, "POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true })
    assert.are.equal(201, s.status, s.body)
    assert.is_true(s.json.memory, s.body)
    local taken_on = fleet.sql(f, "SELECT node FROM snapshots WHERE id = '" .. s.json.snapshot_id .. "'")
    local other = taken_on == "node1" and "node2" or "node1"
    assert.is_truthy(f.nodes[taken_on], taken_on)
    -- made directly on the node that did not take it; used through the router afterwards
    local fork = http.create(f.nodes[other], KEY, cjson.encode{ from_snapshot = s.json.snapshot_id })
    assert.are.equal(201, fork.status, fork.body)
    local fid = fork.json.session_id
    assert.are.equal(other, fleet.sql(f, "SELECT node FROM sessions WHERE id = '" .. fid .. "'"))
    assert.are.equal("42", value(f.router, fid, kid, "x + 1"))
    assert.are.equal("42", value(f.router, sid, kid, "x + 1")) -- the origin runs on, its own
    assert.are.equal(200, http.delete(f.router, KEY, fid).status)
    assert.are.equal(200, http.delete(f.router, KEY, sid).status)
    local d = http.request(f.router, "DELETE", "/v1/snapshots/" .. s.json.snapshot_id, { key = KEY })
    assert.are.equal(200, d.status, d.body)
  end)
end)
