-- luacheck: max line length 160
-- Kernels (issue 25): stateful Python interpreters in a session's own sandbox, through the real
-- airlockd, agent and runsc on loopback (SANDBOX_EXEC_MODE=session, the default root over the
-- host's /usr, whose python3 and matplotlib the kernels use). State kept across cells, output,
-- errors, a timeout that keeps state, a cell that ignores its interrupt (killed, restarted, said
-- twice), the interrupt route, the streamed form, the memory limit (restart, files intact),
-- limits and bad input, commands that cannot see kernels, a matplotlib chart, and a deleted
-- session that leaves nothing on the host. Also prints (never asserts) a trivial cell's p50
-- against `python3 -c pass` as a command, and an idle kernel's CPU and memory. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"
require "support.eventually"

local q = proc.shell_quote

describe("kernels (SANDBOX_EXEC_MODE=session)", function()
  local server, key, sid, kid, audit_db

  local function call(method, path, body, max_time)
    return http_client.request(server, method, path, { key = key, body = body and cjson.encode(body), max_time = max_time })
  end

  local function new_kernel(session_id)
    local r = call("POST", "/v1/sessions/" .. session_id .. "/kernels", { language = "python" })
    assert.are.equal(201, r.status, r.body)
    return r.json.kernel_id
  end

  -- One cell of kernel k of session s; the answer's JSON (200 asserted).
  local function cell(code, timeout, s, k)
    local r = call("POST", "/v1/sessions/" .. (s or sid) .. "/kernels/" .. (k or kid) .. "/execute",
      { code = code, timeout = timeout }, (timeout or 15) + 30)
    assert.are.equal(200, r.status, r.body)
    return r.json
  end

  lazy_setup(function()
    key = "ak_" .. airlockd.random_hex(16)
    audit_db = proc.temp_path() .. ".db"
    -- (many requests in a minute: cells, and polls while a cell runs)
    server = airlockd.start({ tenants = { acme = key }, env = { SANDBOX_AUDIT = "sqlite:" .. audit_db,
                                                                SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000}}' } })
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    sid = r.json.session_id
    kid = new_kernel(sid)
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
    if audit_db then os.remove(audit_db) end
  end)

  it("keeps state across cells and returns output, results and errors", function()
    local r = call("GET", "/v1/sessions/" .. sid .. "/kernels")
    assert.are.equal(200, r.status, r.body)
    assert.are.same({ { kernel_id = kid, language = "python", state = "idle" } }, r.json.kernels)
    local a = cell("x = 41\nprint('out'); import sys; print('err', file=sys.stderr)")
    assert.are.equal("out\n", a.stdout)
    assert.are.equal("err\n", a.stderr)
    assert.are.same({}, a.results)
    assert.are.equal(cjson.null, a.error)
    local b = cell("x + 1")
    assert.are.equal("42", b.results[1]["text/plain"])
    assert.are.equal(a.execution_count + 1, b.execution_count)
    assert.is_false(b.timed_out or b.oom_killed or b.kernel_restarted)
    assert.is_number(b.duration_ms)
    local c = cell("def f():\n    raise ValueError('bad value')\nf()")
    assert.are.equal("ValueError", c.error.name)
    assert.are.equal("bad value", c.error.value)
    assert.truthy(c.error.traceback:find("ValueError: bad value", 1, true), c.error.traceback)
    assert.truthy(c.error.traceback:find("in f", 1, true), c.error.traceback)
    -- a pause keeps the kernel's memory (an image of its sandbox): the next cell resumes it, state kept
    local p = call("POST", "/v1/sessions/" .. sid .. "/pause", nil, 90)
    assert.are.equal(200, p.status, p.body)
    assert.is_true(p.json.image_bytes > 0, p.body)
    assert.are.equal("42", cell("x + 1").results[1]["text/plain"])
    local audit = call("GET", "/v1/audit?limit=10")
    assert.are.equal(200, audit.status, audit.body)
    local kinds = {}
    for _, e in ipairs(audit.json.entries) do kinds[#kinds + 1] = e.kind .. ":" .. e.command end
    assert.truthy(table.concat(kinds, "\n"):find("kernel:x + 1", 1, true), audit.body) -- every cell is audited
  end)

  it("interrupts a cell past its timeout and keeps state; kills one that ignores it and says so twice", function()
    cell("y = 'kept'")
    local t = cell("while True: pass", 1)
    assert.is_true(t.timed_out)
    assert.is_false(t.kernel_restarted)
    assert.are.equal("KeyboardInterrupt", t.error.name)
    assert.are.equal("'kept'", cell("y").results[1]["text/plain"])
    local k = cell("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(100)", 1)
    assert.is_true(k.timed_out)
    assert.is_true(k.kernel_restarted)
    assert.are.equal("KernelRestarted", k.error.name)
    local after = cell("'y' in globals()")
    assert.are.equal("False", after.results[1]["text/plain"])
    assert.is_true(after.kernel_restarted) -- the next cell says so too
    assert.is_false(cell("1").kernel_restarted) -- and only that one
  end)

  -- Starts code as a streamed cell of kernel k in the background; once it printed "started",
  -- calls act(), then returns the stream's events.
  local function streamed_cell(k, code, act)
    local out = proc.temp_path()
    os.execute(string.format("(curl -s -N -m 60 -H 'Content-Type: application/json' -H %s --data-binary %s %s > %s; echo done > %s) &",
      q("X-API-Key: " .. key), q(cjson.encode({ code = "print('started', flush=True)\n" .. code, timeout = 50 })),
      q(server.url .. "/v1/sessions/" .. sid .. "/kernels/" .. k .. "/execute?stream=1"), q(out), q(out .. ".done")))
    assert.eventually(function() return (proc.read_file(out) or ""):find("started", 1, true) end, { timeout = 20, what = "the cell started" })
    act()
    assert.eventually(function() return proc.read_file(out .. ".done") end, { timeout = 20, what = "the streamed answer ended" })
    local events = {}
    for line in (proc.read_file(out) or ""):gmatch("[^\n]+") do events[#events + 1] = cjson.decode(line) end
    os.remove(out)
    os.remove(out .. ".done")
    return events
  end

  it("interrupts a running cell on POST .../interrupt, and streams output as it comes", function()
    local events = streamed_cell(kid, "import time\ndisplay(7)\ntime.sleep(30)", function()
      local r = call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/interrupt")
      assert.are.equal(200, r.status, r.body)
    end)
    local kinds = {}
    for _, e in ipairs(events) do kinds[#kinds + 1] = e.type end
    assert.are.same({ "stdout", "display", "exception", "result" }, { kinds[1], kinds[#kinds - 2], kinds[#kinds - 1], kinds[#kinds] })
    assert.are.equal("started\n", events[1].data)
    assert.are.equal("7", events[#events - 2].data["text/plain"])
    assert.are.equal("KeyboardInterrupt", events[#events - 1].error.name)
    local final = events[#events].result
    assert.are.equal("KeyboardInterrupt", final.error.name)
    assert.is_false(final.timed_out)
    assert.are.equal("started\n", final.stdout)
  end)

  it("refuses a third kernel, unknown kernels and languages, and bad fields, naming them", function()
    local second = new_kernel(sid)
    local third = call("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" })
    assert.are.equal(409, third.status, third.body)
    assert.truthy(third.json.detail:find("2 allowed", 1, true), third.body)
    local events = streamed_cell(second, "import time\ntime.sleep(30)", function() -- deleted while a cell runs
      assert.are.equal(200, call("DELETE", "/v1/sessions/" .. sid .. "/kernels/" .. second).status)
    end)
    assert.are.equal("KernelDeleted", events[#events].result.error.name)
    assert.are.equal(404, call("DELETE", "/v1/sessions/" .. sid .. "/kernels/" .. second).status)
    for _, bad in ipairs({
      { "kernels", { language = "ruby" }, "language" },
      { "kernels", {}, "language" },
      { "kernels/" .. kid .. "/execute", {}, "code" },
      { "kernels/" .. kid .. "/execute", { code = 1 }, "code" },
      { "kernels/" .. kid .. "/execute", { code = "1", timeout = 0 }, "timeout" },
      { "kernels/" .. kid .. "/execute", { code = "1", timeout = 61 }, "timeout" },
      { "kernels/" .. kid .. "/execute", { code = "1", timeout = "soon" }, "timeout" },
    }) do
      local r = call("POST", "/v1/sessions/" .. sid .. "/" .. bad[1], bad[2])
      assert.are.equal(422, r.status, r.body)
      assert.are.equal(bad[3], r.json.detail[1].loc[2], r.body)
    end
    local bad_json = http_client.request(server, "POST", "/v1/sessions/" .. sid .. "/kernels", { key = key, body = "{" })
    assert.are.equal(422, bad_json.status, bad_json.body)
    for _, p in ipairs({ "krn_nope/execute", "krn_nope/interrupt" }) do
      local r = call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. p, { code = "1" })
      assert.are.equal(404, r.status, r.body)
      assert.truthy(r.json.detail:find("krn_nope", 1, true), r.body)
    end
    assert.are.equal(404, call("POST", "/v1/sessions/sbx_000000000000/kernels", { language = "python" }).status)
  end)

  it("hides kernels from commands, and draws a matplotlib chart as image/png", function()
    local ps = http_client.exec(server, key, sid, "ps -e -o comm=")
    assert.are.equal(200, ps.status, ps.body)
    assert.are.equal("ps\n", ps.json.stdout)
    local png = cell("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()", 30)
    assert.are.equal(cjson.null, png.error)
    local data = png.results[1] and png.results[1]["image/png"]
    assert.is_string(data)
    local raw = proc.output("printf %s " .. q(data) .. " | base64 -d | head -c 8 | od -An -tx1")
    assert.are.equal("89 50 4e 47 0d 0a 1a 0a", raw:gsub("^%s+", ""):gsub("%s+$", ""))
  end)

  it("restarts a kernel that runs out of memory, and the session's other kernel, the session and its files intact", function()
    local r = http_client.create(server, key, cjson.encode({ memory_mb = 256 }))
    assert.are.equal(201, r.status, r.body)
    local s2 = r.json.session_id
    local k2, other = new_kernel(s2), new_kernel(s2)
    assert.are.equal(200, http_client.write(server, key, s2, "keep.txt", "kept").status)
    cell("z = 1", nil, s2, k2)
    cell("y = 2", nil, s2, other)
    local oom = cell("b = bytearray(600 * 1024 * 1024)", 30, s2, k2)
    assert.is_true(oom.oom_killed, cjson.encode(oom))
    assert.is_true(oom.kernel_restarted)
    local after = cell("print(open('keep.txt').read()); 'z' in globals()", nil, s2, k2)
    assert.are.equal("kept\n", after.stdout)
    assert.are.equal("False", after.results[1]["text/plain"])
    assert.is_true(after.kernel_restarted)
    -- the other kernel's process died with the sandbox: it restarts in the new one and says so once
    local second = cell("'y' in globals(), open('keep.txt').read()", nil, s2, other)
    assert.are.equal("(False, 'kept')", second.results[1]["text/plain"], cjson.encode(second))
    assert.is_true(second.kernel_restarted)
    local again = cell("y = 3\ny", nil, s2, other)
    assert.are.equal("3", again.results[1]["text/plain"])
    assert.is_false(again.kernel_restarted)
    assert.are.equal("kept", http_client.read(server, key, s2, "keep.txt").json.content)
  end)

  it("counts a running cell as a command, and ends it at once when its kernel or its session is deleted", function()
    local s5 = http_client.create(server, key).json.session_id
    local function sleeping_cell(k)
      local h = http_client.post_async(server, key, "/v1/sessions/" .. s5 .. "/kernels/" .. k .. "/execute",
        { code = "import time; time.sleep(50)", timeout = 55 }, 30) -- curl gives up (no answer) long before the sleep ends
      assert.eventually(function()
        local list = call("GET", "/v1/sessions/" .. s5 .. "/kernels").json.kernels
        for _, e in ipairs(list) do
          if e.kernel_id == k then return e.state == "busy", list end
        end
        return false, list
      end, { timeout = 20, what = "the cell running" })
      return h
    end
    local k5 = new_kernel(s5)
    local h = sleeping_cell(k5)
    -- a running cell counts as one of the tenant's running commands (max_concurrent_exec)
    assert.are.equal(1, call("GET", "/v1/usage").json.commands_running)
    assert.are.equal(200, call("DELETE", "/v1/sessions/" .. s5 .. "/kernels/" .. k5).status)
    local answer, raw = h.wait(40)
    assert.is_table(answer, raw)
    assert.are.equal("KernelDeleted", answer.error and answer.error.name, raw)
    assert.are.equal(0, call("GET", "/v1/usage").json.commands_running)
    k5 = new_kernel(s5)
    h = sleeping_cell(k5)
    assert.are.equal(200, http_client.delete(server, key, s5).status)
    answer, raw = h.wait(40)
    assert.is_table(answer, raw)
    assert.are.equal("KernelDeleted", answer.error and answer.error.name, raw)
  end)

  it("leaves no process, mount or cgroup of a deleted session's kernels", function()
    local r = http_client.create(server, key)
    local s3 = r.json.session_id
    local k3 = new_kernel(s3)
    cell("v = 1", nil, s3, k3)
    local function leftovers() return host_state.session_leftovers(server, s3) end
    assert.are_not.same({}, leftovers().sandboxes)
    assert.are.equal(200, http_client.delete(server, key, s3).status)
    assert.eventually(function()
      local left = leftovers()
      return #left.sandboxes == 0 and #left.cgroups == 0 and left.mounts == "0", left
    end, { timeout = 20, what = "nothing of the deleted session left" })
    assert.are.equal(404, call("GET", "/v1/sessions/" .. s3 .. "/kernels").status)
  end)

  it("measures a trivial cell against python3 -c pass, and an idle kernel (printed)", function()
    local s4 = http_client.create(server, key).json.session_id
    local k4 = new_kernel(s4)
    local function p50(fn)
      local t = {}
      for i = 1, 15 do
        local t0 = proc.output("date +%s%N")
        fn()
        t[i] = (tonumber(proc.output("date +%s%N")) - tonumber(t0)) / 1e6
      end
      table.sort(t)
      return t[8]
    end
    local cells, runs = {}, {}
    for round = 1, 3 do -- interleaved
      cells[round] = p50(function() cell("1 + 1", nil, s4, k4) end)
      runs[round] = p50(function() http_client.exec(server, key, s4, "python3 -c pass") end)
    end
    table.sort(cells)
    table.sort(runs)
    local status = "import re; print(re.search(r'VmRSS:\\s*(\\d+)', open('/proc/self/status').read()).group(1))"
    local rss = cell(status, nil, s4, k4).stdout:match("%d+")
    local plain = http_client.exec(server, key, s4, "python3 -c " .. q(status)).json.stdout:match("%d+")
    local root = host_state.cgroup_root(server.dir .. "/state")
    local cpu_dir
    for _, g in ipairs(host_state.cgroups_under(root)) do
      if g:find(s4, 1, true) and g:find("/cpuacct/", 1, true) then cpu_dir = g end
    end
    proc.sleep(2.5) -- past the second a sandbox stays thawed after its last cell
    local before = cpu_dir and tonumber(host_state.cgroup_value(cpu_dir, "cpuacct.usage"))
    proc.sleep(3)
    local after = cpu_dir and tonumber(host_state.cgroup_value(cpu_dir, "cpuacct.usage"))
    print(string.format("\nkernels: trivial cell p50 %.1f ms, python3 -c pass p50 %.1f ms (ratio %.3f, both through curl); "
      .. "idle kernel RSS %s kB (a bare python3: %s kB); its sandbox's CPU over 3 s idle: %s ms", cells[2], runs[2],
      cells[2] / runs[2], tostring(rss), tostring(plain), before and after and string.format("%.2f", (after - before) / 1e6) or "?"))
    assert.is_number(cells[2])
  end)
end)

describe("kernels in SANDBOX_EXEC_MODE=command", function()
  it("are refused with a clear 409", function()
    local key = "ak_" .. airlockd.random_hex(16)
    local server = airlockd.start({ tenants = { acme = key }, env = { SANDBOX_EXEC_MODE = "command" } })
    local ok, err = pcall(function()
      local sid = http_client.create(server, key).json.session_id
      local r = http_client.request(server, "POST", "/v1/sessions/" .. sid .. "/kernels",
        { key = key, body = cjson.encode({ language = "python" }) })
      assert.are.equal(409, r.status, r.body)
      assert.truthy(r.json.detail:find("SANDBOX_EXEC_MODE=session", 1, true), r.body)
    end)
    airlockd.stop(server)
    assert(ok, err)
  end)
end)
