-- airlock.templates against a real airlockd (issue #24): local checks before any request, then a
-- small template (GNU hello) built and waited for with its progress, from a plain call and from
-- inside an airlock.spawn task, listed, used by airlock.sandbox{ template = ... }, and deleted;
-- the server's errors as the SDK's classes. The build is waited on by t:wait (bounded).
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local expect_error = require "support.expect_error"

describe("airlock.templates", function()
  local server, opts

  setup(function()
    server = airlockd.start()
    opts = { base_url = server.url, api_key = server.tenants.acme }
  end)

  teardown(function()
    if server then airlockd.stop(server) end
  end)

  local function with(extra)
    local t = {}
    for k, v in pairs(opts) do t[k] = v end
    for k, v in pairs(extra) do t[k] = v end
    return t
  end

  it("checks its arguments before any request", function()
    expect_error("ValidationError", airlock.templates.build, with({ name = "x", packages = { "hello" }, bogus = 1 }))
    expect_error("ValidationError", airlock.templates.build, with({ packages = { "hello" } }))
    expect_error("ValidationError", airlock.templates.build, with({ name = "x", packages = "hello" }))
    local err = expect_error("ValidationError", airlock.templates.build,
      with({ name = "x", packages = { "hello" }, recommends = "no" }))
    assert.truthy(tostring(err.message):find("recommends", 1, true), tostring(err.message))
    expect_error("ValidationError", airlock.templates.get, "", opts)
  end)

  it("answers the server's 422 naming the field", function()
    local err = expect_error("ValidationError", airlock.templates.build, with({ name = "x", packages = { "--foo" } }))
    assert.are.equal(422, err.status)
    assert.truthy(tostring(err.message):find("packages", 1, true), tostring(err.message))
  end)

  -- #build: its time is airlockd's real build, the same whoever calls; scripts/test.sh runs it
  -- on Lua 5.4 only (LuaJIT runs the other tests here, and the SDK's tasks elsewhere)
  it("builds a template inside a task, reports progress, and runs a sandbox on it #build", function()
    local seen, last = 0, nil
    local task = airlock.spawn(function()
      local t = airlock.templates.build(with({ name = "hello", packages = { "hello" }, recommends = true }))
      assert.are.equal("building", t.status)
      assert.are.equal(true, t.recommends)
      return t:wait{ on_progress = function(p) seen = seen + 1; last = p end, timeout = 900 }
    end)
    while airlock.poll(50) > 0 do end
    local ok, t = task:result()
    assert.is_true(ok, tostring(t))
    assert.are.equal("ready", t.status, t.log_tail)
    assert.truthy(seen >= 2)
    assert.are.equal("ready", last.phase)
    assert.are.equal(100, last.percent)

    local again = airlock.templates.build(with({ name = "hello", packages = { "hello" }, recommends = true }))
    assert.are.equal(t.id, again.id)
    -- without what hello recommends (nothing): another recipe, so a conflict on the same name
    assert.are.equal(409, expect_error("SandboxError", airlock.templates.build,
      with({ name = "hello", packages = { "hello" } })).status)
    assert.are.equal("ready", again.status)

    local names = {}
    for _, x in ipairs(airlock.templates.list(opts)) do names[#names + 1] = x.name end
    assert.are.same({ "hello" }, names)
    assert.are.equal(t.id, airlock.templates.get("hello", opts).id)

    airlock.with(with({ template = "hello" }), function(sbx)
      assert.are.equal("Hello, world!\n", sbx:run("hello").stdout)
      -- in use: the server refuses the DELETE
      local err = expect_error("SandboxError", airlock.templates.delete, "hello", opts)
      assert.are.equal(409, err.status)
    end)
    assert.is_true(airlock.templates.delete("hello", opts))
    expect_error("NotFoundError", airlock.templates.get, "hello", opts)
  end)

  it("raises the server's answers for unknown and unusable templates", function()
    local err = expect_error("SandboxError", airlock.sandbox, with({ template = "nope" }))
    assert.are.equal(404, err.status)
  end)
end)
