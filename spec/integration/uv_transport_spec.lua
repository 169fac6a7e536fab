-- The libuv transport (airlock.transport.uv) on a real luv loop: tasks' transfers and retry
-- sleeps run on the loop's poll handles and timers, tasks are resumed from it, and the loop
-- ends by itself when nothing is in flight (no handle left active: nothing polls). Also a
-- blocking call beside the tasks, socket numbers libcurl reuses before the loop saw the old
-- socket go, more transfers than connections, the curl transport stepping the same core,
-- and install's checks. Runs on Lua 5.4, LuaJIT
-- and 5.1 (luv is installed by scripts/install-deps.sh: without it every test fails).
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local luv = require "luv"

describe("the libuv transport on luv", function()
  local airlock = require "airlock"
  local uvt = require "airlock.transport.uv"

  before_each(function() uvt.install(luv) end)
  after_each(function()
    assert.is_true(uvt.uninstall())
    luv.run("nowait")            -- the closed handles finish closing
  end)

  -- Runs the loop until it ends by itself; a guard (unreferenced: it does not keep the loop
  -- alive) stops it after `seconds`. Returns whether the loop ended by itself.
  local function run_loop(seconds)
    local stopped = false
    local guard = luv.new_timer()
    -- timers count from the loop's cached time, stale since the loop last ran (maybe minutes
    -- ago, in an earlier spec): without this the guard would go off at once
    luv.update_time()
    guard:start(seconds * 1000, 0, function()
      stopped = true
      luv.stop()
    end)
    guard:unref()
    luv.run()
    guard:close()
    luv.run("nowait")
    return not stopped
  end

  -- A repeating timer counting ticks until done() says so (a host's own work on the loop).
  local function ticker(done)
    local t = { ticks = 0 }
    local timer = luv.new_timer()
    luv.update_time()
    timer:start(10, 10, function()
      t.ticks = t.ticks + 1
      if done() then timer:close() end
    end)
    return t
  end

  local function stats() return uvt:stats() end

  -- What the transport and the SDK say, for a failure message.
  local function state()
    local parts = {}
    for k, v in pairs(airlock.stats()) do parts[#parts + 1] = k .. "=" .. tostring(v) end
    table.sort(parts)
    return table.concat(parts, " ")
  end

  describe("against airlockd", function()
    local srv, opts
    setup(function()
      srv = airlockd.start()
      opts = { base_url = srv.url, api_key = srv.tenants.acme }
    end)
    teardown(function() if srv then airlockd.stop(srv) end end)

    it("runs commands of several tasks on the loop, which ends by itself when they are done", function()
      assert.are.equal("uv", airlock.stats().transport)
      local list = {}
      for i = 1, 3 do
        list[i] = airlock.spawn(function()
          return airlock.with(opts, function(sbx) return sbx:run("sleep 1; echo task " .. i).stdout end)
        end)
      end
      local tick = ticker(function() return airlock.stats().tasks == 0 end)
      assert.is_true(run_loop(60), "the loop did not end by itself: " .. state())
      for i, task in ipairs(list) do
        assert.are.same({ true, "task " .. i .. "\n" }, { task:result() })
      end
      -- the loop kept running its own timer while the commands ran (about 100 ticks a second)
      assert.is_true(tick.ticks >= 10, "ticks: " .. tick.ticks)
      local s = stats()
      assert.are.equal(0, s.watched)
      assert.are.equal(0, s.waiting)
      assert.is_false(s.timer_armed)
      assert.is_true(s.wakeups > 0)
      assert.are.equal(0, s.callback_errors)
      assert.are.equal(0, #airlock.list_sessions(opts))
    end)

    it("a blocking call outside tasks finishes, and the tasks' transfers advance meanwhile", function()
      local task = airlock.spawn(function() return airlock.attach("sbx_000000000000", opts):health().status end)
      assert.are.equal("running", task.status)
      local sbx = airlock.sandbox(opts)          -- blocking: the core waits on its sockets
      assert.matches("^sbx_", sbx.session_id)
      sbx:close()
      assert.is_true(run_loop(30))
      assert.are.same({ true, "healthy" }, { task:result() })
      assert.are.equal(0, stats().watched)
    end)

    it("snapshots and forks in a task on the loop (airlockd snapshots)", function()
      local task = airlock.spawn(function()
        return airlock.with(opts, function(sbx)
          sbx.files:write("f.txt", "kept")
          local id = sbx:snapshot{ name = "on-uv" }
          local listed = #airlock.snapshots.list(opts)
          local fork = airlock.sandbox{ base_url = opts.base_url, api_key = opts.api_key, from_snapshot = id }
          local text = fork.files:read("f.txt")
          fork:close()
          airlock.snapshots.delete(id, opts)
          return listed, text
        end)
      end)
      assert.is_true(run_loop(60), "the loop did not end by itself: " .. state())
      assert.are.same({ true, 1, "kept" }, { task:result() })
      assert.are.equal(0, #airlock.snapshots.list(opts))
    end)

    it("finishes 100 transfers in flight at once over at most 64 connections", function()
      local list, before = {}, stats()
      for i = 1, 100 do
        list[i] = airlock.spawn(function() return airlock.attach("sbx_000000000000", opts):health().status end)
      end
      assert.is_true(run_loop(60))
      for _, task in ipairs(list) do assert.are.same({ true, "healthy" }, { task:result() }) end
      local after = stats()
      -- the loop drove them (its socket callbacks ran), never over the connection cap
      assert.is_true(after.wakeups > before.wakeups)
      assert.is_true(after.watched_most >= 1 and after.watched_most <= 64,
        "most sockets watched at once: " .. after.watched_most)
      assert.are.equal(0, stats().watched)
    end)
  end)

  describe("against a misbehaving server", function()
    local srv
    setup(function() srv = badserver.start() end)
    teardown(function() if srv then badserver.stop(srv) end end)

    it("waits for a retry on a uv timer inside a task while the loop keeps ticking", function()
      local before = airlock.stats().retries
      local task = airlock.spawn(function()
        return #airlock.list_sessions({ base_url = srv.url, api_key = "503:1" })
      end)
      local tick = ticker(function() return task.status ~= "running" end)
      assert.is_true(run_loop(30))
      assert.are.same({ true, 0 }, { task:result() })
      assert.are.equal(before + 1, airlock.stats().retries)
      assert.is_true(tick.ticks >= 1)
    end)

    -- #timing: the number is reused only when libcurl closes the dropped connection before it
    -- opens the next one, which valgrind's slowdown changes (make valgrind-test leaves it out)
    it("keeps watching when libcurl reuses a socket's number before the loop saw it closed #timing", function()
      -- a kept-alive connection that the server drops when the next request arrives: libcurl
      -- closes it and retries on a new connection at once, which gets the same number
      local answers = {}
      local task = airlock.spawn(function()
        for round = 1, 5 do
          answers[#answers + 1] = #airlock.list_sessions({ base_url = srv.url, api_key = "ok" })
          answers[#answers + 1] = #airlock.list_sessions({ base_url = srv.url, api_key = "reset:1:" .. round })
        end
      end)
      assert.is_true(run_loop(60))
      assert.are.same({ true }, { task:result() })
      assert.are.same({ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, answers)
      local s = stats()
      assert.is_true(s.reused_fds >= 1, "no socket number was reused: " .. s.reused_fds)
      assert.are.equal(0, s.fallback_fds)
      assert.are.equal(0, s.watched)
    end)

    it("keeps the loop's watchers in step when the curl transport drives the same core", function()
      local task = airlock.spawn(function() return #airlock.list_sessions({ base_url = srv.url, api_key = "ok" }) end)
      -- blocking calls over the curl transport: libcurl drops and reopens connections in them
      for round = 1, 3 do
        local curl_opts = { base_url = srv.url, api_key = "reset:1:curl" .. round, transport = "curl" }
        assert.are.equal(0, #airlock.list_sessions(curl_opts))
      end
      assert.is_true(run_loop(30))
      assert.are.same({ true, 0 }, { task:result() })
      local s = stats()
      assert.are.equal(0, s.watched)
      assert.are.equal(0, s.fallback_fds)
    end)

    it("checks a socket the loop refuses to watch every 10 ms instead, and says so", function()
      assert.is_true(uvt.uninstall())
      -- a loop on which every poll handle fails, as when something else holds the descriptor
      local refusing = setmetatable({ new_socket_poll = function() return nil, "EEXIST: file already exists" end },
        { __index = luv })
      local said = {}
      uvt.install(refusing, { on_error = function(message) said[#said + 1] = message end })
      -- (an answer 200 ms late: libcurl must wait on the socket, however slow this process is)
      local task = airlock.spawn(function()
        return #airlock.list_sessions({ base_url = srv.url, api_key = "delay:200" })
      end)
      assert.is_true(run_loop(30))
      assert.are.same({ true, 0 }, { task:result() })
      local s = stats()
      assert.is_true(s.fallback_fds >= 1)
      assert.are.equal(0, s.watched)
      assert.matches("^airlock.transport.uv: cannot watch socket %d+ %(EEXIST: file already exists%); "
        .. "checking it every 10 ms$", said[1])
      assert.is_true(uvt.uninstall())
      uvt.install(luv)
    end)

    it("uninstall refuses while tasks wait on the loop", function()
      local task = airlock.spawn(function()
        local stalled = { base_url = srv.url, api_key = "stall", timeout = 1, max_retries = 0 }
        return airlock.pcall(airlock.list_sessions, stalled)
      end)
      assert.is_false(uvt.uninstall())
      assert.is_true(run_loop(30))
      local ok, call_ok, err = task:result()
      assert.is_true(ok)
      assert.is_false(call_ok)
      assert.is_true(airlock.is(err, "APIConnectionError"))
    end)
  end)

  it("install says what is wrong with its argument, and refuses a second loop", function()
    assert.has_error(function() uvt.install(nil) end,
      "airlock.transport.uv.install: a libuv loop module expected (vim.loop or require \"luv\"), got nil")
    assert.has_error(function() uvt.install({}) end,
      "airlock.transport.uv.install: the loop has no new_socket_poll/new_timer (not luv?)")
    assert.has_error(function() uvt.install(luv, { defer = 1 }) end,
      "airlock.transport.uv.install: option 'defer' must be a function")
    local other = { new_socket_poll = luv.new_socket_poll, new_timer = luv.new_timer }
    assert.has_error(function() uvt.install(other) end,
      "airlock.transport.uv.install: already installed on another loop")
    assert.are.equal(luv, uvt.loop())
  end)
end)
