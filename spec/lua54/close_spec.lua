-- Lua 5.4 only: to-be-closed sandboxes and kernels (the only file using <close>).
local airlock = require "airlock"
local airlockd = require "support.airlockd"

local function session_ids(opts)
  local ids = {}
  for _, s in ipairs((airlock.list_sessions(opts))) do ids[s.session_id] = true end
  return ids
end

describe("local sbx <close>", function()
  local srv, opts

  setup(function()
    srv = airlockd.start()
    opts = { api_key = srv.tenants.acme, base_url = srv.url }
  end)

  teardown(function()
    if srv then
      local ok, ids = pcall(session_ids, opts)
      airlockd.stop(srv)
      assert.is_true(ok, tostring(ids))
      assert.are.same({}, ids)
    end
  end)

  it("deletes the session at the end of the block", function()
    local id
    do
      local sbx <close> = airlock.sandbox(opts)
      id = sbx.session_id
      sbx.files:write("main.py", "print(2 ** 16)")
      assert.is_true(session_ids(opts)[id])
    end
    assert.is_nil(session_ids(opts)[id])
  end)

  it("deletes a kernel at the end of its block, and the session with the kernels it holds", function()
    local sbx <close> = airlock.sandbox(opts)
    do
      local k <close> = sbx:kernel{ language = "python" }
      assert.are.equal("42", k:run("x = 41\nx + 1").text)
      assert.are.equal(1, #sbx:kernels())
    end
    assert.are.same({}, sbx:kernels())
    local kept
    do
      local inner <close> = airlock.sandbox(opts)
      kept = inner:kernel()
      kept:run("1")
    end
    local ok, err = pcall(kept.run, kept, "1")
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "NotFoundError"), tostring(err))
  end)

  it("deletes the session when the body raises, and the error propagates", function()
    local id, handle
    local ok, err = pcall(function()
      local sbx <close> = airlock.sandbox(opts)
      id, handle = sbx.session_id, sbx
      error("body failed", 0)
    end)
    assert.is_false(ok)
    assert.are.equal("body failed", err)
    assert.is_nil(handle.session_id)
    assert.is_nil(session_ids(opts)[id])
  end)

  it("tolerates an explicit close inside the block", function()
    local id
    do
      local sbx <close> = airlock.sandbox(opts)
      id = sbx.session_id
      sbx:close()
    end
    assert.is_nil(session_ids(opts)[id])
  end)
end)
