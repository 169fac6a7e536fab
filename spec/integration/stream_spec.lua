-- The SDK's streamed run (issue #11 item 1) and its output options (item 3), against a real
-- airlockd: sbx:run(cmd, { on_stdout, on_stderr }) calls back with each piece in order and
-- returns the same Result as a plain run; inside airlock.spawn tasks it yields (two streamed
-- commands advance together); on the libuv transport too and on the cosocket transport in nginx
-- (scripts/install-deps.sh installs luv and nginx: without them those tests fail); a stream
-- that drops raises APIConnectionError (support/badserver.py "cutstream"), a server without
-- the extension (its plain JSON answer) still gives the Result; output_limit_bytes and spill.
-- Runs on Lua 5.4, 5.1 and LuaJIT (make test runs spec/integration on each).
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local badserver = require "support.badserver"
local luv = require "luv"
local ngx_eval = require "support.hosts.nginx_eval"
local tasks = require "support.tasks"

-- Collects the callbacks' pieces in arrival order as "out:<text>" / "err:<text>".
local function recorder()
  local seen = {}
  return seen, {
    on_stdout = function(s) seen[#seen + 1] = "out:" .. s end,
    on_stderr = function(s) seen[#seen + 1] = "err:" .. s end,
  }
end

local function same_result(a, b)
  assert.are.equal(a.stdout, b.stdout)
  assert.are.equal(a.stderr, b.stderr)
  assert.are.equal(a.output, b.output)
  assert.are.equal(a.exit_code, b.exit_code)
  assert.are.equal(a.timed_out, b.timed_out)
  assert.are.same(a.warnings, b.warnings)
end

describe("sbx:run with on_stdout / on_stderr", function()
  local srv, sbx
  setup(function()
    srv = airlockd.start()
    sbx = airlock.sandbox({ base_url = srv.url, api_key = srv.tenants.acme })
  end)
  teardown(function()
    if sbx then sbx:close() end
    if srv then airlockd.stop(srv) end
  end)

  it("calls back with each piece in order and returns the plain run's Result", function()
    local command = "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 2"
    local seen, opts = recorder()
    local streamed = sbx:run(command, opts)
    assert.are.same({ "out:one\n", "err:two\n", "out:three\n" }, seen)
    local plain = sbx:run(command)
    same_result(plain, streamed)
    assert.are.equal(2, streamed.exit_code)
    assert.is_false(streamed.ok)
  end)

  it("calls back on the cosocket transport in nginx, in order, with the plain run's Result", function()
    local value = ngx_eval.sdk_eval(srv, [[
      local airlock = require "airlock"
      local seen = {}
      local command = "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 2"
      local sbx = airlock.sandbox()
      local r = sbx:run(command, {
        on_stdout = function(s) seen[#seen + 1] = "out:" .. s end,
        on_stderr = function(s) seen[#seen + 1] = "err:" .. s end,
      })
      local plain = sbx:run(command)
      sbx:close()
      return { seen = seen, output = r.output, plain_output = plain.output, exit_code = r.exit_code,
        transport = airlock.stats().transport }
    ]], 120)
    assert.are.equal("ngx", value.transport)
    assert.are.same({ "out:one\n", "err:two\n", "out:three\n" }, value.seen)
    assert.are.equal(value.plain_output, value.output)
    assert.are.equal(2, value.exit_code)
  end)

  it("delivers a large output whole and keeps the budget in the Result", function()
    local n, pieces = 0, 0
    local r = sbx:run("seq 1 300000", { on_stdout = function(s) n = n + #s; pieces = pieces + 1 end })
    assert.are.equal(1988895, n)
    assert.truthy(pieces >= 1)
    assert.truthy(r.stdout:find("TRUNCATED", 1, true))
    assert.truthy(r.warnings[1]:find("Output truncated", 1, true))
  end)

  it("streams two commands at once inside airlock.spawn tasks", function()
    local log = {}
    local function task(tag)
      return airlock.spawn(function()
        return sbx:run("for i in 1 2 3; do echo " .. tag .. "$i; sleep 0.5; done",
          { on_stdout = function(s) log[#log + 1] = s end })
      end)
    end
    local a, b = task("a"), task("b")
    local ra, rb = tasks.results(airlock, a, b)
    assert.are.equal("a1\na2\na3\n", ra.stdout)
    assert.are.equal("b1\nb2\nb3\n", rb.stdout)
    tasks.assert_interleaved(log, "b1", "a3") -- b's first line came before a's last
  end)

  it("spills the whole output to a workspace file and keeps output_limit_bytes", function()
    local r = sbx:run("seq 1 100000", { output_limit_bytes = 200, spill = true })
    assert.truthy(#r.stdout < 300)
    assert.truthy(r.stdout_file:find("^/workspace/%.airlock/"))
    assert.are.equal("588895\n", sbx:run("wc -c < " .. r.stdout_file).stdout)
  end)

  it("checks its options", function()
    assert.has_error(function() sbx:run("true", { on_stdout = "print" }) end)
    assert.has_error(function() sbx:run("true", { output_limit_bytes = 1 }) end)
    assert.has_error(function() sbx:run("true", { spill = "yes" }) end)
    assert.has_error(function() sbx:run("true", { on_stdot = print }) end)
  end)

  it("stops the command when a callback raises, and raises that error", function()
    local ok, err = pcall(sbx.run, sbx, "echo x; sleep 30", { on_stdout = function() error("enough", 0) end })
    assert.is_false(ok)
    assert.are.equal("enough", err)
    collectgarbage()
    assert.are.equal("ok\n", sbx:run("echo ok").stdout)
  end)

  describe("on the libuv transport", function()
    it("calls back inside a task on the loop and returns the Result", function()
      local uvt = require "airlock.transport.uv"
      uvt.install(luv, { default = false })
      local usbx = airlock.attach(sbx.session_id, { base_url = srv.url, api_key = srv.tenants.acme, transport = "uv" })
      local seen, opts = recorder()
      local res
      airlock.spawn(function() res = usbx:run("echo a; sleep 1; echo b >&2", opts) end)
      luv.run()
      assert.are.same({ "out:a\n", "err:b\n" }, seen)
      assert.are.equal(0, res.exit_code)
      assert.is_true(uvt.uninstall())
      luv.run("nowait")
    end)
  end)
end)

describe("a streamed run against other servers", function()
  local srv
  setup(function() srv = badserver.start() end)
  teardown(function() if srv then badserver.stop(srv) end end)

  it("raises APIConnectionError when the stream ends without its result", function()
    local sbx = airlock.attach("sbx_000000000001", { base_url = srv.url, api_key = "cutstream", max_retries = 0 })
    local seen, opts = recorder()
    local ok, err = pcall(sbx.run, sbx, "echo partial", opts)
    assert.is_false(ok)
    assert.is_true(require("airlock.errors").is(err, "APIConnectionError"), tostring(err))
    assert.are.same({ "out:partial\n" }, seen)
  end)

  it("returns the Result of a server that answers the plain JSON (no streaming)", function()
    local sbx = airlock.attach("sbx_000000000001", { base_url = srv.url, api_key = "ok" })
    local seen, opts = recorder()
    local r = sbx:run("echo hi", opts)
    assert.are.equal("ran echo hi\n", r.stdout)
    assert.are.same({}, seen)
  end)
end)
