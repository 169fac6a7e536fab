-- luacheck: max line length 160
-- Templates (issue #24): read-only roots built from Debian packages (mmdebstrap from the host's
-- apt sources, the setup in gVisor) that sessions run on. These specs build small templates from
-- the real archive (GNU hello, jq: a few seconds of download) and prove: every bad input is a 422
-- naming its field; a build streams its progress and ends ready; the same request again answers
-- with the same id at once; a session on it runs the packages (as uid 1000, read-only /usr) while
-- the default root lacks them; another tenant cannot see it; DELETE is refused while a session
-- uses it; a failed build (unknown package, failing setup) says the tool's own words and leaves
-- no files; templates survive a restart. Every build starts from a base the first one made
-- (kept once, not made again by later builds; a half-made or outdated one is removed at start). Builds are waited on with a bounded wait that says what
-- it last saw; no timing assertions. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local host_state = require "support.host_state"
local http_client = require "support.http_client"
local proc = require "support.proc"
local cjson = require "cjson"

local function post(server, key, path, body)
  return http_client.request(server, "POST", path, { key = key, body = cjson.encode(body) })
end

local function get(server, key, path)
  return http_client.request(server, "GET", path, { key = key })
end

-- Waits (up to 400 s: a build on a loaded machine) until the template's status is not
-- "building"; its record.
local function wait_built(server, key, name)
  local last
  local done = proc.wait_until(400, function()
    last = get(server, key, "/v1/templates/" .. name)
    return last.status == 200 and last.json.status ~= "building"
  end, 1)
  assert(done, "template " .. name .. " still building; last seen: " .. tostring(last and last.body))
  return last.json
end

local function exists(path)
  return proc.run("test -e " .. proc.shell_quote(path))
end

-- The builds' top group of server s in the CPU hierarchy (v1 cpu, else v2's one tree).
local function builds_cpu_group(server)
  local top = exists("/sys/fs/cgroup/cpu/cpu.shares") and "/sys/fs/cgroup/cpu/" or "/sys/fs/cgroup/"
  return top .. host_state.cgroup_root(server.dir .. "/state") .. "-builds"
end

-- Waits until processes run in the builds group; then every one of them, and every process they
-- started, must be there at the least CPU and I/O priority. How many there were.
local function check_build_processes(server)
  local group, listed = builds_cpu_group(server), nil
  assert(proc.wait_until(120, function()
    listed = proc.output("cat " .. group .. "/builds/*/cgroup.procs 2>/dev/null")
    return listed:match("%d") ~= nil
  end, 0.1), "no process of the build in " .. group)
  -- a low weight (v1 shares 128 of a default 1024; v2 weight 12 of 100), not idle (an idle group
  -- starves a build on a busy host)
  local v1 = exists(group .. "/cpu.shares")
  local weight = tonumber((proc.read_file(group .. (v1 and "/cpu.shares" or "/cpu.weight")) or ""):match("%d+"))
  assert.are.equal(v1 and 128 or 12, weight)
  local idle = proc.read_file(group .. "/cpu.idle")
  assert.truthy(idle == nil or idle:match("%d+") == "0", "cpu.idle " .. tostring(idle))
  local children, seen = {}, 0
  for pid, ppid in proc.output("ps -eo pid=,ppid="):gmatch("(%d+)%s+(%d+)") do
    children[ppid] = children[ppid] or {}
    table.insert(children[ppid], pid)
  end
  local todo = {}
  for pid in listed:gmatch("%d+") do todo[#todo + 1] = pid end
  while #todo > 0 do
    local pid = table.remove(todo)
    local cg, stat = proc.read_file("/proc/" .. pid .. "/cgroup"), proc.read_file("/proc/" .. pid .. "/stat")
    if cg and stat then -- else gone meanwhile
      seen = seen + 1
      assert.truthy(cg:find("-builds/builds/", 1, true), pid .. " outside the builds group:\n" .. cg)
      assert.are.equal("19", stat:match("%) %S+" .. string.rep(" %S+", 15) .. " (%S+)"), "nice of " .. pid)
      local io = proc.output("ionice -p " .. pid .. " 2>/dev/null")
      assert.truthy(io == "" or io:find("idle", 1, true), "I/O class of " .. pid .. ": " .. io)
    end
    for _, c in ipairs(children[pid] or {}) do todo[#todo + 1] = c end
  end
  return seen
end

-- The entries of server s's base cache (<state>/templates/bases), sorted, one string.
local function bases(server)
  return proc.output("ls " .. proc.shell_quote(server.dir .. "/state/templates/bases") .. " 2>/dev/null | sort | tr '\\n' ' '")
end

-- The inode of the current base's ready stamp (a base made again has another).
local function base_stamp(server)
  return proc.output("stat -c %i " .. proc.shell_quote(server.dir .. "/state/templates/bases") .. "/*/ready 2>/dev/null")
end

describe("templates", function()
  local s, acme, other, stamp

  lazy_setup(function()
    -- its own base (not the run's shared one): these specs watch it being made
    s = airlockd.start({ private_template_bases = true,
      env = { SANDBOX_TENANT_LIMITS = '{"*": {"max_templates": 4, "max_template_builds": 2}}', SANDBOX_TEMPLATE_BUILDS = "2" } })
    acme, other = s.tenants.acme, s.tenants.other
  end)

  lazy_teardown(function()
    if s then airlockd.stop(s) end
  end)

  it("refuses each bad input with a 422 naming its field", function()
    local many = {}
    for i = 1, 65 do many[i] = "pkg" .. i end
    local cases = {
      { { name = "Bad Name", packages = { "hello" } }, "name" },
      { { name = "x", packages = {} }, "packages" },
      { { name = "x" }, "packages" },
      { { name = "x", packages = { "--foo" } }, "packages" },
      { { name = "x", packages = { "hello;rm -rf /" } }, "packages" },
      { { name = "x", packages = { "$(id)" } }, "packages" },
      { { name = "x", packages = many }, "packages" },
      { { name = "x", packages = { "hello" }, setup = { string.rep("x", 5000) } }, "setup" },
      { { name = "x", packages = { "hello" }, setup = "echo hi" }, "setup" },
      { { name = "x", packages = { "hello" }, recommends = "no" }, "recommends" },
    }
    for _, c in ipairs(cases) do
      local res = post(s, acme, "/v1/templates", c[1])
      assert.are.equal(422, res.status, res.body)
      assert.are.equal(c[2], res.json.detail[1].loc[2], res.body)
    end
    assert.are.equal(0, #get(s, acme, "/v1/templates").json.templates)
  end)

  it("builds a template, streams its progress, and answers the same request again at once", function()
    -- (procps recommends psmisc: not in this one; in "second", which asks for what is recommended)
    local body = { name = "hello", packages = { "hello", "jq", "procps" }, setup = { "echo made-by-setup > /etc/made-by-setup" } }
    local res = post(s, acme, "/v1/templates", body)
    assert.are.equal(202, res.status, res.body)
    assert.are.equal("building", res.json.status)
    local id = res.json.id
    assert.truthy(id:match("^tpl_%x+$"))
    -- another build at the same time: both need the base, one build makes it
    local second = post(s, acme, "/v1/templates", { name = "second", packages = { "procps" }, recommends = true })
    assert.are.equal(202, second.status, second.body)
    assert.are.equal(true, second.json.recommends)
    assert.truthy(check_build_processes(s) > 0)
    -- the stream ends when the build does; its last event is the end
    local log = http_client.request(s, "GET", "/v1/templates/hello/log", { key = acme, max_time = 600 })
    assert.are.equal(200, log.status)
    local events = {}
    for line in log.body:gmatch("[^\n]+") do events[#events + 1] = cjson.decode(line) end
    assert.truthy(#events >= 3, log.body)
    local phases, last = {}, events[#events]
    for _, e in ipairs(events) do phases[e.phase] = true end
    assert.truthy(phases.install and phases.setup, log.body)
    assert.are.equal("ready", last.status, log.body)
    assert.are.equal(100, last.percent)
    assert.truthy(last.packages_installed > 0 and last.packages_total > 0, log.body)

    local t = wait_built(s, acme, "hello")
    assert.are.equal("ready", t.status, t.log_tail)
    assert.are.same({ "hello", "jq", "procps" }, t.packages)
    assert.are.equal(false, t.recommends)
    assert.truthy(t.size > 10 * 1024 * 1024)
    assert.truthy(exists(s.dir .. "/state/templates/" .. id .. "/root/usr/bin/hello"))
    -- the first builds made the base (once, one, complete), and left nothing of theirs beside the root
    local built = wait_built(s, acme, "second")
    assert.are.equal("ready", built.status, built.log_tail)
    local second_id = built.id
    assert.truthy(exists(s.dir .. "/state/templates/" .. id .. "/root/usr/bin/ps"))
    assert.falsy(exists(s.dir .. "/state/templates/" .. id .. "/root/usr/bin/killall"))
    assert.truthy(exists(s.dir .. "/state/templates/" .. second_id .. "/root/usr/bin/killall")) -- psmisc, recommended
    local _, made = airlockd.log(s):gsub("making the base every template starts from", "")
    assert.are.equal(1, made)
    assert.truthy(bases(s):match("^%x+ $"), bases(s))
    stamp = base_stamp(s)
    assert.truthy(stamp:match("^%d+%s*$"), stamp)
    assert.truthy(exists(s.dir .. "/state/templates/bases/" .. bases(s):match("%x+") .. "/root/usr/bin/dpkg"))
    assert.falsy(exists(s.dir .. "/state/templates/" .. id .. "/lists"))
    -- the kernel's launcher, program and bytecode, as in the default root
    for _, f in ipairs({ "kernel.py", "kernel-program.py", "kernel-program.pyc" }) do
      assert.truthy(exists(s.dir .. "/state/templates/" .. id .. "/root/airlock/" .. f), f)
    end

    local again = post(s, acme, "/v1/templates", { name = "hello", packages = { "procps", "jq", "hello" }, setup = body.setup })
    assert.are.equal(200, again.status, again.body)
    assert.are.equal(id, again.json.id)
    assert.are.equal("ready", again.json.status)
    again = post(s, acme, "/v1/templates", { name = "hello", packages = { "procps", "jq", "hello" }, setup = body.setup, recommends = false })
    assert.are.equal(id, again.json.id, again.body)
    -- the same name with another recipe is a conflict: other packages, or with what they recommend
    assert.are.equal(409, post(s, acme, "/v1/templates", { name = "hello", packages = { "hello" } }).status)
    local recommended = post(s, acme, "/v1/templates", { name = "hello", packages = { "procps", "jq", "hello" }, setup = body.setup, recommends = true })
    assert.are.equal(409, recommended.status, recommended.body)
    assert.truthy(recommended.json.detail:find("another recipe", 1, true), recommended.body)
  end)

  it("runs a session's commands on the template, isolated as on the default root", function()
    local res = http_client.create(s, acme, cjson.encode({ template = "hello" }))
    assert.are.equal(201, res.status, res.body)
    local id = res.json.session_id
    local out = http_client.exec(s, acme, id, "hello; cat /etc/made-by-setup; echo '{\"a\":7}' | jq .a; id -u; " ..
      "touch /usr/x 2>/dev/null || echo ro").json
    assert.are.equal(0, out.exit_code, out.stderr)
    assert.are.equal("Hello, world!\nmade-by-setup\n7\n1000\nro\n", out.stdout)
    local plain = http_client.create(s, acme).json.session_id
    local miss = http_client.exec(s, acme, plain, "command -v hello || echo none").json
    assert.are.equal("none\n", miss.stdout)
    -- in use: no DELETE
    assert.are.equal(409, http_client.request(s, "DELETE", "/v1/templates/hello", { key = acme }).status)
    http_client.delete(s, acme, id)
    http_client.delete(s, acme, plain)
  end)

  it("keeps a tenant's template from another tenant", function()
    assert.are.equal(404, get(s, other, "/v1/templates/hello").status)
    assert.are.equal(0, #get(s, other, "/v1/templates").json.templates)
    local res = http_client.create(s, other, cjson.encode({ template = "hello" }))
    assert.are.equal(404, res.status, res.body)
    assert.truthy(res.json.detail:find("hello", 1, true))
    assert.are.equal(404, http_client.request(s, "DELETE", "/v1/templates/hello", { key = other }).status)
  end)

  it("fails a build of an unknown package or a failing setup with the tool's words, leaving no files", function()
    local a = post(s, acme, "/v1/templates", { name = "nosuch", packages = { "no-such-package-airlock" } })
    assert.are.equal(202, a.status, a.body)
    local t = wait_built(s, acme, "nosuch")
    assert.are.equal("failed", t.status)
    assert.truthy(t.log_tail:find("no-such-package-airlock", 1, true), t.log_tail)
    assert.falsy(exists(s.dir .. "/state/templates/" .. a.json.id))
    local res = http_client.create(s, acme, cjson.encode({ template = "nosuch" }))
    assert.are.equal(409, res.status, res.body)

    local b = post(s, acme, "/v1/templates", { name = "badsetup", packages = { "hello" }, setup = { "true", "exit 3" } })
    assert.are.equal(202, b.status, b.body)
    t = wait_built(s, acme, "badsetup")
    assert.are.equal("failed", t.status)
    assert.truthy(t.log_tail:find("setup command exited with 3: exit 3", 1, true), t.log_tail)
    assert.falsy(exists(s.dir .. "/state/templates/" .. b.json.id))
    -- both builds started from the base the first build made: it was not made again
    assert.are.equal(stamp, base_stamp(s))
    assert.are.equal(200, http_client.request(s, "DELETE", "/v1/templates/badsetup", { key = acme }).status)
    assert.are.equal(200, http_client.request(s, "DELETE", "/v1/templates/second", { key = acme }).status)
    assert.are.equal(200, http_client.request(s, "DELETE", "/v1/templates/nosuch", { key = acme }).status)
  end)

  it("shares its base with another server of the machine (SANDBOX_TEMPLATE_BASES)", function()
    local second
    local ok, err = pcall(function()
      second = airlockd.start({ env = { SANDBOX_TEMPLATE_BASES = s.dir .. "/state/templates/bases" } })
      local key = second.tenants.acme
      assert.are.equal(202, post(second, key, "/v1/templates", { name = "two", packages = { "jq" } }).status)
      local t = wait_built(second, key, "two")
      assert.are.equal("ready", t.status, t.log_tail)
      local _, made = airlockd.log(second):gsub("making the base every template starts from", "")
      assert.are.equal(0, made)
      assert.are.equal(stamp, base_stamp(s)) -- the first server's, not made again
      local sid = http_client.create(second, key, cjson.encode({ template = "two" })).json.session_id
      assert.are.equal("7\n", http_client.exec(second, key, sid, "echo '{\"a\":7}' | jq .a").json.stdout)
    end)
    if second then airlockd.stop(second) end
    assert(ok, err)
  end)

  it("keeps templates across a restart, and deletes one no session uses", function()
    local id = get(s, acme, "/v1/templates/hello").json.id
    local builds = builds_cpu_group(s)
    assert.truthy(exists(builds))
    proc.stop_process(s.pid, 10)
    assert.falsy(exists(builds)) -- a stopping server removes its builds' group too
    -- a base half-made when the server stopped and one of other apt sources made two days ago go
    -- at start; one of other sources made today stays (another server sharing the directory's)
    local current = bases(s)
    local bdir = s.dir .. "/state/templates/bases/"
    assert.truthy(proc.run("mkdir -p " .. bdir .. "0123456789abcdef.new/root " .. bdir .. "fedcba9876543210/root "
      .. bdir .. "aaaabbbbccccdddd/root && touch -d '2 days ago' " .. bdir .. "fedcba9876543210/ready && touch "
      .. bdir .. "aaaabbbbccccdddd/ready"))
    s = airlockd.start({ dir = s.dir, tenants = s.tenants, private_template_bases = true })
    local kept = bases(s)
    assert.truthy(kept:find(current, 1, true) and kept:find("aaaabbbbccccdddd ", 1, true), kept)
    assert.falsy(kept:find("fedcba9876543210", 1, true) or kept:find(".new", 1, true), kept)
    assert.truthy(proc.run("rm -rf " .. bdir .. "aaaabbbbccccdddd"))
    assert.are.equal(current, bases(s))
    local t = get(s, acme, "/v1/templates/hello")
    assert.are.equal("ready", t.json.status, t.body)
    local sid = http_client.create(s, acme, cjson.encode({ template = "hello" })).json.session_id
    assert.are.equal("Hello, world!\n", http_client.exec(s, acme, sid, "hello").json.stdout)
    http_client.delete(s, acme, sid)
    assert.are.equal(200, http_client.request(s, "DELETE", "/v1/templates/hello", { key = acme }).status)
    assert.are.equal(404, get(s, acme, "/v1/templates/hello").status)
    assert.falsy(exists(s.dir .. "/state/templates/" .. id))
  end)
end)

describe("template base settings", function()
  local function start_fails(env)
    local ok, err = pcall(airlockd.start, { env = env, private_template_bases = true })
    if ok then airlockd.stop(err) end
    assert.is_false(ok)
    return tostring(err)
  end

  it("refuses a directory that another user may write to, or a relative one", function()
    local dir = proc.make_temp_dir()
    assert.truthy(proc.run("chmod 0777 " .. proc.shell_quote(dir)))
    local err = start_fails({ SANDBOX_TEMPLATE_BASES = dir })
    assert.truthy(err:find("SANDBOX_TEMPLATE_BASES " .. dir .. " must be a directory of this server's user that no one else may write to", 1, true), err)
    err = start_fails({ SANDBOX_TEMPLATE_BASES = "bases" })
    assert.truthy(err:find("SANDBOX_TEMPLATE_BASES", 1, true) and err:find("must be an absolute path", 1, true), err)
    proc.remove_tree(dir)
  end)

  it("starts while another server holds the bases' lock (as while it makes a base), and leaves the sweep to it", function()
    local dir, aside = proc.make_temp_dir(), proc.make_temp_dir()
    assert.truthy(proc.run("chmod 0700 " .. proc.shell_quote(dir) .. " && mkdir " .. proc.shell_quote(dir .. "/k.new")))
    -- another server's base build: the exclusive lock held for longer than any start may wait
    local holder = proc.spawn("exec flock -x " .. proc.shell_quote(dir .. "/.lock") .. " sleep 300",
      aside .. "/flock.log", aside .. "/flock.pid")
    assert.is_true(proc.wait_until(10, function()
      return not proc.run("flock -n -x " .. proc.shell_quote(dir .. "/.lock") .. " true")
    end, 0.05))
    local s = airlockd.start({ env = { SANDBOX_TEMPLATE_BASES = dir }, private_template_bases = true })
    local log = airlockd.log(s)
    airlockd.stop(s)
    proc.stop_process(holder, 5)
    assert.truthy(log:find("template bases not swept at start: another server is using them", 1, true), log)
    assert.truthy(proc.run("test -d " .. proc.shell_quote(dir .. "/k.new"))) -- not the starting server's to remove
    proc.remove_tree(dir)
    proc.remove_tree(aside)
  end)
end)

describe("a template build whose mirror cannot be reached", function()
  local s, dir

  lazy_setup(function()
    dir = proc.make_temp_dir()
    -- a mirror on a loopback port nothing listens on (one-line apt sources format)
    proc.write_file(dir .. "/unreachable.list", "deb [trusted=yes] http://127.0.0.1:9/debian bookworm main\n")
    s = airlockd.start({ env = { SANDBOX_TEMPLATE_SOURCES = dir .. "/unreachable.list" } })
  end)

  lazy_teardown(function()
    if s then airlockd.stop(s) end
    if dir then proc.remove_tree(dir) end
  end)

  it("fails with apt's own words and leaves no files", function()
    local res = post(s, s.tenants.acme, "/v1/templates", { name = "offline", packages = { "hello" } })
    assert.are.equal(202, res.status, res.body)
    local t = wait_built(s, s.tenants.acme, "offline")
    assert.are.equal("failed", t.status)
    assert.truthy(t.log_tail:find("127.0.0.1", 1, true), t.log_tail)
    assert.truthy(t.log_tail:find("airlockd: the build failed: mmdebstrap exited with", 1, true), t.log_tail)
    assert.falsy(exists(s.dir .. "/state/templates/" .. res.json.id))
    assert.are.equal("", bases(s)) -- its base was never made: nothing half-made is left of it
  end)
end)
