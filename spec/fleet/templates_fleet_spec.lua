-- Templates in a fleet (issue #24): a real 2-node fleet on loopback (scripts/fleet.sh). A
-- template built through one node has its recipe in PostgreSQL; the other node builds it again
-- from that (the same id) on its first use, answering a create 503 with Retry-After while it
-- builds (HAProxy retries that on another node), then runs sessions on it; a create through the
-- router on a template ready on some node succeeds; DELETE forgets the recipe. Builds small
-- templates (GNU hello) from the real archive; waits are bounded and say what they last saw.
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

  local function wait_ready(n, name)
    local last
    local ok = proc.wait_until(600, function()
      last = http.request(n, "GET", "/v1/templates/" .. name, { key = KEY })
      return last.status == 200 and last.json.status ~= "building"
    end, 1)
    assert(ok, "still building on " .. n.url .. "; last seen: " .. tostring(last and last.body))
    assert.are.equal("ready", last.json.status, last.json.log_tail)
    return last.json
  end

  it("builds a template through one node and uses it on the other and through the router", function()
    local a, b = node(1), node(2)
    local res = http.request(a, "POST", "/v1/templates",
      { key = KEY, body = cjson.encode{ name = "hello", packages = { "hello" } } })
    assert.are.equal(202, res.status, res.body)
    local id = res.json.id
    assert.are.equal(id, fleet.sql(f, "SELECT id FROM templates WHERE owner = 'main' AND name = 'hello'"))
    wait_ready(a, "hello")

    -- the other node: a create while it builds there is a 503 with Retry-After, never a 404
    local c = http.create(b, KEY, cjson.encode{ template = "hello" })
    if c.status ~= 201 then
      assert.are.equal(503, c.status, c.body)
      assert.truthy(c.headers["retry-after"])
    end
    local t = wait_ready(b, "hello")
    assert.are.equal(id, t.id)
    local sid = http.create(b, KEY, cjson.encode{ template = "hello" }).json.session_id
    assert.are.equal("Hello, world!\n", http.exec(b, KEY, sid, "hello").json.stdout)
    http.delete(b, KEY, sid)

    -- through the router: every node has it ready now
    local r = http.create(f.router, KEY, cjson.encode{ template = "hello" })
    assert.are.equal(201, r.status, r.body)
    assert.are.equal("Hello, world!\n", http.exec(f.router, KEY, r.json.session_id, "hello").json.stdout)
    http.delete(f.router, KEY, r.json.session_id)

    assert.are.equal(200, http.request(a, "DELETE", "/v1/templates/hello", { key = KEY }).status)
    assert.are.equal("0", fleet.sql(f, "SELECT count(*) FROM templates WHERE name = 'hello'"))
  end)
end)
