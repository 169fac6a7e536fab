-- luacheck: max line length 140
-- Templates (issue #24), side by side in one run on one airlockd (this machine is shared and
-- loaded: only figures taken together mean anything; the load average is printed with them):
--
--   * a template of one small package (GNU hello) on a new server: the first build, which also
--     makes the base every build starts from, with the package cache cold; then the same package
--     over the cached base with the cache warm (another recipe: a setup command), then jq and
--     hello over it, then that again after the base was removed (the base made again), each from
--     POST to ready;
--   * the same request again (the cache hit): POST to answer;
--   * create + first command (`true`) on that template against the default root, alternated
--     round by round, medians and their ratio;
--   * examples/data_template.lua (python3-numpy, python3-pandas and python3-matplotlib, a plot
--     read back), then `python3 -c "import numpy"` and `"import pandas"` on the data template and
--     on the default root (the host's /usr: numpy is there when the host has python3-matplotlib,
--     as install-deps gives it for the kernels' charts);
--   * commands per second of 8 busy sessions (each running `true` back to back) alone and then
--     beside a build (a template of jq, hello and python3: over the base a smaller build may end
--     within the window), in pairs of 10 s windows, the median ratio.
--
--   lua5.4 bench/templates.lua [rounds]     BENCH_SMOKE=1: 3 rounds, no data template
-- Needs root (runsc, mmdebstrap) and the host's apt sources reachable. No assertion beyond
-- the checks that the figures are real: it prints a table.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local harness = require "harness"
local busy_sessions = require "busy_sessions"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local cjson = require "cjson"

local SMOKE = os.getenv("BENCH_SMOKE") == "1"
local ROUNDS = SMOKE and 3 or math.max(3, tonumber(arg and arg[1]) or 9)
local BUSY_SECONDS = 10
local PAIRS = SMOKE and 3 or 5
local PARALLEL = 8

local check, call = harness.check, harness.call
local q = proc.shell_quote

local function now()
  local f = io.popen("date +%s.%N")
  local t = tonumber(f:read("*l"))
  f:close()
  return t
end

local function median(t)
  table.sort(t)
  return t[math.ceil(#t / 2)]
end

local LIMITS = '{"*":{"max_sessions":100,"requests_per_minute":100000,"max_concurrent_exec":16,"max_template_builds":2}}'
local KEY = "bk_" .. airlockd.random_hex(16)
local server = airlockd.start({ tenants = { bench = KEY }, env = { SANDBOX_TENANT_LIMITS = LIMITS } })

-- POST a template and wait until it is no longer building: seconds from POST to that, the record.
local function build(body)
  local t0 = now()
  local status, rec = call(server, "POST", "/v1/templates", KEY, cjson.encode(body))
  check(status == 202 or status == 200, "POST /v1/templates: " .. tostring(status))
  while rec.status == "building" do
    proc.sleep(0.2)
    status, rec = call(server, "GET", "/v1/templates/" .. body.name, KEY)
    check(status == 200, "GET template: " .. tostring(status))
  end
  check(rec.status == "ready", "template " .. body.name .. " failed:\n" .. tostring(rec.log_tail))
  return now() - t0, rec
end

local function create(template)
  local status, s = call(server, "POST", "/v1/sessions", KEY, cjson.encode(template and { template = template } or {}))
  check(status == 201, "create: " .. tostring(status))
  return s.session_id
end

local function exec(id, command)
  local status, r = call(server, "POST", "/v1/sessions/" .. id .. "/exec", KEY, cjson.encode({ command = command }))
  check(status == 200, "exec: " .. tostring(status))
  return r
end

local function delete(id)
  call(server, "DELETE", "/v1/sessions/" .. id, KEY)
end

local rows = {}
local function row(name, value) rows[#rows + 1] = { name, value } end

local ok, err = pcall(function()
  -- builds: cold cache, warm cache, cache hit
  local cold = build({ name = "hello", packages = { "hello" } })
  local warm = build({ name = "hello-warm", packages = { "hello" }, setup = { "true" } })
  local small = build({ name = "small", packages = { "jq", "hello" } })
  check(proc.run("rm -rf " .. q(server.dir .. "/state/templates/bases") .. "/*"), "removing the base")
  local rebase = build({ name = "small-rebase", packages = { "jq", "hello" }, setup = { "true" } })
  local t0 = now()
  local status, again = call(server, "POST", "/v1/templates", KEY, cjson.encode({ name = "hello", packages = { "hello" } }))
  local hit = now() - t0
  check(status == 200 and again.status == "ready", "cache hit: " .. tostring(status))
  row("first build: hello, makes the base, package cache cold (s)", string.format("%.1f", cold))
  row("build over the base: hello, package cache warm (s)", string.format("%.1f", warm))
  row("build over the base: jq and hello (s)", string.format("%.1f", small))
  row("build of jq and hello after the base was removed (makes it again) (s)", string.format("%.1f", rebase))
  row("the same request again (s)", string.format("%.3f", hit))

  -- create + first command, template vs default, alternated (a warm-up round first: spares)
  local on_tpl, on_default = {}, {}
  for round = 0, ROUNDS do
    for _, tpl in ipairs({ "hello-warm", false }) do
      local c0 = now()
      local id = create(tpl or nil)
      local r = exec(id, "true")
      local took = (now() - c0) * 1000
      check(r.exit_code == 0, "first command failed: " .. tostring(r.stderr))
      delete(id)
      if round > 0 then table.insert(tpl and on_tpl or on_default, took) end
      proc.sleep(1.5) -- the next spare boots
    end
  end
  local mt, md = median(on_tpl), median(on_default)
  row("create + first command, template (ms, median)", string.format("%.0f", mt))
  row("create + first command, default root (ms, median)", string.format("%.0f", md))
  row("  ratio template / default", string.format("%.2f", mt / md))

  if not SMOKE then
    local d0 = now()
    local rc, out = proc.run_capture(string.format("SANDBOX_API_URL=%s SANDBOX_API_KEY=%s %s examples/data_template.lua 2>/dev/null",
      q(server.url), q(KEY), q(proc.lua_interpreter())))
    check(rc == 0 and out:find("sine.png is a PNG", 1, true), "examples/data_template.lua: " .. tostring(out))
    row("examples/data_template.lua: numpy + pandas + matplotlib built, plotted (s)", string.format("%.0f", now() - d0))
    local _, rec = call(server, "GET", "/v1/templates/data", KEY)
    row("  the data template's size (MB)", string.format("%.0f", rec.size / 1048576))
    local d, p = create("data"), create(nil)
    for _, module in ipairs({ "numpy", "pandas" }) do
      local cmd = 'python3 -c "import ' .. module .. '"'
      local rd, rp = exec(d, cmd), exec(p, cmd)
      row(cmd .. " on the data template", string.format("exit %d", rd.exit_code))
      local missing = rp.stderr:find("ModuleNotFoundError", 1, true)
      row(cmd .. " on the default root", string.format("exit %d", rp.exit_code) .. (missing
        and ", ModuleNotFoundError" or ""))
    end
    delete(d)
    delete(p)
  end

  -- 8 busy sessions: commands/s alone, then beside a build
  local ids = {}
  for i = 1, PARALLEL do ids[i] = create(nil) end
  local function busy(seconds) return busy_sessions.rate(server, KEY, ids, seconds) end
  -- pairs of windows, alone then beside a fresh build (its own recipe), each ratio taken within
  -- its pair (the machine's other load moves between pairs); the median ratio
  local ratios, shown = {}, {}
  for pair = 1, PAIRS do
    local alone = busy(BUSY_SECONDS)
    local name = "beside" .. pair
    call(server, "POST", "/v1/templates", KEY, cjson.encode({ name = name, packages = { "jq", "hello", "python3" },
      setup = { "echo " .. pair } }))
    local beside = busy(BUSY_SECONDS)
    local _, b = call(server, "GET", "/v1/templates/" .. name, KEY)
    check(b.status == "building", "the build ended within the window: make BUSY_SECONDS shorter")
    proc.wait_until(900, function()
      local _, rec = call(server, "GET", "/v1/templates/" .. name, KEY)
      return rec.status ~= "building"
    end, 1)
    ratios[pair] = beside / alone
    shown[pair] = string.format("%.1f / %.1f", beside, alone)
  end
  row("8 busy sessions: commands/s beside a build / alone, per pair", table.concat(shown, ", "))
  row("  ratio beside / alone (median of the pairs)", string.format("%.2f", median(ratios)))
  for _, id in ipairs(ids) do delete(id) end
end)

print(string.format("templates bench (load average %s)", harness.loadavg()))
for _, r in ipairs(rows) do print(string.format("  %-72s %s", r[1], r[2])) end
airlockd.stop(server)
if not ok then error(err, 0) end
