-- luacheck: max line length 160
-- sbx:pause(), sbx:resume(), sbx.state and airlock.sandbox{ on_idle = "pause" } (issue #26, an
-- airlockd extension) through the SDK against a real airlockd, blocking and inside tasks; a
-- handle made with airlock.attach(id) (a new process's way back to a paused session) resumes
-- it. The same calls on the uv and ngx transports are a case of spec/support/parity.lua.
-- Runs on Lua 5.4 and LuaJIT.
local airlock = require "airlock"
local sdk_server = require "support.sdk_server"
local expect_error = require "support.expect_error"

describe("pause and resume through the SDK", function()
  local sdk = sdk_server.new({ env = { SANDBOX_WARM_NEW = "0" } })
  local with = sdk.with
  setup(sdk.start)
  teardown(sdk.stop)

  it("pauses, shows the state, and a handle attached by id resumes it with its files", function()
    local sbx = airlock.sandbox(with({ on_idle = "pause" }))
    finally(function() sbx:close() end)
    assert.are.equal("active", sbx.state)
    assert.are.equal("pause", sbx:info().on_idle)
    sbx.files:write("notes.txt", "kept while paused")
    local p = sbx:pause()
    assert.are.same({ "paused", 0 }, { p.state, p.image_bytes })
    assert.are.equal("paused", sbx.state)
    assert.are.equal("paused", sbx:info().state)
    assert.are.equal("paused", sbx:pause().state) -- again: the same answer
    local listed
    for _, s in ipairs((airlock.list_sessions(sdk.opts))) do
      if s.session_id == sbx.session_id then listed = s end
    end
    assert.are.same({ "paused", "pause", "number" }, { listed.state, listed.on_idle, type(listed.paused_at) })

    -- another handle (as a new process would make) on the same session
    local again = airlock.attach(sbx.session_id, sdk.opts)
    assert.are.equal("paused", again:info().state)
    assert.are.equal("paused", again.state)
    local r = again:resume()
    assert.are.same({ "active", true }, { r.state, r.resumed })
    assert.are.equal("active", again.state)
    assert.are.equal("kept while paused", again:run("cat notes.txt").stdout)
    assert.are.equal(false, again:resume().resumed)

    -- a command on a paused session resumes it; the handle's state follows
    sbx:pause()
    assert.are.equal("kept while paused", sbx:run("cat notes.txt").stdout)
    assert.are.equal("active", sbx.state)
    assert.are.equal("active", sbx:info().state)
    sbx:pause()
    assert.are.equal("kept while paused", sbx.files:read("notes.txt")) -- so does a file call
    assert.are.equal("active", sbx.state)
  end)

  it("works inside tasks, two sessions at once", function()
    local tasks = {}
    for i = 1, 2 do
      tasks[i] = airlock.spawn(function()
        return airlock.with(sdk.opts, function(sbx)
          sbx.files:write("n.txt", tostring(i))
          local paused = sbx:pause().state
          local resumed = sbx:resume().resumed
          return paused, resumed, sbx:run("cat n.txt").stdout
        end)
      end)
    end
    local rounds = 0
    while airlock.poll(50) > 0 and rounds < 2400 do rounds = rounds + 1 end
    for i = 1, 2 do
      local ok, paused, resumed, content = tasks[i]:result()
      assert.is_true(ok, tostring(paused))
      assert.are.same({ "paused", true, tostring(i) }, { paused, resumed, content })
    end
  end)

  it("refuses a bad on_idle before any request, and pause before start", function()
    local err = expect_error("ValidationError", airlock.sandbox, with({ on_idle = "sleep" }))
    assert.truthy(tostring(err):find("on_idle", 1, true), tostring(err))
    assert.is_nil(err.status)
    local unstarted = airlock.sandbox(with({ start = false }))
    expect_error("SandboxError", function() return unstarted:pause() end)
    expect_error("NotFoundError", function() return airlock.attach("sbx_000000000000", sdk.opts):resume() end)
  end)
end)
