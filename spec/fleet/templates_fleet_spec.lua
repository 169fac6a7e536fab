-- Templates in a fleet (issue #24): a real 2-node fleet on loopback (scripts/fleet.sh). A
-- template built through one node has its recipe in PostgreSQL; the other node builds it again
-- from that (the same id) on its first use, and a create there waits for that build and answers
-- 201 (a plain client never sees the node lacked it); a build that fails there answers the create
-- with its failure; a create through the router on a template ready on some node succeeds;
-- DELETE forgets the recipe. Builds small templates (GNU hello) from the real archive; waits are
-- bounded and say what they last saw.
local cjson = require "cjson"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"

local KEY = "fleet-key-" .. string.rep("a", 24)

describe("templates in a 2-node fleet", function()
  local f

  setup(function()
    f = fleet.up{ nodes = 2, env = {
      SANDBOX_API_KEYS = "main:" .. KEY,
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 20, requests_per_minute = 100000 } },
    } }
  end)

  teardown(function()
    fleet.down(f)
  end)

  local function node(i)
    local ids = {}
    for id in pairs(f.nodes) do ids[#ids + 1] = id end
    table.sort(ids)
    return f.nodes[ids[i]]
  end

  -- the template's record on node n once its build there ended (ready or failed)
  local function wait_built(n, name)
    local last
    local ok = proc.wait_until(600, function()
      last = http.request(n, "GET", "/v1/templates/" .. name, { key = KEY })
      return last.status == 200 and last.json.status ~= "building"
    end, 1)
    assert(ok, "still building on " .. n.url .. "; last seen: " .. tostring(last and last.body))
    return last.json
  end

  local function wait_ready(n, name)
    local t = wait_built(n, name)
    assert.are.equal("ready", t.status, t.log_tail)
    return t
  end

  -- a create that may wait for a build (the node waits up to 100 s)
  local function create_waiting(n, name)
    return http.request(n, "POST", "/v1/sessions",
      { key = KEY, body = cjson.encode{ template = name }, max_time = 300 })
  end

  it("builds a template through one node and uses it on the other and through the router", function()
    local a, b = node(1), node(2)
    local res = http.request(a, "POST", "/v1/templates",
      { key = KEY, body = cjson.encode{ name = "hello", packages = { "hello" } } })
    assert.are.equal(202, res.status, res.body)
    local id = res.json.id
    assert.are.equal(id, fleet.sql(f, "SELECT id FROM templates WHERE owner = 'main' AND name = 'hello'"))
    wait_ready(a, "hello")

    -- the other node has not got it: the create makes it build there, waits for it, and is a 201
    -- (a build under load may pass the create's 100 s wait: then a 503 with Retry-After, retried)
    local c
    local tries = 0
    repeat
      tries = tries + 1
      c = create_waiting(b, "hello")
      if c.status == 503 then assert.truthy(c.headers["retry-after"], c.body) end
    until c.status ~= 503 or tries == 4
    assert.are.equal(201, c.status, c.body)
    local t = wait_ready(b, "hello")
    assert.are.equal(id, t.id)
    assert.are.equal("Hello, world!\n", http.exec(b, KEY, c.json.session_id, "hello").json.stdout)
    http.delete(b, KEY, c.json.session_id)

    -- a recipe that fails to build (its setup exits 3): built again on the other node by the
    -- create, which answers the failure in its words
    local bad = http.request(a, "POST", "/v1/templates", { key = KEY,
      body = cjson.encode{ name = "badsetup", packages = { "hello" }, setup = { "exit 3" } } })
    assert.are.equal(202, bad.status, bad.body)
    c = create_waiting(b, "badsetup")
    assert.are.equal(409, c.status, c.body)
    assert.truthy(c.json.detail:find("exited with 3", 1, true), c.body)
    -- (the node it was posted to builds it too, at its own pace: a template is not deleted
    -- while it builds, 409)
    assert.are.equal("failed", wait_built(a, "badsetup").status)
    assert.are.equal(200, http.request(a, "DELETE", "/v1/templates/badsetup", { key = KEY }).status)

    -- through the router: every node has it ready now
    local r = http.create(f.router, KEY, cjson.encode{ template = "hello" })
    assert.are.equal(201, r.status, r.body)
    assert.are.equal("Hello, world!\n", http.exec(f.router, KEY, r.json.session_id, "hello").json.stdout)
    http.delete(f.router, KEY, r.json.session_id)

    assert.are.equal(200, http.request(a, "DELETE", "/v1/templates/hello", { key = KEY }).status)
    assert.are.equal("0", fleet.sql(f, "SELECT count(*) FROM templates WHERE name = 'hello'"))
  end)
end)
