-- The queue of dropped sessions. A sandbox handle that owns its session holds a guard; when
-- the handle is garbage-collected unclosed, the guard's finalizer only appends the session
-- id (with the settings to delete it with) to this queue: no I/O, nothing that can fail.
-- The next SDK call, poll or drain takes the queue and sends the DELETEs (exchange.lua).
-- Pure Lua: __gc on a table (5.2+) or on a newproxy userdata (5.1, LuaJIT).
local M = {}

M.MAX_QUEUED = 10000   -- beyond this, dropped sessions are left to the server's idle TTL

local queue, overflow = {}, 0

local function enqueue(id, settings)
  if #queue >= M.MAX_QUEUED then
    overflow = overflow + 1
    return
  end
  queue[#queue + 1] = { id = id, settings = settings }
end

-- dropped_sessions.enqueue(id, settings): queues a session to delete (a host that could
-- not delete it itself).
M.enqueue = enqueue

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

local tracker   -- a host's: opened(state) / closed(state) (OpenResty: sessions per request)

-- dropped_sessions.set_tracker(t): t.opened(state) is called for every session a handle
-- starts owning, t.closed(state) when it is closed; state = {id =, settings =}, its id set to
-- nil once the session is closed or queued. nil: no tracker.
function M.set_tracker(t)
  tracker = t
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
        enqueue(state.id, state.settings)
        state.id = nil
      end
    end),
    disarm = function(self)
      self.state.id = nil
      if tracker then tracker.closed(self.state) end
    end,
  }
end

-- The queued sessions ({id =, settings =} each), the queue emptied.
function M.take()
  local taken = queue
  queue = {}
  return taken
end

-- Sessions waiting in the queue.
function M.count()
  return #queue
end

-- Dropped sessions not queued because the queue was full.
function M.overflow()
  return overflow
end

return M
