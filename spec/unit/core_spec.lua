-- airlock.core without a server: argument checks, one attempt per request (no retries in C),
-- connection failures described (sent, tls), step() never blocking when told not to, the
-- host-loop hooks when idle, and the monotonic clock.
local core = require "airlock.core"

local function clock() return require("socket").gettime() end

describe("airlock.core", function()
  it("exposes the SDK's version", function()
    assert.are.equal(require("airlock.internal.engine").VERSION, core._VERSION)
    assert.is_nil(core.retry_wait)      -- the retry policy lives in Lua only
    assert.is_nil(core.session)         -- so does the dropped-session queue
  end)

  describe("request argument checks", function()
    local function bad(spec, pattern)
      local ok, err = pcall(core.request, spec)
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find(pattern, 1, true), tostring(err))
    end

    it("refuses bad specs before starting anything", function()
      local live = core.stats().live
      bad(nil, "table expected")
      bad({ url = "http://127.0.0.1:9/" }, "'method'")
      bad({ method = "get", url = "http://127.0.0.1:9/" }, "bad method")
      bad({ method = "GET" }, "'url'")
      bad({ method = "GET", url = "http://x/\0y" }, "bad url")
      bad({ method = "GET", url = "http://x/", timeout_ms = -1 }, "timeout_ms")
      bad({ method = "GET", url = "http://x/", timeout_ms = 1.5 }, "timeout_ms")
      bad({ method = "GET", url = "http://x/", headers = { "A: b\r\nC: d" } }, "header 1")
      bad({ method = "GET", url = "http://x/", headers = "A: b" }, "headers")
      bad({ method = "GET", url = "http://x/", verify = 1 }, "verify")
      bad({ method = "POST", url = "http://x/", body = {} }, "'body'")
      assert.are.equal(live, core.stats().live)
    end)
  end)

  describe("step", function()
    it("returns at once with nothing in flight, even with a long wait", function()
      local t = clock()
      local finished, live = core.step(60000)
      assert.are.equal(0, finished)
      assert.are.equal(0, live)
      assert.is_true(clock() - t < 30, "waited the minute asked") -- not a measure: it returns or it waits 60 s
    end)

    it("with idle_wait, sleeps the time asked when nothing is in flight", function()
      local t = clock()
      core.step(120, true)
      local took = clock() - t
      assert.is_true(took >= 0.1, "slept " .. took) -- at least the time asked (less a timer's grain)
    end)

    it("makes one attempt: a refused connection is an error, never retried, not sent", function()
      -- port 9 on loopback refuses
      local req = core.request({ method = "GET", url = "http://127.0.0.1:9/" })
      local t = clock()
      repeat core.step(200) until req:done() or clock() - t > 10
      assert.is_true(req:done())
      local res = req:result()
      assert.is_nil(res.status)
      assert.is_string(res.error)
      assert.is_false(res.sent)
      assert.is_false(res.tls)
      assert.are.equal(7, res.code)                       -- CURLE_COULDNT_CONNECT
    end)

    -- A loopback listener that never accepts: connections complete in the kernel's backlog
    -- and the request then waits for an answer that never comes.
    local function silent_listener()
      local server = assert(require("socket").bind("127.0.0.1", 0))
      local _, port = server:getsockname()
      return server, "http://127.0.0.1:" .. port .. "/"
    end

    it("step(0) does not block while a transfer waits for an answer", function()
      local server, url = silent_listener()
      finally(function() server:close() end)
      -- a step(0) that waited for the answer would return only at the 2 s timeout, done
      local req = core.request({ method = "GET", url = url, timeout_ms = 2000 })
      local t = clock()
      for _ = 1, 20 do core.step(0) end
      assert.is_false(req:done())
      repeat core.step(100) until req:done() or clock() - t > 10
      local res = req:result()
      assert.is_nil(res.status)
      assert.are.equal(28, res.code)                      -- CURLE_OPERATION_TIMEDOUT
      assert.is_true(res.sent)                            -- the request went out
    end)

    it("cancel() ends a request early", function()
      local server, url = silent_listener()
      finally(function() server:close() end)
      local req = core.request({ method = "GET", url = url, timeout_ms = 5000 })
      core.step(0)
      req:cancel()
      assert.is_true(req:done())
      assert.are.equal("request cancelled", req:result().error)
      assert.are.equal(0, select(2, core.step(0)))
      assert.are.equal("airlock.core.request (GET, done)", tostring(req))
    end)
  end)

  describe("perform (the blocking form of request + step + result)", function()
    it("checks its spec as request does, naming itself", function()
      local ok, err = pcall(core.perform, { method = "get", url = "http://127.0.0.1:9/" })
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find("airlock.core.perform: bad method", 1, true), tostring(err))
      ok, err = pcall(core.perform, { method = "GET" })
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find("'url'", 1, true), tostring(err))
    end)

    it("answers what request's result would, and counts the finished transfers", function()
      local req = core.request({ method = "GET", url = "http://127.0.0.1:9/" })
      repeat core.step(200) until req:done()
      for _ = 1, 3 do   -- the driver's request is reused: nothing of the last call stays
        local r, finished = core.perform({ method = "GET", url = "http://127.0.0.1:9/" })
        local want = req:result()
        want.error, r.error = want.error:gsub("after %d+ ms", ""), r.error:gsub("after %d+ ms", "")
        assert.are.same(want, r)
        assert.is_true(finished >= 1)
        assert.are.equal(0, core.stats().live)
      end
      local r = core.perform({ method = "POST", url = "http://127.0.0.1:9/", body = "{}" })
      assert.is_false(r.sent)
      assert.is_nil(r.status)
    end)
  end)

  describe("host-loop hooks", function()
    it("report no timer and no sockets when idle", function()
      core.step(0)
      assert.is_nil(core.timeout())
      local events = core.socket_events()
      for _, e in ipairs(events) do assert.are.equal("remove", e.events) end
      assert.are.same({}, core.socket_events())
      local finished, live = core.action()
      assert.are.equal(0, finished)
      assert.are.equal(0, live)
    end)

    it("check their arguments", function()
      assert.has_error(function() core.action(-1, "in") end)
      assert.has_error(function() core.action(3, "sideways") end)
    end)

    it("a new request asks for a timeout action at once", function()
      local req = core.request({ method = "GET", url = "http://127.0.0.1:9/" })
      assert.are.equal(0, core.timeout())
      req:cancel()
    end)
  end)

  it("now() is a monotonic clock in milliseconds", function()
    local a = core.now()
    core.step(20, true)
    local b = core.now()
    assert.is_true(b - a >= 15 and b - a < 2000, tostring(b - a))
  end)
end)
