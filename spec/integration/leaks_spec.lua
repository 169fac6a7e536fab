-- Leak-proof sessions: 100 sandboxes driven through every exit path a program can take, then
-- the tenant's sessions are listed on airlockd: none may remain. (The Lua 5.4 <close> paths
-- are in spec/lua54/leaks_close_spec.lua.)
local airlock = require "airlock"
local core = require "airlock.core"
local dropped = require "airlock.dropped_sessions"
local airlockd = require "support.airlockd"
require "support.eventually"

local function clock() return require("socket").gettime() end

local LIMITS = '{"*":{"max_sessions":200,"requests_per_minute":100000}}'

local function remaining(opts)
  return #(airlock.list_sessions(opts))
end

describe("no session outlives its handle", function()
  local srv, expiring, opts, short_opts
  local created = 0

  setup(function()
    srv = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = LIMITS }, lean = true }) -- (no command runs here)
    opts = { api_key = srv.tenants.acme, base_url = srv.url }
    -- sessions of this one expire after 2 s idle
    expiring = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_SESSION_TTL = "2" }, lean = true })
    short_opts = { api_key = expiring.tenants.acme, base_url = expiring.url }
  end)

  teardown(function()
    local left, left_expiring
    if srv then
      local ok, n = pcall(remaining, opts)
      left = ok and n or tostring(n)
      airlockd.stop(srv)
    end
    if expiring then
      local ok, n = pcall(remaining, short_opts)
      left_expiring = ok and n or tostring(n)
      airlockd.stop(expiring)
    end
    assert.are.equal(100, created)
    assert.are.equal(0, left)
    assert.are.equal(0, left_expiring)
    assert.are.equal(0, dropped.count())
  end)

  it("airlock.with, normal end (20)", function()
    for i = 1, 20 do
      local id = airlock.with(opts, function(sbx)
        if i % 5 == 0 then sbx.files:write("n.txt", tostring(i)) end
        return sbx.session_id
      end)
      created = created + 1
      assert.is_truthy(id:match("^sbx_"))
    end
    assert.are.equal(0, remaining(opts))
  end)

  it("airlock.with, error inside the scope (20), including an SDK error", function()
    for i = 1, 20 do
      local ok, err = pcall(airlock.with, opts, function(sbx)
        created = created + 1
        if i % 2 == 0 then
          sbx.files:read("../../etc/passwd")       -- PermissionDeniedError from the server
        end
        error("scope failed " .. i, 0)
      end)
      assert.is_false(ok)
      if i % 2 == 0 then
        assert.is_true(airlock.is(err, "PermissionDeniedError"), tostring(err))
      else
        assert.are.equal("scope failed " .. i, err)
      end
    end
    assert.are.equal(0, remaining(opts))
  end)

  -- A sandbox dropped at once. (A function of its own: no register of the caller's frame
  -- keeps the handle alive when the caller collects garbage.)
  local function drop_one()
    airlock.sandbox(opts)
    created = created + 1
  end

  -- n sandboxes dropped at once and garbage-collected: each one's session is queued for its
  -- DELETE, or already deleted: a collection that ran while the loop made the next sandboxes
  -- (how often depends on the collector's pace, so on what else is loaded) had those creates
  -- delete the sessions dropped before them, as every SDK call does first.
  local function drop_and_collect(n)
    local before = dropped.stats()
    for _ = 1, n do drop_one() end
    collectgarbage()
    collectgarbage()
    local now = dropped.stats()
    assert.are.equal(0, now.failed - before.failed)
    assert.are.equal(n, now.waiting + now.in_flight - before.waiting - before.in_flight + now.deleted - before.deleted)
  end

  it("explicit close, twice (20)", function()
    for _ = 1, 20 do
      local sbx = airlock.sandbox(opts)
      created = created + 1
      sbx:close()
      sbx:close()
      assert.is_nil(sbx.session_id)
    end
    assert.are.equal(0, remaining(opts))
  end)

  it("handles dropped and garbage-collected, drained by the next SDK call (10)", function()
    drop_and_collect(10)
    -- the next call deletes them first, so it already sees none
    assert.are.equal(0, remaining(opts))
    assert.are.equal(0, dropped.count())
  end)

  it("handles dropped and garbage-collected, drained by poll (10)", function()
    drop_and_collect(10)
    local t = clock()
    airlock.poll(0)                       -- sends the DELETEs without blocking
    assert.are.equal(0, dropped.count())
    while core.stats().live > 0 do
      airlock.poll(50)
      assert.is_true(clock() - t < 30, "the DELETEs did not finish")
    end
    assert.are.equal(0, remaining(opts))
  end)

  it("attach + close (10), and a GC'd attach handle leaves the owner in charge", function()
    for _ = 1, 10 do
      local owner = airlock.sandbox(opts)
      created = created + 1
      do local _ = airlock.attach(owner.session_id, opts) end
      collectgarbage()
      assert.are.equal(0, dropped.count())
      local other = airlock.attach(owner.session_id, opts)
      other:close()
      owner:close()     -- already deleted through the attached handle: a silent 404
    end
    assert.are.equal(0, remaining(opts))
  end)

  it("close after the server expired the session (10), explicit and dropped", function()
    local handles = {}
    for i = 1, 10 do
      handles[i] = airlock.sandbox(short_opts)
      created = created + 1
      -- each was made (on a loaded machine the first may expire before the tenth is made,
      -- so the ten are not counted together)
      assert.is_truthy(handles[i].session_id:match("^sbx_"))
    end
    assert.eventually(function()
      local n = remaining(short_opts)
      return n == 0, n .. " sessions still listed"
    end, { timeout = 30, step = 0.5, what = "the server expires its sessions" })
    for i = 1, 5 do
      handles[i]:close()              -- silent: the 404 means it is gone already
      assert.is_nil(handles[i].session_id)
    end
    for i = 6, 10 do handles[i] = nil end
    collectgarbage()
    collectgarbage()
    assert.are.equal(5, dropped.count())
    assert.are.equal(0, airlock.drain() == 5 and dropped.count() or -1)
    assert.are.equal(0, remaining(short_opts))
  end)
end)
