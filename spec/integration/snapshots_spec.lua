-- The SDK's snapshots against a real airlockd (issue 26 items 3 and 6, files only):
-- sbx:snapshot{ name } keeps the workspace while the session goes on, airlock.sandbox{
-- from_snapshot } starts independent sessions from it (blocking and inside airlock.spawn tasks),
-- airlock.snapshots.list/get/delete, and bad input fails naming what was wrong.
local airlock = require "airlock"
local expect_error = require "support.expect_error"

describe("airlock SDK: snapshots", function()
  local airlockd = require "support.airlockd"
  local srv, opts

  setup(function()
    -- spares on (the default): a session from a snapshot never takes one (its disk would be empty)
    srv = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "32" } })
    opts = { api_key = srv.tenants.acme, base_url = srv.url }
  end)

  teardown(function()
    if srv then airlockd.stop(srv) end
  end)

  local function with(extra)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    for k, v in pairs(extra) do o[k] = v end
    return o
  end

  it("snapshots a session, forks two independent ones in tasks, lists and deletes", function()
    local sbx = airlock.sandbox(opts)
    finally(function() sbx:close() end)
    assert.are.equal(0, sbx:run("echo base > state.txt").exit_code)
    local id, rec = sbx:snapshot{ name = "before-refactor" }
    assert.truthy(id:match("^snap_%x+$"), id)
    assert.are.same({ id, "before-refactor", false, sbx.session_id, 32 },
      { rec.snapshot_id, rec.name, rec.memory, rec.session_id, rec.disk_mb })
    assert.are.equal(0, sbx:run("echo changed > state.txt").exit_code)

    -- two forks at once, each in a task, each writing its own change
    local tasks = {}
    for i = 1, 2 do
      tasks[i] = airlock.spawn(function()
        local fork = airlock.sandbox(with({ from_snapshot = id }))
        local before = fork:run("cat state.txt").stdout
        fork:run("echo fork" .. i .. " >> state.txt")
        local after = fork:run("cat state.txt").stdout
        fork:close()
        return before, after, fork.template
      end)
    end
    while airlock.poll(50) > 0 do end
    for i = 1, 2 do
      local ok, before, after, template = tasks[i]:result()
      assert.is_true(ok, tostring(before))
      assert.are.equal("base\n", before)
      assert.are.equal("base\nfork" .. i .. "\n", after)
      assert.are.equal("sandbox-base:latest", template)
    end
    assert.are.equal("changed\n", sbx:run("cat state.txt").stdout)

    local list = airlock.snapshots.list(opts)
    assert.are.equal(1, #list)
    assert.are.same(rec, list[1])
    assert.are.same(rec, airlock.snapshots.get(id, opts))
    assert.is_true(airlock.snapshots.delete(id, opts))
    assert.are.same({}, airlock.snapshots.list(opts))
    expect_error("NotFoundError", airlock.snapshots.get, id, opts)
    local err = expect_error("SandboxError", airlock.sandbox, with({ from_snapshot = id }))
    assert.are.equal(404, err.status)
  end)

  it("fails naming what was wrong", function()
    expect_error("ValidationError", airlock.sandbox, with({ from_snapshot = 5 }))
    expect_error("ValidationError", airlock.snapshots.list, { bogus = 1 })
    expect_error("ValidationError", airlock.snapshots.get, "", opts)
    airlock.with(opts, function(sbx)
      expect_error("ValidationError", sbx.snapshot, sbx, { label = "x" })
      local err = expect_error("ValidationError", sbx.snapshot, sbx, { name = "no/slash" })
      assert.are.equal(422, err.status)
      assert.truthy(tostring(err.message):find("name", 1, true), tostring(err.message))
      local id = sbx:snapshot()
      err = expect_error("ValidationError", airlock.sandbox,
        with({ from_snapshot = id, template = "python:3.11-slim" }))
      assert.truthy(tostring(err.message):find("template", 1, true), tostring(err.message))
      airlock.snapshots.delete(id, opts)
    end)
  end)
end)
