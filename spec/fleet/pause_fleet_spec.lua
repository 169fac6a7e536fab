-- Paused sessions in a fleet's shared store (issue 26 item 5, docs/fleet.md "The shared store"):
-- a real 3-node fleet (scripts/fleet.sh) whose nodes share one SANDBOX_SNAPSHOT_DIR. A session
-- paused on a node leaves its image in the store and no node holds it: the first node a call
-- reaches takes it (of two racing, exactly one), a killed node does not lose it, a drain hands
-- its paused and pause-when-idle sessions over without copying, and a deleted one leaves
-- nothing in the store. A session paused with its kernel's memory (x = 41) goes to the store
-- with its memory image: after its node's kill -9, another node restores the kernel (x + 1 is
-- 42); a drain hands it over the same way (with egress: its proxy pass is let out by the new
-- node), and pauses an idle one with a kernel into the store; an image whose restore fails goes
-- back to the store for another try, as does one another runsc version made (409); a deleted
-- one leaves nothing.
local cjson = require "cjson"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "pause-fleet-" .. string.rep("c", 24)
local ADMIN = "pause-admin-" .. string.rep("d", 30)
local LOST_AFTER = 6
-- a kernel's CONNECT through the session's egress proxy with the pass in its HTTPS_PROXY: the
-- proxy's status line (407: the pass was refused; 502: let past, the upstream unreachable, as
-- SANDBOX_EGRESS_DNS points nowhere in these fleets)
local PROXY_PROBE = [[
import socket, os, base64, urllib.parse
def probe():
    u = urllib.parse.urlparse(os.environ['HTTPS_PROXY'])
    auth = base64.b64encode((u.username + ':' + u.password).encode()).decode()
    nl = chr(13) + chr(10)
    c = socket.create_connection(('10.0.2.0', 3128), timeout=20)
    c.sendall(('CONNECT pypi.org:443 HTTP/1.1' + nl + 'Host: pypi.org:443' + nl
               + 'Proxy-Authorization: Basic ' + auth + nl + nl).encode())
    line = c.recv(200).decode().split(nl)[0]
    c.close()
    return line]]

describe("paused sessions in a 3-node fleet's shared store", function()
  local f, store

  setup(function()
    f = fleet.up{ nodes = 3, shared_snapshots = true, env = {
      SANDBOX_API_KEYS = "main:" .. KEY, SANDBOX_ADMIN_KEY = ADMIN, SANDBOX_EGRESS_POLICY = '{"*": ["pypi"]}',
      SANDBOX_FLEET_LOST_AFTER = tostring(LOST_AFTER),
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 20, requests_per_minute = 100000 } },
    } }
    store = f.snapshot_dir .. "/paused/"
  end)

  teardown(function()
    fleet.down(f)
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

  local function call(method, path, body)
    return http.request(f.router, method, path, { key = KEY, body = body and cjson.encode(body), max_time = 120 })
  end

  -- a kernel cell's value through the router (its call resumes a paused session)
  local function value(id, kid, code)
    local r = call("POST", "/v1/sessions/" .. id .. "/kernels/" .. kid .. "/execute", { code = code, timeout = 30 })
    assert.are.equal(200, r.status, r.body)
    assert.are.equal(cjson.null, r.json.error, r.body)
    return (r.json.results[1] or {})["text/plain"], r
  end

  -- a session on node_id (made with body) whose Python kernel holds x = 41 (and ran the cell
  -- code, if given), paused with its memory through the router: its workspace and memory images
  -- are in the store, the row names both
  local function memory_paused_on(node_id, body, code)
    local id = fleet.create_on(f, ADMIN, KEY, node_id, body)
    local k = call("POST", "/v1/sessions/" .. id .. "/kernels", { language = "python" })
    assert.are.equal(201, k.status, k.body)
    value(id, k.json.kernel_id, "x = 41")
    if code then value(id, k.json.kernel_id, code) end
    local p = call("POST", "/v1/sessions/" .. id .. "/pause")
    assert.are.same({ 200, "paused" }, { p.status, p.json.state }, p.body)
    assert.is_true(p.json.image_bytes > 1000000, p.body) -- a Python process's pages
    assert.are.equal(node_id .. " active paused/" .. id .. ".img", row(id))
    assert.are.equal(string.format("paused/%s.ckpt %d", id, p.json.image_bytes),
      fleet.sql(f, "SELECT stored->'memory'->>'dir' || ' ' || (stored->'memory'->>'bytes')"
        .. " FROM sessions WHERE id = '" .. id .. "'"))
    assert.is_true(proc.run("test -s " .. proc.shell_quote(store .. id .. ".ckpt/checkpoint.img")))
    assert.is_false(proc.run("test -e " .. proc.shell_quote(f.dir .. "/nodes/" .. node_id .. "/state/images/" .. id
      .. ".ckpt")))
    return id, k.json.kernel_id
  end

  -- what of session id's memory image is left in the store and in every node's images
  local function memory_left(id)
    return proc.output("ls -d " .. proc.shell_quote(store .. id) .. ".ckpt* " .. proc.shell_quote(f.dir)
      .. "/nodes/*/state/images/" .. proc.shell_quote(id) .. ".ckpt* 2>/dev/null || true")
  end

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
    local mem, kid = memory_paused_on("node3")
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

    -- paused with its memory: another node restores its kernel from the stored image (x kept)
    assert.are.equal("node3 active paused/" .. mem .. ".img", row(mem))
    local x, cell
    assert.is_true(proc.wait_until(30, function()
      x, cell = nil, call("POST", "/v1/sessions/" .. mem .. "/kernels/" .. kid .. "/execute",
        { code = "x + 1", timeout = 30 })
      if cell.status == 200 then x = (cell.json.results[1] or {})["text/plain"] end
      return cell.status ~= 503
    end), cell and cell.body)
    assert.are.equal(200, cell.status, cell.body)
    assert.are.equal("42", x, cell.body)
    assert.are.equal("1", cell.headers["x-airlock-resumed"])
    assert.matches("^node[12] active %-$", row(mem))
    assert.are.equal("43", value(mem, kid, "x + 2"))
    assert.is_true(proc.wait_until(20, function() return memory_left(mem) == "" end), memory_left(mem))
    assert.are.equal(200, http.delete(f.router, KEY, mem).status)
  end)

  it("drains a node by handing over its paused and pause-when-idle sessions without copying", function()
    local paused = paused_on("node2", "was-paused")
    -- with egress: the proxy variables in its kernel's memory (its pass, the same on every node)
    -- let it out through node1's proxy after the handover as through node2's before (no 407)
    local mem, kid = memory_paused_on("node2", '{"egress": ["pypi"]}', PROXY_PROBE .. "\nbefore = probe()")
    local idle = fleet.create_on(f, ADMIN, KEY, "node2", '{"on_idle": "pause"}')
    assert.are.equal(0, http.exec(f.router, KEY, idle, "echo was-idle > f.txt").json.exit_code)
    local k = call("POST", "/v1/sessions/" .. idle .. "/kernels", { language = "python" })
    assert.are.equal(201, k.status, k.body)
    value(idle, k.json.kernel_id, "y = 7")
    local d = http.request(f.router, "POST", "/v1/admin/nodes/node2/drain", { key = ADMIN })
    assert.are.equal(200, d.status, d.body)
    assert.is_true(proc.wait_until(30, function()
      return fleet.sql(f, "SELECT state FROM nodes WHERE id = 'node2'") == "drained"
    end))
    -- both in the store, handed to node1 (the only active node), none reported unmoved
    assert.are.equal("node1 active paused/" .. paused .. ".img", row(paused))
    assert.are.equal("node1 active paused/" .. idle .. ".img", row(idle))
    assert.are.equal("node1 active paused/" .. mem .. ".img", row(mem))
    local _, by_id = fleet.nodes(f, ADMIN)
    assert.are.same({}, by_id.node2.unmoved or {})
    for id, content in pairs{ [paused] = "was-paused\n", [idle] = "was-idle\n" } do
      local res = http.exec(f.router, KEY, id, "cat f.txt")
      assert.are.same({ 200, content }, { res.status, res.json.stdout }, res.body)
      assert.are.equal("node1 active -", row(id))
      assert.is_false(in_store(id))
    end
    -- with their kernels' memory: the paused one's x, the idle one's y (paused with it by the drain)
    assert.are.equal("42", value(mem, kid, "x + 1"))
    local after = value(mem, kid, "(before, probe())")
    assert.matches("^%('HTTP/1%.1 502 Bad Gateway', 'HTTP/1%.1 502 Bad Gateway'%)$", after)
    assert.are.equal("8", value(idle, k.json.kernel_id, "y + 1"))
    assert.are.equal("node1 active -", row(mem))
    assert.is_true(proc.wait_until(20, function() return memory_left(mem) == "" and memory_left(idle) == "" end))
  end)

  it("puts a memory image of another runsc, or whose restore failed, back in the store, for another try", function()
    local id, kid = memory_paused_on("node1")
    -- made by another runsc version (so the row says): the taking node refuses it (409 naming
    -- both) before anything changes, and it goes back to the store
    local version = "SELECT stored->'memory'->>'runsc_version' FROM sessions WHERE id = '" .. id .. "'"
    local function set_version(v)
      fleet.sql(f, "UPDATE sessions SET stored = jsonb_set(stored, '{memory,runsc_version}', to_jsonb('" .. v
        .. "'::text)) WHERE id = '" .. id .. "'")
    end
    local real = fleet.sql(f, version)
    assert.matches("^runsc version ", real)
    set_version("runsc version release-0-other")
    local v = call("POST", "/v1/sessions/" .. id .. "/resume")
    assert.are.equal(409, v.status, v.body)
    assert.truthy(v.body:find("release-0-other", 1, true) and v.body:find(real, 1, true), v.body)
    assert.are.equal("node1 active paused/" .. id .. ".img", row(id))
    assert.are.equal("runsc version release-0-other", fleet.sql(f, version))
    assert.are.equal(store .. id .. ".ckpt\n", memory_left(id))
    set_version(real)
    -- damaged in the store: its state file cut short (its bytes kept aside, to be put back)
    local img = store .. id .. ".ckpt/checkpoint.img"
    local aside = f.dir .. "/checkpoint.aside"
    assert.is_true(proc.run("cp " .. proc.shell_quote(img) .. " " .. proc.shell_quote(aside) .. " && truncate -s 4096 "
      .. proc.shell_quote(img)))
    local r = call("POST", "/v1/sessions/" .. id .. "/kernels/" .. kid .. "/execute", { code = "x + 1", timeout = 30 })
    assert.are.equal(500, r.status, r.body)
    assert.truthy(r.body:find("stays paused", 1, true), r.body)
    -- back in the store, workspace and memory, for any node
    assert.are.equal("node1 active paused/" .. id .. ".img", row(id))
    assert.are.equal(store .. id .. ".ckpt\n", memory_left(id))
    assert.is_true(proc.run("cp " .. proc.shell_quote(aside) .. " " .. proc.shell_quote(img)))
    assert.are.equal("42", value(id, kid, "x + 1"))
    assert.are.equal("node1 active -", row(id))
    assert.are.equal(200, http.delete(f.router, KEY, id).status)
    assert.is_true(proc.wait_until(20, function() return memory_left(id) == "" end), memory_left(id))
  end)

  it("leaves nothing in the store when a paused session is deleted", function()
    local id = paused_on("node1", "gone")
    local mem = memory_paused_on("node1")
    assert.are.equal(200, http.delete(f.router, KEY, id).status)
    assert.are.equal(200, http.delete(f.router, KEY, mem).status)
    assert.are.equal("", memory_left(mem))
    assert.is_false(in_store(id))
    assert.are.equal("", row(id))
    assert.are.equal(404, http.exec(f.router, KEY, id, "true").status)
    assert.are.equal("", proc.output("ls -A " .. proc.shell_quote(store)))
  end)
end)

describe("a stored paused session past SANDBOX_PAUSED_TTL", function()
  local f

  setup(function()
    f = fleet.up{ nodes = 1, shared_snapshots = true, env = { -- any node sweeps: one shows it
      SANDBOX_API_KEYS = "main:" .. KEY,
      SANDBOX_SESSION_TTL = "4", SANDBOX_PAUSED_TTL = "2", -- the reaper sweeps every second
    } }
  end)

  teardown(function()
    fleet.down(f)
  end)

  it("is deleted by a node's sweep, its image gone from the store", function()
    local id = http.create(f.router, KEY).json.session_id
    assert.are.equal(200, http.request(f.router, "POST", "/v1/sessions/" .. id .. "/pause", { key = KEY }).status)
    local img = f.snapshot_dir .. "/paused/" .. id .. ".img"
    assert.is_true(proc.run("test -f " .. proc.shell_quote(img)))
    assert.is_true(proc.wait_until(15, function()
      return fleet.sql(f, "SELECT count(*) FROM sessions WHERE id = '" .. id .. "'") == "0"
    end))
    assert.is_true(proc.wait_until(5, function() return not proc.run("test -e " .. proc.shell_quote(img)) end))
    assert.are.equal(404, http.exec(f.router, KEY, id, "true").status)
  end)
end)
