-- SDK specs against a misbehaving loopback server (spec/support/badserver.py): the HTTP
-- failure paths airlockd cannot produce (429/503 storms, resets, stalls, truncated bodies,
-- garbage, odd error bodies). Each ends in the right outcome within a (generous) bound, and
-- leaves no connection open on the server and no session behind.
local airlock = require "airlock"
local core = require "airlock.core"
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local function clock() return require("socket").gettime() end

local badserver = require "support.badserver"
local expect_error = require "support.expect_error"
local proc = require "support.proc"

-- The server of the describe block running now: each block gets its own (use_own_server).
local srv

local function use_own_server()
  setup(function() srv = badserver.start() end)
  teardown(function()
    if srv then badserver.stop(srv) end
    srv = nil
  end)
end

-- SDK options for a call whose answers key chooses (see badserver.py), plus extra.
local function opts(key, extra)
  local o = { api_key = key, base_url = srv.url }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

describe("airlock SDK against a misbehaving server", function()
  use_own_server()

  it("sends the contract headers on every request and the create body with egress []", function()
    local key = "ok"
    local sbx = airlock.sandbox(opts(key, { base_url = srv.url .. "//" }))
    local last = badserver.last(srv, key)
    assert.are.equal("POST", last.method)
    assert.are.equal("/v1/sessions", last.path)
    assert.are.equal('{"template":"sandbox-base:latest","egress":[]}', last.body)
    sbx:usage()
    last = badserver.last(srv, key)
    assert.are.equal("GET", last.method)
    assert.are.equal("ok", last.headers["x-api-key"])
    assert.are.equal("application/json", last.headers["content-type"])
    assert.are.equal("application/json", last.headers["accept"])
    assert.are.equal("airlock-sandbox-lua/" .. airlock._VERSION, last.headers["user-agent"])
    sbx:close()
    assert.are.equal("DELETE", badserver.last(srv, key).method)
  end)

  it("form-encodes read paths, percent-encodes the audit cursor, sends import nulls", function()
    local key = "missing"
    local sbx = airlock.sandbox(opts(key))
    local err = expect_error("FileNotFoundError", sbx.files.read, sbx.files, "a b/c.txt")
    assert.are.equal("a b/c.txt", err.path)
    assert.are.equal("File not found: a b/c.txt", err.message)
    assert.are.equal("path=a+b%2Fc.txt", badserver.last(srv, key).query)
    sbx:audit({ limit = 1, before = "00000000001700000000#deadbeef" })
    assert.are.equal("limit=1&before=00000000001700000000%23deadbeef", badserver.last(srv, key).query)
    sbx:import_repo("octo/repo")
    local body = require("cjson").decode(badserver.last(srv, key).body)
    assert.are.equal("octo/repo", body.repo)
    assert.are.equal(require("cjson").null, body.ref)
    assert.are.equal(require("cjson").null, body.path)
    sbx:close()
  end)

  it("retries 429 with Retry-After: 0 until it succeeds", function()
    local key = "429:2:0"
    local sbx = airlock.sandbox(opts(key))
    assert.is_truthy(sbx.session_id:match("^sbx_%x+$"))
    assert.are.equal(3, badserver.count(srv, key))
    sbx:close()
  end)

  it("does not wait a Retry-After over 30 s: RateLimitError at once", function()
    local key = "429:1:3600"
    local t = clock()
    local err = expect_error("RateLimitError", airlock.sandbox, opts(key))
    assert.are.equal(3600, err.retry_after)
    assert.are.equal(429, err.status)
    assert.are.equal(1, badserver.count(srv, key))
    assert.is_true(clock() - t < 60, "waited for the Retry-After") -- not a measure: at once, or an hour
  end)

  it("max_retries = 0 raises RateLimitError with retry_after", function()
    local key = "429:1:60"
    local err = expect_error("RateLimitError", airlock.sandbox, opts(key, { max_retries = 0 }))
    assert.are.equal(60, err.retry_after)
    assert.are.equal(1, badserver.count(srv, key))
  end)

  it("retries a 429 without Retry-After with backoff", function()
    local key = "429:1:none"
    local sbx = airlock.sandbox(opts(key))
    assert.are.equal(2, badserver.count(srv, key))
    sbx:close()
  end)

  it("a full server: CapacityError after max_retries backoffs, also for POST", function()
    local key = "503:99"
    local err = expect_error("CapacityError", airlock.sandbox, opts(key, { max_retries = 2 }))
    assert.are.equal(503, err.status)
    assert.are.equal("All sandbox workspaces are in use; try again shortly.", err.message)
    assert.are.equal(3, badserver.count(srv, key))
  end)

  it("retries a dropped connection for GET", function()
    local key = "reset:1"
    local sbx = airlock.attach("sbx_0123456789ab", opts(key))
    local usage = sbx:usage()
    assert.are.equal("GET", usage.method)
    assert.are.equal(2, badserver.count(srv, key))
  end)

  it("never replays a POST after a dropped connection (not even libcurl's own replay)", function()
    -- a fresh connection that dies
    local key = "reset:5"
    local err = expect_error("APIConnectionError", airlock.sandbox, opts(key))
    assert.is_truthy(err.message:find("Could not reach " .. srv.url .. ": ", 1, true))
    assert.is_nil(err.status)
    assert.are.equal(1, badserver.count(srv, key))
    -- a reused keep-alive connection that dies: libcurl would resend the body by itself
    airlock.attach("sbx_0123456789ab", opts("ok:prime")):usage()
    key = "reset:6"
    local sbx = airlock.attach("sbx_0123456789ab", opts(key))
    err = expect_error("APIConnectionError", sbx.run, sbx, "echo once")
    assert.are.equal(1, badserver.count(srv, key))
    assert.is_truthy(err.message:find("may have run", 1, true), err.message)
  end)

  it("a stalled server ends in APIConnectionError within the timeout", function()
    local key = "stall"
    local t = clock()
    expect_error("APIConnectionError", airlock.sandbox, opts(key, { timeout = 1 }))
    -- not measures: ended by the 1 s timeout, never by the stall's own end at 30 s
    assert.is_true(clock() - t < 20)
    -- GET: retried once, each try bounded by the timeout
    t = clock()
    local sbx = airlock.attach("sbx_0123456789ab", opts(key, { timeout = 1, max_retries = 1 }))
    expect_error("APIConnectionError", sbx.usage, sbx)
    assert.is_true(clock() - t < 25)
    assert.are.equal(3, badserver.count(srv, key))
  end)

  it("garbage instead of HTTP is an APIConnectionError", function()
    expect_error("APIConnectionError", airlock.sandbox, opts("garbage", { max_retries = 0 }))
  end)

  it("maps error bodies: text 500, 422 list, no detail; 4xx/500 are not retried", function()
    local err = expect_error("SandboxError", airlock.sandbox, opts("text500"))
    assert.are.equal("SandboxError", err.name)
    assert.are.equal(500, err.status)
    assert.are.equal("Internal Server Error", err.message)
    assert.are.equal(1, badserver.count(srv, "text500"))
    err = expect_error("ValidationError", airlock.sandbox, opts("422list"))
    assert.are.equal("less_than_equal", err.detail[1].type)
    assert.is_truthy(err.message:find("less than or equal to 60", 1, true))
    err = expect_error("NotFoundError", airlock.sandbox, opts("nodetail:404"))
    assert.are.equal("Not Found", err.message)
    err = expect_error("AuthenticationError", airlock.sandbox, opts("status:401"))
    assert.are.equal(401, err.status)
    assert.are.equal(1, badserver.count(srv, "status:401"))
  end)

  it("an unreachable server is an APIConnectionError naming the base URL", function()
    local err = expect_error("APIConnectionError", airlock.sandbox,
      { api_key = "k", base_url = "http://127.0.0.1:9" })
    assert.is_truthy(err.message:find("Could not reach http://127.0.0.1:9: ", 1, true))
  end)

  it("close{timeout=} uses no retries; a failed DELETE is returned, not raised, and stays queued", function()
    local key = "503:98"
    local sbx = airlock.attach("sbx_0123456789ab", opts(key))
    local ok, err = sbx:close({ timeout = 2 })
    assert.is_nil(ok)
    assert.are.equal(1, badserver.count(srv, key))
    assert.is_true(airlock.is(err, "CapacityError"), tostring(err))
    assert.is_true(err.queued)
    assert.is_nil(sbx.session_id)
    assert.is_true(sbx:close())   -- nothing left for the handle to delete: no request
    assert.are.equal(1, badserver.count(srv, key))
    -- the queue still has it: given up here (the server would answer 503 to the end)
    local dropped = require "airlock.dropped_sessions"
    for _, item in ipairs(dropped.take(true)) do dropped.done(item) end
  end)

  it("checks caller arguments before any request", function()
    local key = "ok:args"
    local sbx = airlock.attach("sbx_0123456789ab", opts(key))
    expect_error("ValidationError", sbx.run, sbx, "true", { timeout = 61 })
    expect_error("ValidationError", sbx.run, sbx, "true", { timeout = 2.5 })
    expect_error("ValidationError", sbx.run, sbx, 42)
    expect_error("ValidationError", sbx.files.write, sbx.files, "", "x")
    -- bytes go raw unless JSON text is asked for; a binary option must be a boolean
    expect_error("ValidationError", sbx.files.write, sbx.files, "a.bin", "\255\254", { binary = false })
    expect_error("ValidationError", sbx.files.write, sbx.files, "a.bin", "x", { binary = "yes" })
    expect_error("ValidationError", sbx.files.write, sbx.files, "a.txt", nil)
    expect_error("ValidationError", sbx.files.read, sbx.files, 7)
    expect_error("ValidationError", sbx.egress_log, sbx, { limit = "ten" })
    assert.are.equal(0, badserver.count(srv, key))
    local started = airlock.sandbox(opts(key, { start = false }))
    local err = expect_error("SandboxError", started.run, started, "true")
    assert.is_truthy(err.message:find("not started", 1, true))
    expect_error("SandboxError", started.files.read, started.files, "x")
    assert.are.equal(0, badserver.count(srv, key))
    assert.are.equal("<Sandbox not started tenant=None egress=[]>", tostring(started))
  end)

  it("reuses one connection for a sequence of calls (server-side count)", function()
    local key = "ok:keepalive"
    local before = core.stats().connects
    local sbx = airlock.sandbox(opts(key))
    for i = 1, 10 do sbx:run("echo " .. i) end
    sbx:close()
    assert.are.equal(12, badserver.count(srv, key))
    assert.are.equal(1, badserver.connections(srv, key))
    assert.is_true(core.stats().connects - before <= 1)
  end)
end)


-- Every failure path, one key each: the outcome, a no-hang bound, then what is left on the
-- server: connections still open (a failed connection must be closed; a healthy one may
-- stay in the keep-alive pool until close_connections) and sessions (must be none).
describe("failure paths leave nothing behind", function()
  use_own_server()

  -- connections the server still has open for key, after giving closes time to arrive
  local function open_after(key, want)
    local n
    for _ = 1, 40 do
      n = badserver.open(srv, key)
      if n <= want then break end
      proc.sleep(0.05)
    end
    return n
  end

  -- a failed exchange: the SDK closed that connection itself
  local function nothing_left(key)
    assert.are.equal(0, open_after(key, 0), "connections left open for " .. key)
    assert.are.equal(0, badserver.sessions(srv, key), "sessions left for " .. key)
  end

  -- a successful exchange: at most the one pooled keep-alive connection, closed on request
  local function only_pooled(key)
    assert.is_true(open_after(key, 1) <= 1, "more than the pooled connection open for " .. key)
    assert.is_true(core.close_connections())
    nothing_left(key)
  end

  local function timed(bound, fn, ...)
    local t = clock()
    local r = { pcall(fn, ...) }
    assert.is_true(clock() - t < bound, string.format("took %.1f s (bound %d s)", clock() - t, bound))
    return unpack(r, 1, 2)
  end

  it("connection reset: GET retried to success, POST not replayed", function()
    local sbx = airlock.attach("sbx_0123456789ab", opts("reset:1"))
    local ok, usage = timed(10, sbx.usage, sbx)
    assert.is_true(ok, tostring(usage))
    assert.are.equal(2, badserver.count(srv, "reset:1"))
    only_pooled("reset:1")
    local err
    ok, err = timed(10, airlock.sandbox, opts("reset:7"))
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "APIConnectionError"), tostring(err))
    assert.are.equal(1, badserver.count(srv, "reset:7"))
    nothing_left("reset:7")
  end)

  it("a stall past the timeout: APIConnectionError, the connection closed", function()
    local ok, err = timed(10, airlock.sandbox, opts("stall", { timeout = 1 }))
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "APIConnectionError"), tostring(err))
    assert.is_truthy(err.message:lower():find("timeout", 1, true) or err.message:lower():find("timed out", 1, true),
      err.message)
    nothing_left("stall")
  end)

  it("a truncated body (Content-Length larger than sent): APIConnectionError", function()
    local ok, err = timed(10, airlock.sandbox, opts("truncated", { max_retries = 0 }))
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "APIConnectionError"), tostring(err))
    assert.are.equal(1, badserver.count(srv, "truncated"))
    nothing_left("truncated")
    -- a GET is retried, then gives up the same way
    local sbx = airlock.attach("sbx_0123456789ab", opts("truncated", { max_retries = 1 }))
    ok, err = timed(10, sbx.usage, sbx)
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "APIConnectionError"), tostring(err))
    assert.are.equal(3, badserver.count(srv, "truncated"))
    nothing_left("truncated")
  end)

  it("a garbage answer: APIConnectionError", function()
    local ok, err = timed(10, airlock.sandbox, opts("garbage", { max_retries = 0 }))
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "APIConnectionError"), tostring(err))
    nothing_left("garbage")
  end)

  it("a 429 storm with Retry-After: retried max_retries times, then RateLimitError", function()
    local ok, err = timed(10, airlock.sandbox, opts("429:99:0"))
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "RateLimitError"), tostring(err))
    assert.are.equal(0, err.retry_after)
    assert.are.equal(4, badserver.count(srv, "429:99:0"))
    only_pooled("429:99:0")
  end)

  it("a 429 storm without Retry-After: backoff, then RateLimitError without retry_after", function()
    local ok, err = timed(15, airlock.sandbox, opts("429:99:none", { max_retries = 2 }))
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "RateLimitError"), tostring(err))
    assert.is_nil(err.retry_after)
    assert.are.equal(429, err.status)
    assert.are.equal(3, badserver.count(srv, "429:99:none"))
    only_pooled("429:99:none")
  end)

  it("503 then success: the session is created once and deleted", function()
    local ok, sbx = timed(10, airlock.sandbox, opts("503:1"))
    assert.is_true(ok, tostring(sbx))
    assert.are.equal(1, badserver.sessions(srv, "503:1"))
    sbx:close()
    assert.are.equal(3, badserver.count(srv, "503:1"))
    only_pooled("503:1")
  end)

  it("a plain-text 500: SandboxError with the status text, not retried", function()
    local ok, err = timed(10, airlock.sandbox, opts("text500"))
    assert.is_false(ok)
    assert.are.equal("SandboxError", err.name)
    assert.are.equal(500, err.status)
    assert.are.equal("Internal Server Error", err.message)
    assert.are.equal(1, badserver.count(srv, "text500"))
    only_pooled("text500")
  end)

  it("close_connections refuses while a request is in flight", function()
    local engine = airlock.engine
    local settings = engine.settings(opts("stall", { timeout = 2 }))
    local req = core.request(engine.build(settings, "POST", "/v1/sessions", {}, { max_retries = 0 }))
    core.step(0)
    assert.is_false(core.close_connections())
    req:cancel()
    assert.is_true(core.close_connections())
    nothing_left("stall")
  end)
end)
