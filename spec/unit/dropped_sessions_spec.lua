-- The queue of sessions to delete (airlock.dropped_sessions) on its own, on a clock the spec
-- sets: what is due when, backoff after each failure, the bound on tries, leases of DELETEs in
-- flight, the waker, and a finalizer appending while the queue is walked.
local dropped = require "airlock.dropped_sessions"

describe("the queue of sessions to delete", function()
  local now, clock, woken
  local settings = { base_url = "http://127.0.0.1:9" }

  before_each(function()
    clock = dropped.clock
    now = 1000
    dropped.clock = function() return now end
    woken = {}
    dropped.set_waker(function(seconds) woken[#woken + 1] = seconds end)
  end)
  after_each(function()
    now = now + dropped.LEASE_SECONDS + 1           -- what a test left in flight too
    for _, item in ipairs(dropped.take(true)) do dropped.done(item) end
    dropped.clock = clock
    dropped.set_waker(nil)
    assert.are.equal(0, dropped.count() + dropped.in_flight())
  end)

  local function ids(items)
    local out = {}
    for i, item in ipairs(items) do out[i] = item.id end
    table.sort(out)
    return out
  end

  it("hands a session out once, then again only after a failure's backoff", function()
    dropped.enqueue("sbx_a", settings)
    assert.are.equal(1, dropped.count())
    local items = dropped.take()
    assert.are.same({ "sbx_a" }, ids(items))
    assert.are.same({}, ids(dropped.take()))        -- in flight: not handed out twice
    assert.are.same({ 0, 1 }, { dropped.count(), dropped.in_flight() })
    assert.is_true(dropped.failed(items[1]))
    assert.are.same({ 1 }, woken)                    -- due again in 1 s
    assert.are.same({}, ids(dropped.take()))
    assert.are.equal(1, dropped.next_wait())
    now = now + 1
    items = dropped.take()
    assert.are.same({ "sbx_a" }, ids(items))
    assert.is_true(dropped.failed(items[1]))
    assert.are.same({ 1, 2 }, woken)                 -- then 2 s, 4 s, ...
    items = dropped.take(true)                       -- drain: whatever the backoff
    assert.are.same({ "sbx_a" }, ids(items))
    dropped.done(items[1])
    assert.are.same({ 0, 0 }, { dropped.count(), dropped.in_flight() })
    assert.is_nil(dropped.next_wait())
  end)

  it("waits at most MAX_BACKOFF and gives up after MAX_ATTEMPTS failures", function()
    local before = dropped.stats().given_up
    dropped.enqueue("sbx_b", settings)
    for attempt = 1, dropped.MAX_ATTEMPTS do
      local items = dropped.take(true)
      assert.are.equal(1, #items, "attempt " .. attempt)
      assert.are.equal(attempt < dropped.MAX_ATTEMPTS, dropped.failed(items[1]))
    end
    assert.are.same({ 1, 2, 4, 8, 16, 32, 64, 128, 256 }, woken)   -- then MAX_BACKOFF (300 s)
    assert.are.equal(before + 1, dropped.stats().given_up)
    assert.are.same({}, ids(dropped.take(true)))
  end)

  it("hands a held session out again once its lease runs out (a DELETE that never reported)", function()
    local item = dropped.hold("sbx_c", settings)
    assert.are.same({ 0, 1 }, { dropped.count(), dropped.in_flight() })
    assert.are.same({}, ids(dropped.take(true)))
    now = now + dropped.LEASE_SECONDS
    assert.are.same({ "sbx_c" }, ids(dropped.take()))
    assert.is_true(item.lease > now)
    dropped.release(item)                            -- its caller is known to be gone
    assert.are.same({ "sbx_c" }, ids(dropped.take()))
    dropped.done(item)
  end)

  it("takes a due time far ahead as a clock that went back: due at once", function()
    dropped.enqueue("sbx_d", settings)
    assert.is_true(dropped.failed(dropped.take()[1]))
    now = now - 10 * dropped.MAX_BACKOFF
    assert.are.same({ "sbx_d" }, ids(dropped.take()))
  end)

  it("queues a collected guard's session, for the next take, beside sessions in flight", function()
    for i = 1, 50 do dropped.enqueue("sbx_w" .. i, settings) end
    local items = dropped.take()
    for i = 1, 5 do dropped.guard("sbx_gc" .. i, settings) end   -- dropped at once
    collectgarbage()
    collectgarbage()
    assert.are.equal(50, #items)
    assert.are.same({ 5, 50 }, { dropped.count(), dropped.in_flight() })
    local again = dropped.take()
    assert.are.same({ "sbx_gc1", "sbx_gc2", "sbx_gc3", "sbx_gc4", "sbx_gc5" }, ids(again))
    for _, item in ipairs(items) do dropped.done(item) end
    for _, item in ipairs(again) do dropped.done(item) end
  end)

  it("refuses to queue past MAX_QUEUED (counted), but a close's own DELETE is always held", function()
    local saved, before = dropped.MAX_QUEUED, dropped.overflow()
    dropped.MAX_QUEUED = 2
    local ok, err = pcall(function()
      assert.truthy(dropped.enqueue("sbx_1", settings))
      assert.truthy(dropped.enqueue("sbx_2", settings))
      assert.is_nil(dropped.enqueue("sbx_3", settings))
      assert.are.equal(before + 1, dropped.overflow())
      assert.truthy(dropped.hold("sbx_4", settings))
      assert.are.same({ 2, 1 }, { dropped.count(), dropped.in_flight() })
    end)
    dropped.MAX_QUEUED = saved
    assert(ok, err)
  end)
end)
