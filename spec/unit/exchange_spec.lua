-- exchange.lua on a scripted transport (no network): the one retry policy applied between
-- tries (the transport only sleeps), failures that are never retried, and the client-side
-- line for commands against a fake server that has fewer places than the host has commands.
local engine = require "airlock.internal.engine"
local exchange = require "airlock.internal.exchange"
local exec_gate = require "airlock.internal.exec_gate"
local tasks = require "airlock.tasks"
local fake = require "support.fake_transport"

local answer = fake.answer
local FULL = '{"detail":"Too many commands running at once: 4 allowed. Wait for one to finish."}'

local function settings(t, extra)
  local o = { base_url = "http://fake." .. tostring(t):gsub("[^%w]", ""), api_key = "key-1234",
    transport = t }
  for k, v in pairs(extra or {}) do o[k] = v end
  return engine.settings(o)
end

-- A transport answering from a list, one entry per try: a status, or "conn"/"tls" failures.
local function scripted(list)
  local i = 0
  return fake.new(function()
    i = i + 1
    local item = list[i]
    if item == "conn" then return nil, { message = "reset", sent = true, tls = false } end
    if item == "tls" then return nil, { message = "certificate problem", sent = false, tls = true } end
    if type(item) == "table" then return answer(item[1], item[2], item[3]) end
    return answer(item, '{"detail":"x"}')
  end)
end

describe("exchange: the retry policy between tries", function()
  it("503, 503, then 200: two sleeps of 1 and 2 s, done by the transport", function()
    local t = scripted({ 503, 503, 200 })
    local ok = exchange.call(settings(t), "POST", "/v1/sessions", { { "template", "x" } })
    assert.is_true(ok)
    assert.are.equal(3, #t.sent)
    assert.are.same({ 1, 2 }, t.slept)
  end)

  it("429 with Retry-After: 0 is retried at once; over 30 s it is not", function()
    local t = scripted({ { 429, '{"detail":"r"}', { ["retry-after"] = "0" } }, 200 })
    assert.is_true((exchange.call(settings(t), "GET", "/v1/usage")))
    assert.are.same({ 0 }, t.slept)
    t = scripted({ { 429, '{"detail":"r"}', { ["retry-after"] = "31" } } })
    local ok, err = exchange.call(settings(t), "GET", "/v1/usage")
    assert.is_false(ok)
    assert.are.equal(31, err.retry_after)
    assert.are.same({}, t.slept)
  end)

  it("a connection failure: GET retried, POST never sent twice", function()
    local t = scripted({ "conn", 200 })
    assert.is_true((exchange.call(settings(t), "GET", "/v1/usage")))
    assert.are.equal(2, #t.sent)
    t = scripted({ "conn", 200 })
    local ok, err = exchange.call(settings(t), "POST", "/v1/sessions", {})
    assert.is_false(ok)
    assert.are.equal("APIConnectionError", err.name)
    assert.are.equal(1, #t.sent)
  end)

  it("a TLS failure is never retried, even for GET", function()
    local t = scripted({ "tls", 200 })
    local ok, err = exchange.call(settings(t), "GET", "/v1/usage")
    assert.is_false(ok)
    assert.is_truthy(err.message:find("certificate problem", 1, true))
    assert.are.equal(1, #t.sent)
  end)

  it("max_retries bounds the tries", function()
    local t = scripted({ 503, 503, 503, 503, 503 })
    local ok, err = exchange.call(settings(t, { max_retries = 2 }), "GET", "/v1/usage")
    assert.is_false(ok)
    assert.are.equal("CapacityError", err.name)
    assert.are.equal(3, #t.sent)
  end)

  it("reads the server's concurrency limit from X-Airlock-Exec-Limit first, else the text", function()
    local header = { ["x-airlock-exec-limit"] = "3" }
    assert.are.equal(3, engine.concurrency_limit(answer(429, '{"detail":"Busy: try later"}', header)))
    assert.are.equal(3, engine.concurrency_limit(answer(429, FULL, header)))   -- the header wins
    assert.is_nil(engine.concurrency_limit(answer(429, FULL, { ["x-airlock-exec-limit"] = "many" })))
    local with_retry_after = { ["x-airlock-exec-limit"] = "3", ["retry-after"] = "1" }
    assert.is_nil(engine.concurrency_limit(answer(429, FULL, with_retry_after)))
  end)

  it("reads it from the text of a server that sends only the text", function()
    assert.are.equal(4, engine.concurrency_limit(answer(429, FULL)))
    assert.is_nil(engine.concurrency_limit(answer(429, FULL, { ["retry-after"] = "3" })))
    assert.is_nil(engine.concurrency_limit(answer(429, '{"detail":"Session limit reached"}')))
    assert.is_nil(engine.concurrency_limit(answer(503, FULL)))
  end)
end)

-- A fake server with `slots` places for commands: a command takes a place for a few
-- scheduler rounds; with no place left it answers 429 "Too many commands running at once"
-- (or, with refusal given, that answer: another wording with the header, say).
local function busy_server(slots, refusal)
  local state = { running = 0, peak = 0, refused = 0, ran = 0 }
  state.transport = fake.new(function(request, _, wait)
    if not request.url:find("/exec", 1, true) then return answer(200, "{}") end
    if state.running >= slots then
      state.refused = state.refused + 1
      if refusal then return refusal() end
      return answer(429, FULL)
    end
    state.running = state.running + 1
    state.peak = math.max(state.peak, state.running)
    wait()
    state.running = state.running - 1
    state.ran = state.ran + 1
    return answer(200, '{"stdout":"ok","exit_code":0}')
  end, 3)
  return state
end

local function run_commands(n, s)
  local sched = tasks.new_scheduler("commands")
  local list = {}
  for i = 1, n do
    list[i] = sched:spawn(function()
      local ok, data = exchange.call(s, "POST", "/v1/sessions/sbx_1/exec",
        { { "command", "echo " .. i } }, { command = true })
      assert(ok, tostring(data))
      return data.stdout
    end)
  end
  local rounds = 0
  while sched:poll(0) > 0 do
    rounds = rounds + 1
    assert(rounds < 10000, "the commands never finished")
  end
  return list
end

describe("exchange: the client-side line for commands", function()
  it("75 commands against 4 places all succeed; the limit is learned from the first refusals", function()
    local server = busy_server(4)
    local s = settings(server.transport, { max_retries = 0 })   -- no retry could save a failure
    local before = exec_gate.stats()
    local list = run_commands(75, s)
    for _, task in ipairs(list) do assert.are.same({ true, "ok" }, { task:result() }) end
    assert.are.equal(75, server.ran)
    assert.are.equal(4, server.peak)
    -- only the first burst is refused: 71 of the 75 went out before the limit was known
    assert.is_true(server.refused <= 71, "refused " .. server.refused)
    local after = exec_gate.stats()
    assert.are.equal(0, after.running)
    assert.are.equal(0, after.waiting)
    assert.is_true(after.queued > before.queued)
  end)

  it("learns the limit from the header when the text says something else", function()
    local server = busy_server(4, function()
      return answer(429, '{"detail":"The sandbox is busy."}', { ["x-airlock-exec-limit"] = "4" })
    end)
    local s = settings(server.transport, { max_retries = 0 })
    local list = run_commands(40, s)
    for _, task in ipairs(list) do assert.are.same({ true, "ok" }, { task:result() }) end
    assert.are.equal(40, server.ran)
    assert.are.equal(4, server.peak)
  end)

  it("with max_concurrent_exec the server never refuses", function()
    local server = busy_server(4)
    local s = settings(server.transport, { max_retries = 0, max_concurrent_exec = 4 })
    run_commands(40, s)
    assert.are.equal(40, server.ran)
    assert.are.equal(0, server.refused)
  end)

  it("a lower option caps the line below the server's places", function()
    local server = busy_server(4)
    local s = settings(server.transport, { max_retries = 0, max_concurrent_exec = 2 })
    run_commands(20, s)
    assert.are.equal(20, server.ran)
    assert.are.equal(2, server.peak)
  end)

  it("a blocking command never waits in line (the policy's backoff handles a full server)", function()
    local t = scripted({ { 429, FULL }, { 200, '{"stdout":"x"}' } })
    local ok, data = exchange.call(settings(t), "POST", "/v1/sessions/sbx_1/exec", {}, { command = true })
    assert.is_true(ok)
    assert.are.equal("x", data.stdout)
    assert.are.same({ 1 }, t.slept)
  end)
end)

describe("transport choice", function()
  local transports = require "airlock.transport"

  it("is libcurl by default, a host's default when set, and the option when given", function()
    assert.are.equal("curl", transports.auto().name)
    local mine = fake.new(function() return answer(200, '{"status":"healthy"}') end)
    transports.set_default(mine)
    finally(function() transports.set_default(nil) end)
    assert.are.equal(mine, transports.auto())
    assert.are.equal(mine, transports.resolve(nil))
    assert.are.equal("curl", transports.resolve("curl").name)
    local ok = exchange.call(engine.settings({ base_url = "http://x", api_key = "kkkk" }), "GET", "/healthz")
    assert.is_true(ok)
    assert.are.equal(1, #mine.sent)
  end)

  it("names a missing transport clearly", function()
    local ok, err = pcall(transports.resolve, "carrier_pigeon")
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("transport 'carrier_pigeon' is not available", 1, true))
    assert.has_error(function() engine.settings({ base_url = "http://x", api_key = "k", transport = 42 }) end)
  end)
end)
