-- luacheck: max line length 160
-- Fair sharing (issue #8 item 5), from real sandboxes: every run's cgroup sits under its
-- tenant's group under this server's root airlockd-<16 hex of SHA-256(realpath(state dir))>,
-- with the run's own limits (1 CPU, 256 MB, host tasks); a tenant's cpu.shares is
-- 1024 x CPUs / min(its running commands, CPUs), so its weight does not grow with its
-- commands, and while several tenants run commands each tenant's group is capped at CPUs /
-- tenants running (one CPU at least); and the sandbox sees its 256 MB as /proc/meminfo's MemTotal. A host-wide
-- cap (SANDBOX_MAX_RUNNING) holds however many tenants ask: a command over it waits
-- (SANDBOX_QUEUE_SECONDS) and then gets the 503 the SDKs retry, and a freed slot goes to the
-- tenant running fewest, then to the one served longest ago. Correctness only: the CPU share under load is measured by
-- bench/fairness.lua. Loopback only. Lua 5.1-compatible (no <close>).
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"

local function plain(s)
  return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end

local function read_value(path)
  return (proc.read_file(path) or ""):gsub("%s+$", "")
end

-- fn(server) against a server started with env, stopped whatever fn does.
local function with_server(opts, fn)
  local server = airlockd.start(opts)
  local ok, err = pcall(fn, server)
  airlockd.stop(server)
  assert(ok, err)
end

-- A command that runs until the spec writes the file go in its workspace (50 s at most): it
-- holds its slot for as long as the spec needs, whatever the machine's load.
local UNTIL_GO = http_client.until_go(50)

-- Commands the tenant of key has begun, those waiting for a slot included (GET /v1/usage).
local function commands_running(server, key)
  return http_client.request(server, "GET", "/v1/usage", { key = key }).json.commands_running
end

-- SANDBOX_EXEC_MODE=session (the default; command when the environment says so): the commands of one
-- session run in its one sandbox (issue #19): one run (one `runsc run`, one run cgroup, counted
-- once in its tenant's weight) however many of them run at once.
local SESSION_MODE = os.getenv("SANDBOX_EXEC_MODE") ~= "command"

local function wait_runs(server, n)
  proc.wait_until(30, function() return host_state.runsc_runs(server) >= n end, 0.05)
  return host_state.runsc_runs(server)
end

describe("airlockd cgroups per tenant", function()
  local server, root

  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000}}' } })
    root = host_state.cgroup_root(server.dir .. "/state")
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("puts each run under its tenant's group, with the tenant's weight and the run's own limits", function()
    local acme, other = server.tenants.acme, server.tenants.other
    local a = http_client.create(server, acme).json.session_id
    local o = http_client.create(server, other).json.session_id
    local ja = http_client.exec_async(server, acme, a, UNTIL_GO, 60)
    local ja2 = http_client.exec_async(server, acme, a, UNTIL_GO, 60)
    local jo = http_client.exec_async(server, other, o, UNTIL_GO, 60)
    local acme_runs = SESSION_MODE and 1 or 2
    assert.truthy(wait_runs(server, acme_runs + 1) >= acme_runs + 1)
    local cpus = tonumber(proc.output("getconf _NPROCESSORS_ONLN"))
    assert.are.equal(tostring(math.floor(1024 * cpus / math.min(acme_runs, cpus))), read_value("/sys/fs/cgroup/cpu/" .. root .. "/t-acme/cpu.shares"))
    assert.are.equal(tostring(1024 * cpus), read_value("/sys/fs/cgroup/cpu/" .. root .. "/t-other/cpu.shares"))
    -- two tenants running: each tenant's group is capped at its half of the CPUs (one at least)
    local cap = math.max(1, math.floor(cpus / 2))
    local want_cap = cap < cpus and tostring(cap * 100000) or "-1"
    for _, tenant in ipairs({ "acme", "other" }) do
      assert.are.equal(want_cap, read_value("/sys/fs/cgroup/cpu/" .. root .. "/t-" .. tenant .. "/cpu.cfs_quota_us"))
    end
    local runs = {}
    for _, dir in ipairs(host_state.cgroups_under(root)) do
      local tenant, run = dir:match("^/sys/fs/cgroup/cpu/" .. plain(root) .. "/t%-(%w+)/(sbx_%x+%-.*)$")
      -- (not a sandbox booted ahead for a session's next command: warm_spec.lua)
      if tenant and not run:find("-w-", 1, true) then runs[tenant] = "/sys/fs/cgroup/cpu/" .. root .. "/t-" .. tenant .. "/" .. run end
    end
    assert.truthy(runs.acme and runs.acme:find("/" .. a .. "-", 1, true), table.concat(host_state.cgroups_under(root), "\n"))
    assert.truthy(runs.other and runs.other:find("/" .. o .. "-", 1, true))
    for _, tenant in ipairs({ "acme", "other" }) do
      local rel = runs[tenant]:sub(#"/sys/fs/cgroup/cpu/" + 1)
      assert.are.equal("100000", read_value(runs[tenant] .. "/cpu.cfs_quota_us"))
      assert.are.equal("100000", read_value(runs[tenant] .. "/cpu.cfs_period_us"))
      assert.are.equal(tostring(256 * 1024 * 1024), read_value("/sys/fs/cgroup/memory/" .. rel .. "/memory.limit_in_bytes"))
      assert.are.equal("1024", read_value("/sys/fs/cgroup/pids/" .. rel .. "/pids.max"))
      -- the sandbox's processes are in it: runsc's sentry among them
      assert.truthy(read_value("/sys/fs/cgroup/memory/" .. rel .. "/cgroup.procs") ~= "")
    end
    assert.are.equal(200, http_client.write(server, acme, a, "go", "").status)
    assert.are.equal(200, http_client.write(server, other, o, "go", "").status)
    assert.are.equal(0, ja.wait(60).exit_code)
    assert.are.equal(0, ja2.wait(60).exit_code)
    assert.are.equal(0, jo.wait(60).exit_code)
    -- no tenant runs a command: no cap on either
    for _, tenant in ipairs({ "acme", "other" }) do
      assert.are.equal("-1", read_value("/sys/fs/cgroup/cpu/" .. root .. "/t-" .. tenant .. "/cpu.cfs_quota_us"))
    end
    -- the runs' groups are gone from every hierarchy; the tenants' stay for the next run (and
    -- the groups of the sandboxes booted ahead for the sessions' next commands, and with
    -- SANDBOX_EXEC_MODE=session those of the sessions' own sandboxes)
    for _, dir in ipairs(host_state.cgroups_under(root)) do
      assert.is_true(dir:find("/sbx_", 1, true) == nil or dir:find("-w-", 1, true) ~= nil
        or dir:find("-s-", 1, true) ~= nil, dir)
    end
  end)

  it("shows the sandbox its own memory size in /proc/meminfo", function()
    local key = server.tenants.acme
    local id = http_client.create(server, key).json.session_id
    local r = http_client.exec(server, key, id, "grep MemTotal /proc/meminfo")
    assert.are.equal("MemTotal:         262144 kB\n", r.json.stdout)
  end)

  it("names a tenant whose name is not a plain word by a hash", function()
    local key = "wk_" .. airlockd.random_hex(16)
    with_server({ tenants = { ["we ird/../x"] = key } }, function(weird)
      local wroot = host_state.cgroup_root(weird.dir .. "/state")
      local id = http_client.create(weird, key).json.session_id
      local job = http_client.exec_async(weird, key, id, http_client.until_go(), 60)
      assert.truthy(wait_runs(weird, 1) >= 1)
      local groups = {}
      for _, dir in ipairs(host_state.cgroups_under(wroot)) do
        local g = dir:match("^/sys/fs/cgroup/cpu/" .. plain(wroot) .. "/([^/]+)$")
        -- (not the start's probe's group: a start on a boot that proved runsc already has none)
        if g and g ~= "internal" then groups[#groups + 1] = g end
      end
      assert.are.equal(1, #groups, table.concat(groups, " "))
      assert.truthy(groups[1]:match("^t%-_%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$"), groups[1])
      assert.are.equal(200, http_client.write(weird, key, id, "go", "").status)
      assert.are.equal(0, job.wait(90).exit_code)
    end)
  end)
end)

describe("airlockd host-wide command cap", function()
  it("waits for a slot, then answers 503 when none frees in time; never runs more than the cap", function()
    with_server({ env = { SANDBOX_MAX_RUNNING = "2", SANDBOX_QUEUE_SECONDS = "2" } }, function(server)
      local acme, other = server.tenants.acme, server.tenants.other
      local a = http_client.create(server, acme).json.session_id
      local o = http_client.create(server, other).json.session_id
      local jobs = { http_client.exec_async(server, acme, a, UNTIL_GO, 60), http_client.exec_async(server, acme, a, UNTIL_GO, 60) }
      local runs = SESSION_MODE and 1 or 2
      assert.are.equal(runs, wait_runs(server, runs))
      assert.is_true(proc.wait_until(30, function() return commands_running(server, acme) == 2 end))
      local most = 0
      local third = http_client.exec_async(server, other, o, "echo over the cap", 30)
      while not third.done() do
        most = math.max(most, host_state.runsc_runs(server))
        proc.sleep(0.1)
      end
      local res, raw = third.wait(30)
      assert.are.same({ detail = "All 2 command slots of this server are in use; try again shortly." }, res, raw)
      assert.truthy(most <= 2, "runs at once: " .. most)
      assert.are.equal(200, http_client.write(server, acme, a, "go", "").status)
      for _, j in ipairs(jobs) do assert.are.equal(0, j.wait(90).exit_code) end
      -- a slot is free again
      assert.are.equal("ok\n", http_client.exec(server, other, o, "echo ok").json.stdout)
      local usage = http_client.request(server, "GET", "/v1/usage", { key = other }).json
      assert.are.equal(0, usage.commands_running)
    end)
  end)

  it("gives a freed slot to a tenant not served yet, before the next command of the busy one", function()
    with_server({ env = { SANDBOX_MAX_RUNNING = "1", SANDBOX_QUEUE_SECONDS = "60" } }, function(server)
      local acme, other = server.tenants.acme, server.tenants.other
      local a = http_client.create(server, acme).json.session_id
      local o = http_client.create(server, other).json.session_id
      -- each command prints when it began and when it ended (ns): one slot, so no two overlap
      local SPAN = "date +%s%N; sleep 0.3; date +%s%N"
      local first = http_client.exec_async(server, acme, a, UNTIL_GO .. "date +%s%N", 60)
      assert.is_true(proc.wait_until(30, function() return commands_running(server, acme) == 1 end))
      -- acme's second command waits for the slot first, then the other tenant's
      local second = http_client.exec_async(server, acme, a, SPAN, 60)
      assert.is_true(proc.wait_until(30, function() return commands_running(server, acme) == 2 end))
      local others = http_client.exec_async(server, other, o, SPAN, 60)
      assert.is_true(proc.wait_until(30, function() return commands_running(server, other) == 1 end))
      assert.are.equal(200, http_client.write(server, acme, a, "go", "").status)
      -- the times (ns) a command printed
      local function times(job)
        local r, t = job.wait(60), {}
        assert.are.equal(0, r.exit_code, r.stderr)
        for n in r.stdout:gmatch("%d+") do t[#t + 1] = tonumber(n) end
        return t
      end
      local t_first, t_second, t_other = times(first), times(second), times(others)
      assert.truthy(t_other[1] < t_second[1], "the other tenant ran after acme's second command")
      assert.truthy(t_first[1] <= t_other[1] and t_other[2] <= t_second[1],
        "two commands ran at once: " .. cjson.encode({ first = t_first, other = t_other, second = t_second }))
    end)
  end)
end)
