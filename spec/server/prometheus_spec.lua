-- luacheck: max line length 160
-- GET /metrics (issue #27, ours): airlockd's Prometheus text, checked with Debian's own tools:
-- `promtool check metrics` accepts a scrape taken after traffic of every kind, the counters
-- move by exactly the traffic the spec makes, and a real `prometheus` server on loopback (its
-- own port, configuration and storage; the admin key sent as a Bearer credential from a file,
-- the only way Prometheus 2.42 sends one) scrapes it until its query API answers the values.
-- Every wait is bounded and condition-based, and says what it last saw; the prometheus process
-- is bounded by `timeout` and always killed. Loopback only. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local eventually = require "support.eventually"
local http_client = require "support.http_client"
local kernel_client = require "support.kernel_client"
local proc = require "support.proc"
local cjson = require "cjson"

local http = http_client.request
local q = proc.shell_quote

local function have(program)
  return proc.succeeded(os.execute("command -v " .. program .. " >/dev/null 2>&1"))
end

-- A loopback port free right now (the kernel's choice).
local function free_port()
  return tonumber(proc.output("python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); " ..
    "print(s.getsockname()[1])'"):match("%d+"))
end

local function scrape(server, headers)
  return http(server, "GET", "/metrics", { headers = headers })
end

-- The value of the sample `name{labels}` (labels exactly as written) in a scrape's text.
local function sample(text, series)
  for line in text:gmatch("[^\n]+") do
    local s, v = line:match("^(%S+) (%S+)$")
    if s == series then return tonumber(v) end
  end
  return nil
end

describe("GET /metrics", function()
  local server, admin, id

  local function bearer() return { "Authorization: Bearer " .. admin } end

  local function exec(command)
    local r = http(server, "POST", "/v1/sessions/" .. id .. "/exec",
      { key = server.tenants.acme, body = cjson.encode({ command = command }) })
    assert.are.equal(200, r.status, r.body)
    return r.json
  end

  lazy_setup(function()
    server = airlockd.start_with_admin({ env = { SANDBOX_TENANT_LIMITS = '{"other":{"requests_per_minute":2}}' } })
    admin = server.admin
    local r = http(server, "POST", "/v1/sessions", { key = server.tenants.acme, body = "{}" })
    assert.are.equal(201, r.status, r.body)
    id = r.json.session_id
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("answers the admin key, in the X-API-Key header or as a Bearer credential; nobody else", function()
    local r = scrape(server, { "X-API-Key: " .. admin })
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("text/plain; version=0.0.4; charset=utf-8", r.headers["content-type"])
    r = scrape(server, bearer())
    assert.are.equal(200, r.status, r.body)
    assert.is_truthy(r.body:find("\n# TYPE airlockd_exec_total counter\n", 1, true), r.body)
    for _, h in ipairs({ {}, { "Authorization: Bearer wrong" }, { "Authorization: Basic " .. admin },
                         { "Authorization: Bearer " .. server.tenants.acme } }) do
      r = scrape(server, h)
      assert.are.equal(401, r.status, cjson.encode(h))
      assert.are_not.equal(nil, r.json.detail:find("admin key", 1, true))
      assert.is_nil(r.body:find(admin, 1, true))
    end
  end)

  it("counts known traffic exactly: N commands ok, one failing, requests by route pattern and status", function()
    local before = scrape(server, bearer()).body
    local n = 3
    for _ = 1, n do assert.are.equal(0, exec("true").exit_code) end
    assert.are.equal(3, exec("exit 3").exit_code)
    assert.are.equal(404, http(server, "GET", "/v1/sessions/sbx_000000000000/read?path=a.txt", { key = server.tenants.acme }).status)
    assert.are.equal(404, http(server, "GET", "/no/such/route", {}).status)
    local after = scrape(server, bearer()).body
    local function moved(series) return (sample(after, series) or 0) - (sample(before, series) or 0) end
    assert.are.equal(n, moved('airlockd_exec_total{outcome="ok"}'))
    assert.are.equal(1, moved('airlockd_exec_total{outcome="exit_nonzero"}'))
    assert.are.equal(0, moved('airlockd_exec_total{outcome="error"}'))
    assert.are.equal(n + 1, moved('airlockd_http_requests_total{method="POST",route="/v1/sessions/{id}/exec",code="200"}'))
    assert.are.equal(1, moved('airlockd_http_requests_total{method="GET",route="/v1/sessions/{id}/read",code="404"}'))
    assert.are.equal(1, moved('airlockd_http_requests_total{method="",route="unmatched",code="404"}'))
    assert.are.equal(n + 1, moved('airlockd_request_duration_seconds_count{call="exec"}'))
    assert.are.equal(n + 1, moved('airlockd_request_duration_seconds_bucket{call="exec",le="+Inf"}'))
    -- no raw path with its id is ever a label
    assert.is_nil(after:find(id, 1, true))
    assert.are.equal(1, sample(after, 'airlockd_sessions{state="active"}'))
    local started = sample(after, "airlockd_start_time_seconds")
    assert.is_true(started > 1e9 and started <= os.time() + 1, tostring(started))
    assert.are.equal(0, sample(after, "airlockd_commands_running"))
    -- every command ran in a sandbox started for it, booted ahead or the session's own
    assert.is_true(sample(after, 'airlockd_sandboxes_started_total{result="ok"}') >= 1)
    assert.are.equal(0, moved('airlockd_sandboxes_started_total{result="failed"}'))
  end)

  it("counts a tenant's rate-limit refusals under its name", function()
    local refused = 0
    for _ = 1, 4 do
      if http(server, "GET", "/v1/usage", { key = server.tenants.other }).status == 429 then refused = refused + 1 end
    end
    assert.is_true(refused >= 2, tostring(refused))
    local text = scrape(server, bearer()).body
    assert.are.equal(refused, sample(text, 'airlockd_rate_limit_refusals_total{tenant="other",limit="requests"}'))
  end)

  it("counts paused sessions, and the sandbox made ahead for their resumes until a resume takes it", function()
    local kc = kernel_client.new(function() return server, server.tenants.acme end)
    local sid = kc.session_with_x41()
    local function now(series) return sample(scrape(server, bearer()).body, series) end
    assert.are.equal(2, now('airlockd_sessions{state="active"}'))
    assert.are.equal(0, now('airlockd_sessions{state="paused"}'))
    kc.pause(sid)
    assert.are.equal(1, now('airlockd_sessions{state="active"}'))
    assert.are.equal(1, now('airlockd_sessions{state="paused"}'))
    eventually(function() return now("airlockd_sandboxes_restore_ahead") == 1 end,
      { timeout = 60, what = "the sandbox made ahead counted" })
    assert.are.equal(200, kc.call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90).status)
    assert.are.equal(0, now("airlockd_sandboxes_restore_ahead"))
    assert.are.equal(0, now('airlockd_sessions{state="paused"}'))
    assert.are.equal(200, http_client.delete(server, server.tenants.acme, sid).status)
  end)

  it("passes `promtool check metrics` after traffic of every kind", function()
    if not have("promtool") then
      error("promtool is missing: apt-get install prometheus (scripts/install-deps.sh)")
    end
    local path = proc.temp_path()
    proc.write_file(path, scrape(server, bearer()).body)
    local rc, out = proc.run_capture("promtool check metrics < " .. q(path))
    os.remove(path)
    assert.are.equal(0, rc, out)
    assert.are.equal("", out)
  end)

  describe("scraped by a real prometheus on loopback", function()
    local dir, pid, api

    lazy_setup(function()
      assert(have("prometheus"), "prometheus is missing: apt-get install prometheus (scripts/install-deps.sh)")
      dir = proc.make_temp_dir()
      local port = free_port()
      api = "http://127.0.0.1:" .. port
      proc.write_file(dir .. "/admin.key", admin)
      proc.write_file(dir .. "/prometheus.yml", table.concat({
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "scrape_configs:",
        "  - job_name: airlockd",
        "    metrics_path: /metrics",
        "    authorization:",
        "      type: Bearer",
        "      credentials_file: " .. dir .. "/admin.key",
        "    static_configs:",
        "      - targets: ['127.0.0.1:" .. server.port .. "']",
        "",
      }, "\n"))
      -- bounded: `timeout` kills it if this spec never gets to its teardown
      pid = proc.spawn(string.format("timeout -s KILL 600 prometheus --config.file=%s --storage.tsdb.path=%s " ..
        "--web.listen-address=127.0.0.1:%d --storage.tsdb.retention.time=1h", q(dir .. "/prometheus.yml"),
        q(dir .. "/data"), port), dir .. "/prometheus.log", dir .. "/pid")
    end)

    lazy_teardown(function()
      proc.stop_process(pid, 5)
      if dir then proc.remove_tree(dir) end
    end)

    -- The value Prometheus holds for query now (nil when none yet), and the raw answer.
    local function query(expr)
      local raw = proc.output(string.format("curl -s --max-time 5 -G --data-urlencode %s %s",
        q("query=" .. expr), q(api .. "/api/v1/query")))
      local ok, doc = pcall(cjson.decode, raw)
      if not ok or type(doc) ~= "table" or doc.status ~= "success" then return nil, raw end
      local first = doc.data and doc.data.result and doc.data.result[1]
      return first and tonumber(first.value[2]) or nil, raw
    end

    it("gets the target up and the counters through its query API, moving with known traffic", function()
      eventually(function()
        local v, raw = query('up{job="airlockd"}')
        return v == 1, raw .. "\n" .. (proc.read_file(dir .. "/prometheus.log") or ""):sub(-400)
      end, { timeout = 120, what = "prometheus scraping airlockd (up == 1)", step = 0.25 })
      eventually(function()
        local v, raw = query('sum(airlockd_http_requests_total{route="/v1/sessions/{id}/exec"})')
        return v ~= nil and v > 0, raw
      end, { timeout = 60, what = "the requests counter in prometheus", step = 0.25 })
      local ours = sample(scrape(server, bearer()).body, 'airlockd_exec_total{outcome="ok"}')
      for _ = 1, 2 do exec("true") end
      eventually(function()
        local v, raw = query('airlockd_exec_total{outcome="ok"}')
        return v == ours + 2, raw
      end, { timeout = 60, what = "exec ok moved by 2 in prometheus", step = 0.25 })
    end)
  end)
end)
