-- The queue of sessions the SDK still has to delete. A session leaves the SDK's hands only
-- once its DELETE succeeded (or answered 404): until then it is here. It comes in when
--   * a handle that owns its session is garbage-collected unclosed: its guard's finalizer
--     appends it (no I/O, nothing that can fail; a table of its own, so a collection in the
--     middle of the queue's work never changes what that work walks over);
--   * a close() is about to send its DELETE (hold: in flight, a lease), or a host ends a
--     request with sessions open;
-- and a DELETE that fails puts it back with a later due time (1, 2, 4 ... s, at most
-- MAX_BACKOFF), until MAX_ATTEMPTS failed DELETEs (about 8.5 minutes; then the server's idle
-- TTL reaps it, counted as given_up). A DELETE whose caller never comes back (an nginx request killed in
-- the middle of it) does not lose the session: its lease runs out and it is due again.
-- The next SDK call, poll or drain sends the due DELETEs (exchange.lua); a host may also be
-- woken to do it (set_waker). Pure Lua: __gc on a table (5.2+) or a newproxy (5.1, LuaJIT).
local M = {}

M.MAX_QUEUED = 10000   -- beyond this, sessions are left to the server's idle TTL (overflow)
M.MAX_ATTEMPTS = 10    -- failed DELETEs of one session before it is left to the idle TTL
M.MAX_BACKOFF = 300    -- seconds: the longest wait between two DELETEs of one session
M.LEASE_SECONDS = 60   -- a DELETE in flight that never reports back is due again after this

-- Seconds (a host with a better clock sets its own: OpenResty's ngx.now).
M.clock = os.time

local queue = {}        -- items {id, settings, attempts, due, lease}; lease: in flight until
local incoming = {}     -- appended by finalizers only; moved into queue before any walk
local counters = { overflow = 0, failed = 0, given_up = 0, deleted = 0 }
local waker             -- a host's: waker(seconds) asks for a delete_dropped that much later
local tracker           -- a host's: creating(settings), opened(state), closed(state), holding(item)
local next_check = 0    -- no item of queue is due or out of its lease before this time

local function size()
  return #queue + #incoming
end

-- Moves what finalizers appended into the queue (swapped first: a finalizer running
-- meanwhile appends to the new table).
local function settle()
  if #incoming == 0 then return end
  local batch = incoming
  incoming = {}
  for i = 1, #batch do queue[#queue + 1] = batch[i] end
end

local function new_item(id, settings)
  return { id = id, settings = settings, attempts = 0, due = 0 }
end

-- dropped_sessions.enqueue(id, settings) → item | nil (queue full): a session to delete at
-- the next chance. Safe inside a finalizer.
function M.enqueue(id, settings)
  if size() >= M.MAX_QUEUED then
    counters.overflow = counters.overflow + 1
    return nil
  end
  local item = new_item(id, settings)
  incoming[#incoming + 1] = item
  return item
end

-- dropped_sessions.hold(id, settings) → item: a session whose DELETE the caller sends now
-- (in flight: leased). Report how it went with done(item) or failed(item). Never refused:
-- a full queue still takes the session the caller is deleting.
function M.hold(id, settings)
  settle()
  local item = new_item(id, settings)
  item.lease = M.clock() + M.LEASE_SECONDS
  queue[#queue + 1] = item
  next_check = math.min(next_check, item.lease)
  if tracker and tracker.holding then tracker.holding(item) end
  return item
end

-- The DELETE of a held item will never report (its caller was killed): due at once.
function M.release(item)
  if item.lease == nil then return end
  item.lease, item.due, next_check = nil, 0, 0
end

-- A due time far ahead of now means the clock went back: due at once.
local function due(item, now)
  return item.due <= now or item.due - now > 2 * M.MAX_BACKOFF
end

local function leased(item, now)
  return item.lease ~= nil and item.lease > now and item.lease - now <= 2 * M.LEASE_SECONDS
end

-- dropped_sessions.take([all]) → items whose DELETE is due (all: every one not in flight),
-- each leased to the caller, who reports with done / failed.
local NONE = setmetatable({}, { __newindex = function() error("read-only", 2) end })

function M.take(all)
  if not all and #incoming == 0 and #queue == 0 then return NONE end   -- every SDK call asks
  local now, taken = M.clock(), {}
  -- when nothing can be due yet, the queue is not walked
  local quiet = now < next_check and next_check - now <= 2 * (M.MAX_BACKOFF + M.LEASE_SECONDS)
  if not all and #incoming == 0 and quiet then return NONE end
  settle()
  local soonest = math.huge
  for i = 1, #queue do
    local item = queue[i]
    if not leased(item, now) and (all or due(item, now)) then
      item.lease = now + M.LEASE_SECONDS
      taken[#taken + 1] = item
    end
    soonest = math.min(soonest, leased(item, now) and item.lease or item.due)
  end
  next_check = soonest
  return taken
end

local function remove(item)
  for i = #queue, 1, -1 do
    if queue[i] == item then
      queue[i] = queue[#queue]
      queue[#queue] = nil
      return
    end
  end
end

-- The item's session is gone (deleted, or the server answered 404).
function M.done(item)
  remove(item)
  item.lease = nil
  counters.deleted = counters.deleted + 1
end

-- The item's DELETE failed: due again after a backoff, or left to the server's idle TTL
-- after MAX_ATTEMPTS. Returns true when it stays queued.
function M.failed(item)
  counters.failed = counters.failed + 1
  item.attempts = item.attempts + 1
  item.lease = nil
  if item.attempts >= M.MAX_ATTEMPTS then
    remove(item)
    counters.given_up = counters.given_up + 1
    return false
  end
  local wait = math.min(2 ^ (item.attempts - 1), M.MAX_BACKOFF)
  item.due = M.clock() + wait
  next_check = math.min(next_check, item.due)
  if waker then waker(wait) end
  return true
end

-- dropped_sessions.set_waker(fn): fn(seconds) is called when a failed DELETE is due again
-- that much later (a host with a loop schedules a delete_dropped then). nil: none (plain
-- programs: the next SDK call, poll or drain).
function M.set_waker(fn)
  waker = fn
end

local newproxy = rawget(_G, "newproxy")

-- An object whose collection calls on_collect (no arguments).
local function sentinel(on_collect)
  if newproxy then
    local p = newproxy(true)
    getmetatable(p).__gc = on_collect
    return p
  end
  return setmetatable({}, { __gc = on_collect })
end


-- dropped_sessions.set_tracker(t): t.opened(state) is called for every session a handle
-- starts owning, t.closed(state) when it is closed; state = {id =, settings =}, its id set to
-- nil once the session is closed or queued; t.creating(settings) (optional) before a
-- session is created, returning a function called (with the new state, or nil on failure)
-- once the create is over; t.holding(item) (optional) when a DELETE is about to be sent by
-- the code running now (hold). nil: no tracker.
function M.set_tracker(t)
  tracker = t
end

-- dropped_sessions.creating(settings) → finish(state | nil): tells the host a create starts
-- (OpenResty: the abort handler covers it); call finish once it is over.
local function nothing() end
function M.creating(settings)
  if tracker and tracker.creating then return tracker.creating(settings) or nothing end
  return nothing
end

-- dropped_sessions.guard(id, settings) → guard. Keep it in the handle; guard:disarm() when
-- the session is closed (or handed over) so that collecting the handle queues nothing.
function M.guard(id, settings)
  local state = { id = id, settings = settings }
  if tracker then tracker.opened(state) end
  return {
    state = state,
    sentinel = sentinel(function()
      if state.id then
        M.enqueue(state.id, state.settings)
        state.id = nil
      end
    end),
    disarm = function(self)
      self.state.id = nil
      if tracker then tracker.closed(self.state) end
    end,
  }
end

-- Seconds until the next queued session is due (or a DELETE in flight runs out of its
-- lease), 0 when one is due now, nil when the queue is empty: a host's waker, after a run,
-- asks when to run again.
function M.next_wait()
  settle()
  if #queue == 0 then return nil end
  local now, soonest = M.clock(), math.huge
  for i = 1, #queue do
    local item = queue[i]
    soonest = math.min(soonest, leased(item, now) and item.lease or (due(item, now) and now or item.due))
  end
  return math.max(soonest - now, 0)
end

-- Sessions waiting for their DELETE (not in flight).
function M.count()
  local now, n = M.clock(), #incoming
  for i = 1, #queue do
    if not leased(queue[i], now) then n = n + 1 end
  end
  return n
end

-- Sessions whose DELETE is in flight.
function M.in_flight()
  return size() - M.count()
end

-- Dropped sessions not queued because the queue was full.
function M.overflow()
  return counters.overflow
end

-- Counters: waiting, in_flight, deleted (DELETEs of queued sessions that succeeded or found
-- them gone), failed (DELETEs that failed), given_up (left to the idle TTL), overflow.
function M.stats()
  local waiting = M.count()
  return { waiting = waiting, in_flight = size() - waiting, deleted = counters.deleted,
           failed = counters.failed, given_up = counters.given_up, overflow = counters.overflow }
end

return M
