-- luacheck: max line length 160
-- The status page (/admin/, docs/server.md "Status page") and the admin views it reads:
-- its files come from airlockd itself with headers that forbid other sources and framing;
-- GET /v1/admin/audit, /v1/admin/egress and /v1/admin/status answer the admin key across
-- tenants; and the page works in a real browser: Debian's Chromium, headless, driven by
-- Selenium (spec/support/status_page_browser.py) through a bad key, the tables filling, a
-- session appearing and disappearing, with a screenshot.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local egress = require "support.egress"
local http_client = require "support.http_client"
local proc = require "support.proc"

local http = http_client.request
local q = proc.shell_quote

local ADMIN = "status-page-admin-" .. string.rep("f", 24)
local BROWSER_BOUND_S = 300 -- the whole browser run, killed with its process group past it

describe("the status page", function()
  local server, key, dir

  lazy_setup(function()
    dir = proc.make_temp_dir()
    server = airlockd.start({ env = {
      SANDBOX_ADMIN_KEY = ADMIN, SANDBOX_KEYSTORE = "sqlite:" .. dir .. "/keys.db",
      SANDBOX_AUDIT = "sqlite:" .. dir .. "/audit.db", SANDBOX_WORKSPACE_QUOTA_MB = "16",
      SANDBOX_EGRESS_POLICY = cjson.encode({ ["*"] = { "allowed.test" } }),
    } })
    key = server.tenants.acme
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
    if dir then proc.remove_tree(dir) end
  end)

  local function admin(path, k)
    return http(server, "GET", path, { key = k or ADMIN })
  end

  it("is served by airlockd with a CSP of its own origin, no framing, no sniffing, and no inline script", function()
    local page = http(server, "GET", "/admin/")
    assert.are.equal(200, page.status, page.body)
    assert.are.equal("text/html; charset=utf-8", page.headers["content-type"])
    local csp = page.headers["content-security-policy"]
    assert.truthy(csp:find("default-src 'none'", 1, true), csp)
    assert.truthy(csp:find("script-src 'self'", 1, true), csp)
    assert.truthy(csp:find("frame-ancestors 'none'", 1, true), csp)
    assert.are.equal("DENY", page.headers["x-frame-options"])
    assert.are.equal("nosniff", page.headers["x-content-type-options"])
    assert.are.equal("no-store", page.headers["cache-control"])
    -- every script is a file of the page; no inline script, handler or style attribute
    for tag in page.body:gmatch("<script[^>]*>") do assert.truthy(tag:find('src="page.js"', 1, true), tag) end
    assert.falsy(page.body:find("<style", 1, true))
    assert.falsy(page.body:find('%son%a+="'), "an inline event handler")
    assert.falsy(page.body:find('style="', 1, true))
    assert.falsy(page.body:find("//", 1, true) and page.body:find("https?://"), "a link to another origin")
    local js = http(server, "GET", "/admin/page.js")
    assert.are.equal(200, js.status)
    assert.are.equal("text/javascript; charset=utf-8", js.headers["content-type"])
    assert.truthy(js.body:find("sessionStorage", 1, true))
    assert.falsy(js.body:find("innerHTML", 1, true), "tenants' text must never become HTML")
    assert.are.equal("text/css; charset=utf-8", http(server, "GET", "/admin/page.css").headers["content-type"])
    assert.are.equal(404, http(server, "GET", "/admin/nope.js").status)
    local bare = http(server, "GET", "/admin")
    assert.are.same({ 307, "/admin/" }, { bare.status, bare.headers.location })
  end)

  it("lists the newest audit rows, egress denials and the budgets to the admin key only", function()
    local sid = egress.session(server, key, { "allowed.test" })
    local run = http_client.exec(server, key, sid, "echo page-spec-command")
    assert.are.equal(200, run.status, run.body)
    local results = egress.probe(server, key, sid, { { op = "connect", target = "denied.test:443" } })
    assert.are.same({ { status = 403 } }, results)

    local audit = admin("/v1/admin/audit?limit=5")
    assert.are.equal(200, audit.status, audit.body)
    assert.are.same({ "node", false }, { audit.json.scope, audit.json.stale })
    local found
    for _, e in ipairs(audit.json.entries) do
      if e.command == "echo page-spec-command" then found = e end
    end
    assert.truthy(found, audit.body)
    assert.are.same({ "acme", sid, "exec", 0 }, { found.tenant_id, found.session_id, found.kind, found.exit_code })

    local eg = admin("/v1/admin/egress?limit=5")
    assert.are.equal(200, eg.status, eg.body)
    local denial = eg.json.denials[1]
    assert.truthy(denial, eg.body)
    assert.are.same({ "deny", "denied.test", 443, "host not on allowlist", sid },
      { denial.decision, denial.host, denial.port, denial.reason, denial.session_id })

    local st = admin("/v1/admin/status")
    assert.are.equal(200, st.status, st.body)
    local b = st.json.budgets
    assert.are.equal(1, b.sessions.open)
    assert.are.equal(cjson.null, b.sessions.max)
    assert.is_true(b.commands.max >= 1)
    assert.are.equal(16 * 1024 * 1024, b.disk.session_quota_bytes)
    assert.is_true(b.disk.used_bytes > 0 and b.disk.used_bytes <= b.disk.total_bytes, st.body)
    assert.is_true(b.host_memory.available_bytes > 0 and b.host_memory.available_bytes <= b.host_memory.total_bytes)
    assert.are.same({ false, cjson.null }, { st.json.fleet, st.json.node })
    local acme
    for _, t in ipairs(st.json.tenants) do if t.tenant == "acme" then acme = t end end
    assert.are.same({ 1, 10 }, { acme.sessions_open, acme.max_sessions })

    for _, path in ipairs({ "/v1/admin/audit", "/v1/admin/egress", "/v1/admin/status" }) do
      local bad = admin(path, key) -- a tenant's key is not the admin's
      assert.are.equal(401, bad.status)
      assert.truthy(bad.json.detail:find("^Invalid or missing admin key"), bad.body)
    end
    assert.are.equal(422, admin("/v1/admin/audit?limit=x").status)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("works in headless Chromium: a bad key refused, the tables filled, a session shown then gone", function()
    -- what the tables should show: an audit row and an egress denial of a live session
    local sid = egress.session(server, key, { "allowed.test" })
    assert.are.equal(200, http_client.exec(server, key, sid, "echo page-spec-command").status)
    assert.are.same({ { status = 403 } }, egress.probe(server, key, sid, { { op = "connect", target = "denied.test:443" } }))

    local out_dir = proc.make_temp_dir()
    local cmd = string.format("timeout -k 5 %d /usr/bin/python3 %s %s %s %s %s", BROWSER_BOUND_S,
      q(proc.repo_root() .. "/spec/support/status_page_browser.py"), q(server.url), q(ADMIN), q(key), q(out_dir))
    local rc, out = proc.run_capture(cmd)
    -- nothing of the browser may outlive the run (its profile folder names its processes)
    local left = proc.output("pgrep -f " .. q(out_dir .. "/[p]rofile") .. " || true") -- [p]: not pgrep's own shell
    for pid in left:gmatch("%d+") do proc.stop_process(tonumber(pid), 1) end
    local seen = cjson.decode(out:match("(%b{})%s*$") or "{}")
    assert.are.same({ 0, nil }, { rc, seen.error }, out)
    assert.are.equal("", left, "browser processes left running")

    assert.truthy(seen.refusal:find("Refused: Invalid or missing admin key", 1, true), seen.refusal)
    assert.is_true(seen.status_hidden_after_refusal)
    assert.are.equal(cjson.null, seen.key_kept_after_refusal)
    assert.is_false(seen.key_in_url)
    assert.are.equal("This server runs alone (no fleet).", seen.nodes_note)
    local budgets = table.concat(seen.budgets, "\n")
    for _, name in ipairs({ "Sessions", "Commands running", "Workspace disks", "Host memory in use", "Memory of the sessions here" }) do
      assert.truthy(budgets:find(name, 1, true), budgets)
    end
    assert.truthy(table.concat(seen.tenants, "\n"):find("acme", 1, true))
    assert.truthy(table.concat(seen.egress, "\n"):find(sid, 1, true))
    -- its row: id, state, template, its live figures and disk quota
    assert.truthy(seen.session_row:find(seen.session_id .. " – idle sandbox-base:latest", 1, true), seen.session_row)
    assert.truthy(seen.session_row:find("of 16.0 MB", 1, true), seen.session_row)
    assert.truthy(table.concat(seen.session_groups, "\n"):find("Tenant acme", 1, true))
    assert.is_true(seen.session_gone)
    assert.are.equal(cjson.null, seen.key_after_sign_out)
    assert.are.same({}, seen.console_errors)
    -- the only resources that failed are the bad key's refused reads
    for _, m in ipairs(seen.failed_loads) do assert.truthy(m:find("status of 401", 1, true), m) end
    local png = proc.read_file(seen.screenshot)
    assert.are.equal("\137PNG", png:sub(1, 4))
    print("status page screenshot: " .. seen.screenshot)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)
end)
