-- SDK integration specs against a real airlockd (spec/support/airlockd.lua). The HTTP
-- failure paths airlockd cannot produce (429/503 storms, resets, stalls, garbage, odd error
-- bodies) are in badserver_spec.lua.
local airlock = require "airlock"
local core = require "airlock.core"
local dropped = require "airlock.dropped_sessions"

local function clock() return require("socket").gettime() end

local expect_error = require "support.expect_error"
local http_client = require "support.http_client"

-- A command that runs until the spec writes go into its workspace (30 s at most): two of them
-- overlap for sure, however long each sandbox takes to boot.
local UNTIL_GO = http_client.until_go(30)
-- a command that says it started (the file started), then waits for go
local STARTED_UNTIL_GO = "touch started; " .. UNTIL_GO

-- Whether every one of the sandboxes' commands has started (a file each, read one at a time:
-- those seen started are not asked again); seen is the caller's table, by index.
local function all_started(sbxs, seen)
  for i, sbx in ipairs(sbxs) do
    if not seen[i] then
      local ok = airlock.pcall(sbx.files.read, sbx.files, "started")
      if not ok then return false end
      seen[i] = true
    end
  end
  return true
end

local function session_ids(opts)
  local ids = {}
  for _, s in ipairs((airlock.list_sessions(opts))) do ids[s.session_id] = true end
  return ids
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

describe("airlock SDK against airlockd", function()
  local airlockd = require "support.airlockd"
  local srv, opts, key

  setup(function()
    srv = airlockd.start()
    key = srv.tenants.acme
    opts = { api_key = key, base_url = srv.url }
  end)

  teardown(function()
    if srv then
      -- nothing may be left behind on the server
      local ok, ids = pcall(session_ids, opts)
      airlockd.stop(srv)
      assert.is_true(ok, tostring(ids))
      assert.are.equal(0, count(ids))
    end
  end)

  local function with_opts(extra)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  it("creates, writes, reads, runs and closes a session", function()
    local sbx = airlock.sandbox(opts)
    finally(function() sbx:close() end)
    assert.is_truthy(sbx.session_id:match("^sbx_%x+$"))
    assert.are.equal(16, #sbx.session_id)
    assert.are.equal("acme", sbx.tenant_id)
    assert.are.same({}, sbx.egress)
    assert.are.equal(512, sbx.disk_quota_mb)
    assert.are.equal("sandbox-base:latest", sbx.template)
    assert.are.equal(srv.url, sbx.base_url)
    assert.are.equal("<Sandbox " .. sbx.session_id .. " tenant=acme egress=[]>", tostring(sbx))
    assert.is_true(session_ids(opts)[sbx.session_id])

    sbx.files:write("dir one/hello.txt", "héllo wörld\n")
    assert.are.equal("héllo wörld\n", sbx.files:read("dir one/hello.txt"))
    assert.are.equal("Successfully wrote 3 characters to é.txt", sbx:write_file("é.txt", "a€😀"))
    assert.are.equal("a€😀", sbx:read_file("é.txt"))

    local r = sbx:run("cat 'dir one/hello.txt'; echo err >&2")
    assert.are.equal("héllo wörld\n", r.stdout)
    assert.are.equal("err\n", r.stderr)
    assert.are.equal(0, r.exit_code)
    assert.is_true(r.ok)
    assert.are.equal(r, r:check())
    assert.are.equal("[STDOUT]:\nhéllo wörld\n[STDERR]:\nerr\n[EXIT CODE]: 0", tostring(r))
    assert.are.equal("[STDOUT]:\nhi\n[EXIT CODE]: 0", sbx:run_command("echo hi"))

    local id = sbx.session_id
    sbx:close()
    assert.is_nil(sbx.session_id)
    assert.is_nil(session_ids(opts)[id])
    sbx:close()  -- twice: no error, nothing sent
  end)

  it("reports failing and timed-out commands", function()
    local sbx = airlock.sandbox(opts)
    finally(function() sbx:close() end)
    local r = sbx:run("echo out; exit 3")
    assert.are.equal(3, r.exit_code)
    assert.is_false(r.ok)
    local err = expect_error("CommandError", r.check, r)
    assert.are.equal(r, err.result)
    assert.is_truthy(err.message:find("^Command 'echo out; exit 3' exited with code 3%.\n"))
    r = sbx:run("sleep 5", { timeout = 1 })
    assert.is_true(r.timed_out)
    assert.are.equal(-1, r.exit_code)
    assert.are.same({ "Execution exceeded 1s limit." }, r.warnings)
    assert.are.equal("[TIMEOUT]: Execution exceeded 1s limit.\n[EXIT CODE]: -1", r.output)
  end)

  it("answers usage, health, egress policy and log, and lists sessions", function()
    local sbx = airlock.sandbox(opts)
    finally(function() sbx:close() end)
    local usage = sbx:usage()
    assert.are.equal("acme", usage.tenant_id)
    assert.is_true(usage.limits.max_sessions >= 1)
    assert.are.equal(1, usage.sessions_open)
    assert.are.equal("healthy", sbx:health().status)
    assert.are.equal("table", type(sbx:egress_policy()))
    assert.are.same({}, sbx:egress_log({ limit = 10 }))
    local sessions, tenant = airlock.list_sessions(opts)
    assert.are.equal("acme", tenant)
    assert.are.equal(sbx.session_id, sessions[1].session_id)
  end)

  it("maps server errors: missing file, traversal, bad key, closed session", function()
    local sbx = airlock.sandbox(opts)
    finally(function() sbx:close() end)
    local err = expect_error("FileNotFoundError", sbx.files.read, sbx.files, "nope.txt")
    assert.are.equal("nope.txt", err.path)
    err = expect_error("PermissionDeniedError", sbx.files.write, sbx.files, "../x", "x")
    assert.are.equal(403, err.status)
    expect_error("PermissionDeniedError", sbx.files.read, sbx.files, "../../etc/passwd")

    err = expect_error("AuthenticationError", airlock.sandbox, with_opts({ api_key = "wrong-key-1234" }))
    assert.are.equal(401, err.status)
    assert.is_nil(tostring(err):find("wrong-key-1234", 1, true))

    local id = sbx.session_id
    sbx:close()
    local again = airlock.attach(id, opts)
    err = expect_error("NotFoundError", again.run, again, "true")
    assert.are.equal(404, err.status)
    again:close()   -- the 404 of the DELETE is swallowed
  end)

  it("deletes a dropped, unclosed session on the next call (GC backstop, no I/O in GC)", function()
    local id
    do
      local sbx = airlock.sandbox(opts)
      id = sbx.session_id
    end
    assert.is_true(session_ids(opts)[id])
    collectgarbage()
    collectgarbage()
    assert.are.equal(1, dropped.count())
    -- the next SDK call drains the queue first
    assert.is_nil(session_ids(opts)[id])
    assert.are.equal(0, dropped.count())
  end)

  it("never deletes an attached session on GC", function()
    local sbx = airlock.sandbox(opts)
    finally(function() sbx:close() end)
    do
      local attached = airlock.attach(sbx.session_id, opts)
      assert.are.equal(sbx.session_id, attached.session_id)
    end
    collectgarbage()
    collectgarbage()
    assert.are.equal(0, dropped.count())
    assert.is_true(session_ids(opts)[sbx.session_id])
  end)

  it("attach makes no network call", function()
    local sbx = airlock.attach("sbx_000000000000", { api_key = "k", base_url = "http://127.0.0.1:9" })
    assert.are.equal("sbx_000000000000", sbx.session_id)
    assert.is_nil(sbx.tenant_id)
  end)

  it("airlock.with closes on success and on error, and re-raises", function()
    local seen
    local a, b = airlock.with(opts, function(sbx)
      seen = sbx.session_id
      sbx.files:write("x.txt", "1")
      return "r1", 2
    end)
    assert.are.equal("r1", a)
    assert.are.equal(2, b)
    assert.is_nil(session_ids(opts)[seen])

    local boom = setmetatable({}, { __tostring = function() return "boom" end })
    local ok, err = pcall(airlock.with, opts, function(sbx)
      seen = sbx.session_id
      error(boom)
    end)
    assert.is_false(ok)
    assert.are.equal(boom, err)
    assert.is_nil(session_ids(opts)[seen])
  end)

  it("keeps one connection across a session's calls", function()
    local before = core.stats().connects
    local sbx = airlock.sandbox(opts)
    for i = 1, 5 do
      sbx.files:write("f" .. i, tostring(i))
      assert.are.equal(tostring(i), sbx.files:read("f" .. i))
    end
    sbx:usage()
    sbx:close()
    -- 13 requests; at most one new connection (none if an idle one was already open)
    assert.is_true(core.stats().connects - before <= 1, "connects: " .. core.stats().connects - before)
  end)

  it("runs two commands in two sandboxes at the same time from one thread (core)", function()
    local engine = airlock.engine
    local a, b = airlock.sandbox(opts), airlock.sandbox(opts)
    finally(function() a:close() b:close() end)
    local settings = engine.settings(opts)
    local function exec(sbx)
      return core.request(engine.build(settings, "POST",
        engine.session_path(sbx.session_id, "/exec"),
        { { "command", STARTED_UNTIL_GO .. "echo x" }, { "timeout_seconds", 60 } }, { timeout = 90 }))
    end
    local t = clock()
    local reqs = { exec(a), exec(b) }
    -- both commands have started and wait (read by a third request in flight), then both are
    -- let go: the overlap itself, not a time, is what is checked
    local released, seen, asked = false, {}, 0
    while not (reqs[1]:done() and reqs[2]:done()) do
      core.step(100)
      if not released and clock() - asked >= 0.5 and (function()
        asked = clock()
        return all_started({ a, b }, seen)
      end)() then
        a.files:write("go", "")
        b.files:write("go", "")
        released = true
      end
      assert.is_true(clock() - t < 120, "hang")
    end
    for _, req in ipairs(reqs) do
      local r = req:result()
      local ok, data = engine.decode(settings, r.status and r or nil, r)
      assert.is_true(ok, tostring(data))
      assert.are.equal("x\n", data.stdout)
    end
    assert.is_true(released, "the two commands never ran at once")
  end)

  it("runs tasks concurrently with spawn/poll", function()
    local t = clock()
    local outputs, tasks, ids = {}, {}, {}
    for i = 1, 2 do
      tasks[i] = airlock.spawn(function()
        return airlock.with(opts, function(sbx)
          ids[i] = sbx.session_id
          -- the other task's sandbox may boot slowly on a loaded machine: the command waits
          -- for go longer than the default timeout would let it
          local r = sbx:run(STARTED_UNTIL_GO .. "echo task" .. i, { timeout = 60 })
          outputs[i] = r.stdout
          return r.exit_code
        end)
      end)
    end
    assert.are.equal("running", tasks[1].status)
    local polls, released, asked, seen = 0, false, 0, {}
    while airlock.poll(50) > 0 do
      polls = polls + 1
      -- both commands have started and wait, then both are let go: the overlap itself, not a
      -- time, is what is checked (asked at most every 0.5 s, one request at a time: a slow boot
      -- must not spend the tenant's 120 requests a minute)
      if not released and ids[1] and ids[2] and clock() - asked >= 0.5 and (function()
        asked = clock()
        return all_started({ airlock.attach(ids[1], opts), airlock.attach(ids[2], opts) }, seen)
      end)() then
        for i = 1, 2 do airlock.attach(ids[i], opts).files:write("go", "") end
        released = true
      end
      assert.is_true(clock() - t < 120, "tasks hang")
    end
    for i = 1, 2 do
      local ok, code = tasks[i]:result()
      assert.is_true(ok, tostring(code))
      assert.are.equal(0, code)
      assert.are.equal("task" .. i .. "\n", outputs[i])
    end
    assert.is_true(polls > 1)
    assert.is_true(released, "the two commands never ran at once")
  end)

  -- PUC Lua 5.1's pcall cannot be yielded across: with and the agent tools must not use it.
  it("spawn + with: a scope that waits then fails is closed and its error re-raised (every Lua)", function()
    local tools = require "airlock.tools"
    local seen, text
    local boom = setmetatable({}, { __tostring = function() return "boom" end })
    local task = airlock.spawn(function()
      return airlock.with(opts, function(sbx)
        seen = sbx.session_id
        text = tools.handle_tool_call(sbx, "run_command", '{"command": "echo from-a-task"}')
        local ok, err = airlock.pcall(sbx.files.read, sbx.files, "missing.txt")
        assert(not ok and airlock.is(err, "FileNotFoundError"), tostring(err))
        error(boom)
      end)
    end)
    local t = clock()
    while airlock.poll(50) > 0 do assert.is_true(clock() - t < 60, "the task hangs") end
    local ok, err = task:result()
    assert.is_false(ok)
    assert.are.equal(boom, err)
    assert.is_truthy(text:find("from-a-task", 1, true), text)
    assert.is_nil(session_ids(opts)[seen])
  end)

  it("a poll(0) never blocks while requests are in flight", function()
    local sbx = airlock.sandbox(opts)
    finally(function() sbx:close() end)
    local done = false
    airlock.spawn(function() sbx:run("sleep 1") done = true end)
    -- a poll(0) that waited would return with the command done: the first ones return before
    local polls, t = 0, clock()
    while not done do
      airlock.poll(0)
      polls = polls + 1
      assert.is_true(clock() - t < 60, "the command hangs")
    end
    assert.is_true(polls > 1, "the first poll(0) waited for the command")
  end)
end)
