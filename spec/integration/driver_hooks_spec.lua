-- The C core driven by a host loop instead of step(): the loop learns which sockets to watch
-- from core.socket_events(), when to act on timeouts from core.timeout(), and tells the core
-- with core.action(fd, events) / core.action(). Requests to a real airlockd finish this way,
-- and the removals of closed sockets are reported. The same runs (luv is a test dependency)
-- on a real libuv loop: poll handles and one timer, nothing polling.
local core = require "airlock.core"
local airlockd = require "support.airlockd"

local function clock() return require("socket").gettime() end

describe("the driver's host-loop hooks", function()
  local srv
  setup(function() srv = airlockd.start() end)
  teardown(function() if srv then airlockd.stop(srv) end end)

  it("a plain host loop drives requests to completion and sees sockets come and go", function()
    assert.is_true(core.close_connections())
    core.socket_events()                                  -- from here on the host watches
    local watched, seen, removed = {}, {}, {}
    local function sync()
      for _, e in ipairs(core.socket_events()) do
        assert.are.equal(math.floor(e.fd), e.fd)
        if e.events == "remove" then
          watched[e.fd] = nil
          removed[e.fd] = true
        else
          watched[e.fd] = e.events
          seen[e.fd] = e.events
        end
      end
    end
    local reqs = {}
    for i = 1, 3 do reqs[i] = core.request({ method = "GET", url = srv.url .. "/healthz" }) end
    sync()
    local t = clock()
    local function all_done()
      for _, r in ipairs(reqs) do if not r:done() then return false end end
      return true
    end
    while not all_done() do
      -- a real host waits for readiness; acting on a socket that is not ready is harmless
      local timeout = core.timeout()
      if timeout and timeout == 0 then core.action() end
      for fd, events in pairs(watched) do core.action(fd, events) end
      sync()
      require("socket").sleep(0.002)
      assert.is_true(clock() - t < 10, "the host loop did not finish the requests")
    end
    for _, r in ipairs(reqs) do
      local res = r:result()
      assert.are.equal(200, res.status, tostring(res.error))
      assert.are.equal("application/json", (res.headers["content-type"] or ""):match("^[^;]+"))
    end
    assert.is_truthy(next(seen), "no socket was ever reported")
    assert.is_true(core.close_connections())
    sync()
    for fd in pairs(seen) do assert.is_true(removed[fd], "no removal reported for fd " .. fd) end
    assert.is_nil(next(watched))
  end)

  local uv = require "luv"   -- loaded with the file, as the other specs that use it do
  it("on a libuv loop: poll handles and a timer, no polling", function()
    local handles = {}
    local timer = uv.new_timer()
    local wakeups = 0
    local function sync()
      for _, e in ipairs(core.socket_events()) do
        local h = handles[e.fd]
        if h and (e.fresh or e.events == "remove") then
          h:stop()
          h:close()
          handles[e.fd], h = nil, nil
        end
        if e.events ~= "remove" then
          if not h then
            h = uv.new_socket_poll(e.fd)
            handles[e.fd] = h
          end
          local fd = e.fd
          local mode = e.events == "inout" and "rw" or (e.events == "in" and "r" or "w")
          h:start(mode, function(err, ev)
            wakeups = wakeups + 1
            core.action(fd, err and "err" or (ev == "rw" and "inout" or (ev == "r" and "in" or "out")))
            sync()
          end)
        end
      end
      local ms = core.timeout()
      timer:stop()
      if ms then
        timer:start(ms, 0, function()
          wakeups = wakeups + 1
          core.action()
          sync()
        end)
      end
    end
    local reqs = {}
    for i = 1, 3 do reqs[i] = core.request({ method = "GET", url = srv.url .. "/healthz" }) end
    sync()
    local guard = uv.new_timer()
    uv.update_time()   -- the loop's cached time is stale if it has not run for a while
    guard:start(10000, 0, function() uv.stop() end)
    local check = uv.new_check()
    check:start(function()
      for _, r in ipairs(reqs) do if not r:done() then return end end
      uv.stop()
    end)
    uv.run()
    check:close()
    guard:close()
    for _, r in ipairs(reqs) do
      assert.is_true(r:done(), "the libuv loop did not finish the requests")
      assert.are.equal(200, r:result().status)
    end
    assert.is_true(wakeups > 0)
    assert.is_true(core.close_connections())
    sync()
    timer:close()
    uv.run("nowait")
    assert.is_nil(next(handles))
  end)
end)
