-- The SDK's kernels (issue 25 item 5) against a real airlockd: sbx:kernel, k:run with its
-- CellResult (text, results, error, ok, tostring in a command's output shape), the streamed
-- form's callbacks in order, a timeout that keeps the state, k:interrupt from another task, the
-- memory limit (a restart, said twice),
-- a matplotlib chart (the session's default root is the host's /usr: install-deps.sh installs
-- python3-matplotlib), k:close and airlock.with cleaning up, cells of two kernels advancing
-- together inside airlock.spawn tasks, and the libuv and OpenResty (cosocket) transports.
-- Runs on Lua 5.4 and LuaJIT (make test runs spec/integration on each).
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local luv = require "luv"

local PNG_BASE64 = "^iVBORw0KGgo"   -- "\x89PNG\r\n\x1a\n" in base64

describe("sbx:kernel", function()
  local srv, sbx, k
  setup(function()
    srv = airlockd.start()
    sbx = airlock.sandbox({ base_url = srv.url, api_key = srv.tenants.acme })
    k = sbx:kernel({ language = "python" })
  end)
  teardown(function()
    if sbx then sbx:close() end
    if srv then airlockd.stop(srv) end
  end)

  it("keeps state between cells and answers as a notebook does", function()
    assert.truthy(tostring(k):find("^<Kernel %S+ python session=" .. sbx.session_id .. ">$"), tostring(k))
    local first = k:run("x = 41")
    assert.is_true(first.ok)
    assert.is_nil(first.text)
    assert.are.same({}, first.results)
    local r = k:run("x + 1")
    assert.are.equal("42", r.text)
    assert.are.same({ { ["text/plain"] = "42" } }, r.results)
    assert.are.equal(first.execution_count + 1, r.execution_count)
    assert.is_false(r.timed_out or r.oom_killed or r.kernel_restarted)
    assert.are.equal("[RESULT]:\n42\n[EXECUTION COUNT]: " .. r.execution_count, tostring(r))
    assert.are.equal(r, r:check())

    local out = k:run("import os, sys\nprint('to out')\nprint('to err', file=sys.stderr)\n"
      .. "os.system('echo from a child')\n'done'")
    assert.are.equal("to out\nfrom a child\n", out.stdout)
    assert.are.equal("to err\n", out.stderr)
    assert.are.equal("[STDOUT]:\nto out\nfrom a child\n[STDERR]:\nto err\n[RESULT]:\n'done'\n"
      .. "[EXECUTION COUNT]: " .. out.execution_count, tostring(out))
    local kernels = sbx:kernels()
    assert.are.equal(1, #kernels)
    assert.are.equal(k.kernel_id, kernels[1].kernel_id)
  end)

  it("reports an exception as a result with Python's traceback, and check raises it", function()
    local r = k:run("def f():\n    return 1 / 0\nf()")
    assert.is_false(r.ok)
    assert.are.equal("ZeroDivisionError", r.error.name)
    assert.are.equal("division by zero", r.error.value)
    local text = tostring(r)
    assert.truthy(text:find("[ERROR]:\nTraceback (most recent call last):", 1, true), text)
    assert.truthy(text:find("in f\n", 1, true), text)
    assert.truthy(text:find("ZeroDivisionError: division by zero\n[EXECUTION COUNT]: ", 1, true), text)
    local ok, err = pcall(r.check, r)
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "CommandError"))
    assert.are.equal(r, err.result)
    assert.truthy(err.message:find("raised ZeroDivisionError: division by zero", 1, true), err.message)
    local syntax = k:run("x = (")
    assert.are.equal("SyntaxError", syntax.error.name)
  end)

  it("streams output and results in order and returns the plain cell's result", function()
    local seen = {}
    local code = "import sys, time\nprint('one')\ntime.sleep(0.3)\ndisplay(2)\n"
      .. "print('three', file=sys.stderr)\ntime.sleep(0.3)\n'four'"
    local r = k:run(code, {
      on_stdout = function(s) seen[#seen + 1] = "out:" .. s end,
      on_stderr = function(s) seen[#seen + 1] = "err:" .. s end,
      on_result = function(data) seen[#seen + 1] = "result:" .. data["text/plain"] end,
    })
    assert.are.same({ "out:one\n", "result:2", "err:three\n", "result:'four'" }, seen)
    assert.are.equal("'four'", r.text)
    local plain = k:run(code)
    assert.are.equal(plain.stdout, r.stdout)
    assert.are.equal(plain.stderr, r.stderr)
    assert.are.same(plain.results, r.results)
    assert.are.equal(r.execution_count + 1, plain.execution_count)
  end)

  it("interrupts a cell at its timeout and keeps the state", function()
    k:run("kept = 'yes'")
    local r = k:run("import time\ntime.sleep(30)", { timeout = 1 })
    assert.is_true(r.timed_out)
    assert.is_false(r.ok)
    assert.is_false(r.kernel_restarted)
    assert.are.equal("KeyboardInterrupt", r.error.name)
    assert.truthy(tostring(r):find("[TIMEOUT]: The cell was interrupted at its time limit; the kernel's state is kept.",
      1, true), tostring(r))
    assert.are.equal("'yes'", k:run("kept").text)
  end)

  it("interrupts a running cell from another task with k:interrupt", function()
    local started = false
    local runner = airlock.spawn(function()
      return k:run("import time\nprint('started', flush=True)\ntime.sleep(60)\n'not interrupted'",
        { timeout = 60, on_stdout = function() started = true end })
    end)
    local interrupter = airlock.spawn(function()
      local transport = require("airlock.transport").auto()
      while not started do transport:sleep(0.02) end   -- yields to the runner until its cell runs
      return k:interrupt()
    end)
    while airlock.poll(100) > 0 do end
    local ok, r = runner:result()
    assert.is_true(ok, tostring(r))
    local iok, interrupted = interrupter:result()
    assert.is_true(iok, tostring(interrupted))
    assert.is_true(interrupted)
    assert.are.equal("KeyboardInterrupt", r.error.name)
    assert.is_false(r.timed_out)
    assert.are.equal("'yes'", k:run("kept").text)
  end)

  it("returns a matplotlib chart as a PNG image", function()
    local r = k:run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    assert.is_true(r.ok, tostring(r))
    assert.are.equal("", r.stderr)   -- no complaint about the sandbox's missing /etc/matplotlibrc or /etc/fonts
    local images = r:images()
    assert.are.equal(1, #images)
    assert.are.equal("image/png", images[1].mime)
    assert.truthy(images[1].base64:find(PNG_BASE64), images[1].base64:sub(1, 20))
    local bytes = tonumber(tostring(r):match("%[image/png: (%d+) bytes%]"))
    assert.truthy(bytes and bytes > 1000 and math.abs(bytes - #images[1].base64 * 3 / 4) <= 2, tostring(r))
  end)

  it("runs cells of two kernels together inside airlock.spawn tasks", function()
    local k2 = sbx:kernel()
    local log = {}
    local function task(kernel, tag)
      return airlock.spawn(function()
        return kernel:run("import time\nfor i in range(3):\n    print('" .. tag .. "%d' % i, flush=True)\n"
          .. "    time.sleep(0.5)", { on_stdout = function(s) log[#log + 1] = s end })
      end)
    end
    local a, b = task(k, "a"), task(k2, "b")
    while airlock.poll(100) > 0 do end
    local oka, ra = a:result()
    local okb, rb = b:result()
    assert.is_true(oka, tostring(ra))
    assert.is_true(okb, tostring(rb))
    assert.are.equal("a0\na1\na2\n", ra.stdout)
    assert.are.equal("b0\nb1\nb2\n", rb.stdout)
    local first_b, last_a
    for i, s in ipairs(log) do
      if s:find("b0", 1, true) and not first_b then first_b = i end
      if s:find("a2", 1, true) then last_a = i end
    end
    assert.truthy(first_b and last_a and first_b < last_a, table.concat(log, ","))
    assert.is_true(k2:close())
  end)

  it("runs a cell on the libuv transport inside a task on the loop", function()
    local uvt = require "airlock.transport.uv"
    uvt.install(luv, { default = false })
    local usbx = airlock.attach(sbx.session_id, { base_url = srv.url, api_key = srv.tenants.acme, transport = "uv" })
    local res, err
    airlock.spawn(function()
      local ok, r = airlock.pcall(function()
        local uk = usbx:kernel()
        local out = uk:run("6 * 7")
        uk:close()
        return out
      end)
      if ok then res = r else err = r end
    end)
    luv.run()
    assert.is_nil(err)
    assert.are.equal("42", res.text)
    assert.is_true(uvt.uninstall())
    luv.run("nowait")
  end)

  it("runs a cell on the cosocket transport in nginx", function()
    local nginx = require "support.hosts.nginx"
    local ngx_eval = require "support.hosts.nginx_eval"
    local host = nginx.start({ env = { SANDBOX_API_URL = srv.url, SANDBOX_API_KEY = srv.tenants.acme },
      server = ngx_eval.LOCATION })
    local ok, value = pcall(ngx_eval.eval, host, [[
      local airlock = require "airlock"
      return airlock.with({}, function(s)
        local nk = s:kernel()
        nk:run("n = 20")
        local seen = {}
        local r = nk:run("print('hi')\nn + 1", { on_stdout = function(t) seen[#seen + 1] = t end })
        return { text = r.text, seen = seen, transport = airlock.stats().transport }
      end)
    ]], 120)
    nginx.assert_no_crashes(nginx.stop(host))
    assert(ok, value)
    assert.are.equal("ngx", value.transport)
    assert.are.equal("21", value.text)
    assert.are.same({ "hi\n" }, value.seen)
  end)

  it("says when the memory limit restarted the kernel, and the next cell says so too", function()
    -- a session of its own (its sandbox goes down with the memory kill and the next one boots)
    local own = airlock.sandbox({ base_url = srv.url, api_key = srv.tenants.acme, memory_mb = 256 })
    finally(function() own:close() end)
    local hog = own:kernel()
    hog:run("z = 1")
    local r = hog:run("b = bytearray(600 * 1024 * 1024)", { timeout = 30 })
    assert.is_true(r.oom_killed, tostring(r))
    assert.is_true(r.kernel_restarted)
    assert.is_false(r.ok)
    assert.truthy(tostring(r):find(
      "[OUT OF MEMORY]: The kernel ran out of memory and was restarted; its state is gone.", 1, true), tostring(r))
    local after = hog:run("'z' in globals()")
    assert.are.equal("False", after.text)
    assert.is_true(after.kernel_restarted)
    assert.truthy(tostring(after):find("[KERNEL RESTARTED]: ", 1, true), tostring(after))
    assert.is_true(hog:close())
  end)

  it("closes: k:close deletes the kernel, twice is fine, and a closed kernel refuses cells", function()
    local kc = sbx:kernel()
    assert.are.equal(2, #sbx:kernels())
    assert.is_true(kc:close())
    assert.is_true(kc:close())
    assert.are.equal(1, #sbx:kernels())
    local ok, err = pcall(kc.run, kc, "1")
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "SandboxError"))
    assert.truthy(tostring(err):find("is closed", 1, true))
    -- a kernel deleted behind the handle's back: its cells are NotFoundError, its close is fine
    local gone = sbx:kernel()
    local twin = setmetatable({}, airlock.Kernel)
    for key, v in pairs(gone) do twin[key] = v end
    assert.is_true(twin:close())
    ok, err = pcall(gone.run, gone, "1")
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "NotFoundError"), tostring(err))
    assert.is_true(gone:close())
  end)

  it("checks its arguments", function()
    assert.has_error(function() sbx:kernel({ language = "ruby" }) end)
    assert.has_error(function() sbx:kernel({ lang = "python" }) end)
    assert.has_error(function() k:run(nil) end)
    assert.has_error(function() k:run("1", { timeout = 0 }) end)
    assert.has_error(function() k:run("1", { on_result = "print" }) end)
    assert.has_error(function() k:run("1", { on_stdot = print }) end)
    assert.has_error(function() k.run({}, "1") end)
    assert.has_error(function() k:close({ timeout = 0 }) end)
    assert.is_nil(k.closed)   -- a refused close leaves the kernel open
  end)
end)

describe("airlock.with and kernels", function()
  local srv
  setup(function() srv = airlockd.start() end)
  teardown(function() if srv then airlockd.stop(srv) end end)

  it("ends the kernels with the session it deletes", function()
    local opts = { base_url = srv.url, api_key = srv.tenants.acme }
    local kept, sid = nil, nil
    airlock.with(opts, function(s)
      kept, sid = s:kernel(), s.session_id
      assert.are.equal("2", kept:run("1 + 1").text)
    end)
    local sessions = airlock.list_sessions(opts)
    for _, s in ipairs(sessions) do assert.are_not.equal(sid, s.session_id) end
    local ok, err = pcall(kept.run, kept, "1")
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "NotFoundError"), tostring(err))
    assert.is_true(kept:close())
  end)
end)
