-- The SDK never loses a session: a session leaves the SDK only once its DELETE succeeded (or
-- answered 404). A DELETE that fails (429 or 503 after its retries, forced by the misbehaving
-- server spec/support/badserver.py, key delfail:N:S) keeps the session in the queue of
-- sessions to delete, and a later call, poll, drain or the host loop deletes it, with backoff
-- and a bounded number of tries; close returns nil, err and airlock.with the function's own
-- results or error, never the cleanup's. In blocking code, in tasks (curl transport) and on
-- a libuv loop. On airlockd, the DELETE of a tenant's own session is never refused by its
-- request rate. Sessions are counted on the server, waiting on conditions with deadlines.
local airlock = require "airlock"
local dropped = require "airlock.dropped_sessions"
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local proc = require "support.proc"

local ok_uv, luv = pcall(require, "luv")

describe("a session whose DELETE fails", function()
  local srv
  setup(function() srv = badserver.start() end)
  teardown(function()
    if srv then badserver.stop(srv) end
    assert.are.equal(0, dropped.count() + dropped.in_flight())
  end)

  -- Options for key (see badserver.py): one try per call, so the DELETE fails at once.
  local function opts(key)
    return { api_key = key, base_url = srv.url, max_retries = 0 }
  end

  local function sessions(key) return badserver.sessions(srv, key) end
  after_each(function() dropped.clock = os.time end) -- (a test that stopped it failed midway)

  -- Makes SDK calls (on a healthy key) until key has no session left on the server, for at
  -- most `seconds`: each call first sends the queued DELETEs that are due.
  local function calls_until_deleted(key, seconds)
    return proc.wait_until(seconds or 15, function()
      airlock.attach("sbx_000000000000", opts("ok:calls")):health()
      return sessions(key) == 0
    end, 0.2)
  end

  it("close() returns nil, err and keeps it queued; a later call deletes it after a backoff", function()
    local key = "delfail:1:429:close"
    local before = airlock.stats()
    local sbx = airlock.sandbox(opts(key))
    local id = sbx.session_id
    -- the queue's clock stands still until the backoff is checked: with os.time's whole
    -- seconds (or a slow machine) the 1 s backoff could otherwise end between two lines
    local now = os.time()
    dropped.clock = function() return now end
    local ok, err = sbx:close()
    assert.is_nil(ok)
    assert.is_true(airlock.is(err, "RateLimitError"), tostring(err))
    assert.is_true(err.queued)
    assert.are.equal(id, err.session_id)
    assert.is_nil(sbx.session_id)
    assert.are.equal(1, sessions(key))
    assert.are.equal(1, dropped.count())
    local after = airlock.stats()
    assert.are.equal(before.cleanup_failures + 1, after.cleanup_failures)
    assert.are.equal(1, after.dropped_waiting)
    -- a second close sends nothing; the next call does not resend before the backoff
    assert.is_true(sbx:close())
    airlock.attach("sbx_000000000000", opts("ok:calls")):health()
    assert.are.equal(1, badserver.deletes(srv, key))
    dropped.clock = os.time -- the backoff runs from here
    assert.is_true(calls_until_deleted(key), "the queued session was never deleted")
    assert.are.equal(2, badserver.deletes(srv, key))
    assert.are.equal(0, dropped.count())
    assert.are.equal(before.dropped_deleted + 1, airlock.stats().dropped_deleted)
  end)

  it("airlock.with returns the function's results; drain deletes the session", function()
    local key = "delfail:1:503:with"
    local a, b = airlock.with(opts(key), function(sbx) return sbx.session_id, "second" end)
    assert.matches("^sbx_", a)
    assert.are.equal("second", b)
    assert.are.equal(1, sessions(key))
    assert.are.equal(1, airlock.drain())
    assert.are.equal(0, sessions(key))
    assert.are.equal(0, dropped.count())
  end)

  it("airlock.with re-raises the function's error, not the cleanup's", function()
    local key = "delfail:1:429:witherr"
    local ok, err = pcall(airlock.with, opts(key), function() error("the work failed", 0) end)
    assert.is_false(ok)
    assert.are.equal("the work failed", err)
    assert.are.equal(1, sessions(key))
    assert.are.equal(1, airlock.drain())
    assert.are.equal(0, sessions(key))
  end)

  it("a handle dropped unclosed whose DELETE fails stays queued until one succeeds", function()
    local key = "delfail:1:429:gc"
    do airlock.sandbox(opts(key)) end
    collectgarbage()
    collectgarbage()
    assert.are.equal(1, dropped.count())
    -- its DELETE (one try: the queue's backoff is the retry): 429
    airlock.attach("sbx_000000000000", opts("ok:calls")):health()
    assert.are.equal(1, badserver.deletes(srv, key))
    assert.are.equal(1, sessions(key))
    assert.are.equal(1, dropped.count())
    assert.is_true(calls_until_deleted(key))
  end)

  it("gives a session up after MAX_ATTEMPTS failed DELETEs (left to the server's idle TTL)", function()
    local key = "delfail:100:503:bounded"
    local saved = dropped.MAX_ATTEMPTS
    dropped.MAX_ATTEMPTS = 3
    local ok, err = pcall(function()
      local before = airlock.stats().dropped_given_up
      local sbx = airlock.sandbox(opts(key))
      assert.is_nil((sbx:close()))                   -- try 1
      assert.are.equal(0, airlock.drain())           -- try 2
      assert.are.equal(1, dropped.count())
      assert.are.equal(0, airlock.drain())           -- try 3: given up
      assert.are.equal(0, dropped.count())
      assert.are.equal(before + 1, airlock.stats().dropped_given_up)
      assert.are.equal(3, badserver.deletes(srv, key))
      assert.are.equal(0, airlock.drain())           -- nothing more is sent
      assert.are.equal(3, badserver.deletes(srv, key))
    end)
    dropped.MAX_ATTEMPTS = saved
    assert(ok, err)
  end)

  it("a DELETE cut short (its caller never came back) is sent again once its lease runs out", function()
    local key = "ok:lease"
    local sbx = airlock.sandbox(opts(key))
    -- what close does before its DELETE; the DELETE then never reports (a killed request)
    dropped.hold(sbx.session_id, sbx._settings)
    sbx._guard:disarm()
    assert.are.equal(1, dropped.in_flight())
    assert.are.equal(0, airlock.drain())             -- in flight: not sent twice
    local clock = dropped.clock
    dropped.clock = function() return clock() + dropped.LEASE_SECONDS + 1 end
    local ok, err = pcall(function()
      assert.are.equal(1, airlock.drain())
      assert.are.equal(0, sessions(key))
    end)
    dropped.clock = clock
    assert(ok, err)
  end)

  it("in tasks: poll sends the due DELETEs in the background until the session is gone", function()
    local key = "delfail:1:429:tasks"
    local task = airlock.spawn(function()
      return airlock.with(opts(key), function(sbx) return sbx.session_id end)
    end)
    local gone = proc.wait_until(20, function()
      airlock.poll(50)
      return task.status ~= "running" and sessions(key) == 0
    end, 0.05)
    assert.is_true(gone, "task " .. task.status .. ", sessions " .. sessions(key))
    local done, id = task:result()
    assert.is_true(done, tostring(id))
    assert.matches("^sbx_", id)
    assert.are.equal(2, badserver.deletes(srv, key))
    while airlock.poll(10) > 0 or dropped.in_flight() > 0 do end
  end)

  describe("on a libuv loop", function()
    if not ok_uv then
      it("needs luv", function() error("luv is not installed (scripts/install-deps.sh installs lua-luv)") end)
      return
    end
    local uvt = require "airlock.transport.uv"
    before_each(function() uvt.install(luv) end)
    after_each(function()
      assert.is_true(uvt.uninstall())
      luv.run("nowait")
    end)

    it("the loop deletes the session when its DELETE is due again, with no SDK call", function()
      local key = "delfail:1:429:uv"
      local task = airlock.spawn(function()
        return airlock.with(opts(key), function(sbx) return sbx.session_id end)
      end)
      -- the host's own timer keeps the loop running and looks at the server now and then
      local gone, ticks = false, 0
      local timer = luv.new_timer()
      luv.update_time()
      timer:start(100, 100, function()
        ticks = ticks + 1
        gone = task.status ~= "running" and sessions(key) == 0
        if gone or ticks >= 200 then timer:close() end
      end)
      luv.run()
      assert.is_true(gone, "the session was not deleted by the loop (" .. ticks .. " ticks)")
      assert.is_true((task:result()))
      assert.are.equal(2, badserver.deletes(srv, key))
      assert.are.equal(0, dropped.count() + dropped.in_flight())
    end)
  end)
end)

describe("airlockd and the request rate", function()
  local server, key
  setup(function()
    server = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":3}}' }, lean = true })
    key = server.tenants.acme
  end)
  teardown(function() if server then airlockd.stop(server) end end)

  -- A raw request (lua-socket): status.
  local function status(method, path)
    local http = require "socket.http"
    local _, code = http.request({ url = server.url .. path, method = method, headers = { ["X-API-Key"] = key } })
    return code
  end

  it("never refuses the DELETE of the tenant's own session; other requests get their 429", function()
    local opts = { api_key = key, base_url = server.url, max_retries = 0 }
    local a = airlock.sandbox(opts)                  -- token 1
    local b = airlock.sandbox(opts)                  -- token 2
    assert.are.equal(200, status("GET", "/v1/usage"))   -- token 3: none left
    assert.are.equal(429, status("GET", "/v1/usage"))
    assert.are.equal(429, status("DELETE", "/v1/sessions/sbx_000000000000"))  -- not its own
    assert.are.equal(200, status("DELETE", "/v1/sessions/" .. a.session_id))
    a._guard:disarm()
    -- gone now, so no longer exempt
    assert.are.equal(429, status("DELETE", "/v1/sessions/" .. a.session_id))
    assert.is_true(b:close())
    assert.are.equal(0, dropped.count() + dropped.in_flight())
    assert.are.equal(429, status("GET", "/v1/sessions"))
  end)
end)
