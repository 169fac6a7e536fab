-- airlock.ngx: the SDK's OpenResty host. Every nginx request (and every ngx.timer run) gets a
-- scope, kept in ngx.ctx: its own scheduler (airlock.spawn/poll there touch only its tasks)
-- and the sessions its code opened and has not closed yet. When the request ends those are
-- deleted:
--   * a client abort with `lua_check_client_abort on`: an ngx.on_abort callback (registered
--     when the request starts creating its first session, so it covers that create) waits
--     for the creates still in flight, deletes the request's sessions and ends it (499);
--   * any end (error, ngx.exit, abort): `log_by_lua_block { require("airlock.ngx").finish() }`
--     hands them to a timer that deletes them;
--   * a graceful stop or reload of the worker: a pending timer of the SDK runs early
--     ("premature") and deletes the sessions of requests that are over at once, those of
--     requests still running after EXIT_GRACE_SECONDS (a fast stop, SIGTERM, runs nothing:
--     the server's idle TTL reaps those);
--   * a handle dropped unclosed, or a DELETE that failed: the queue of sessions to delete
--     (airlock.dropped_sessions), which that same timer also empties every minute; a failed
--     DELETE also starts a timer for when it is due again (with ngx.now as the queue's clock).
-- The transport (airlock.transport.ngx) installs this host when it loads.
local dropped = require "airlock.dropped_sessions"
local exec_gate = require "airlock.exec_gate"
local scheduler = require "airlock.ngx.scheduler"
local tasks = require "airlock.tasks"

local M = {}

M.SWEEP_SECONDS = 60        -- how often the worker's timer deletes the collector's queue
M.EXIT_GRACE_SECONDS = 5    -- at worker exit: how long running requests may still close theirs
M.ABORT_STATUS = 499        -- nginx's "client closed request"
M.CREATE_WAIT_SECONDS = 100 -- at an abort: how long creates still in flight are waited for

local CTX_KEY = "airlock"

-- Every session open in this worker (weak keys: a collected handle's state goes away), and
-- the scope each belongs to (weak values: a request that is over no longer holds its scope,
-- so after a collection the scope is gone).
local open_sessions = setmetatable({}, { __mode = "k" })
local scope_of = setmetatable({}, { __mode = "kv" })
local counters = { scopes = 0, cleanups = 0, deleted = 0, aborts = 0, creating = 0 }
local sweeper_started = false

local function phase()
  return ngx.get_phase()
end

local function cosocket_phase()
  return require("airlock.transport").COSOCKET_PHASES[phase()] == true
end

-- Phases of a request handler: where ngx.on_abort may be registered.
local HANDLER_PHASES = { server_rewrite = true, rewrite = true, access = true, content = true }

-- The scope of the request or timer running now (created on first use), or nil outside
-- the phases where cosockets work.
function M.scope(create)
  if not cosocket_phase() then return nil end
  local ctx = ngx.ctx
  local scope = ctx[CTX_KEY]
  if scope == nil and create ~= false then
    counters.scopes = counters.scopes + 1
    scope = { scheduler = scheduler.new(phase()), sessions = {}, creating = 0,
              held = setmetatable({}, { __mode = "k" }) }
    ctx[CTX_KEY] = scope
  end
  return scope
end

-- The scope's open sessions as DELETE items, each taken (disarmed) so nothing deletes twice.
local function take_sessions(scope)
  local items = {}
  for state in pairs(scope.sessions) do
    if state.id then
      items[#items + 1] = { id = state.id, settings = state.settings }
      state.id = nil
    end
    open_sessions[state] = nil
  end
  scope.sessions = {}
  return items
end

-- Ends a scope's work: its waits give up, its places in the command line go back, and its
-- open sessions are returned for deleting.
local function end_scope(scope)
  scope.scheduler:cancel()
  exec_gate.release_owner(scope.scheduler)
  return take_sessions(scope)
end

local function delete_now(items)
  if #items == 0 then return 0 end
  counters.deleted = counters.deleted + #items
  return require("airlock.exchange").delete_sessions(items, true)
end

-- dropped_sessions' waker: a failed DELETE is due again in `seconds`; one timer at a time,
-- the earliest asked for (the worker's sweep is the backstop when none can be had).
local retry_at
local function wake_queue(seconds)
  local at = ngx.now() + seconds
  if retry_at and retry_at <= at then return end
  local ok = ngx.timer.at(seconds, function()
    retry_at = nil
    require("airlock.exchange").delete_dropped(true)
    local wait = dropped.next_wait()
    if wait then wake_queue(math.max(wait, 0.1)) end
  end)
  if ok then retry_at = at end
end

-- Waits (at most CREATE_WAIT_SECONDS) until the scope's creates in flight are over: a session
-- the server made for a client that has left is then known, and deleted with the others.
local function wait_for_creates(scope)
  local deadline = ngx.now() + M.CREATE_WAIT_SECONDS
  while scope.creating > 0 and ngx.now() < deadline do
    scope.created = scope.created or require("ngx.semaphore").new()
    scope.created:wait(math.max(deadline - ngx.now(), 0.001))
  end
end

-- airlock.ngx.abort() → n: deletes now the sessions the current request opened and did not
-- close (after its creates in flight are over), and gives its places in the command line
-- back. Call it from your own ngx.on_abort callback (the SDK registers its own only when the
-- request has none).
function M.abort()
  local scope = M.scope(false)
  if not scope then return 0 end
  counters.aborts = counters.aborts + 1
  scope.aborted, scope.abort_waiting = true, true
  wait_for_creates(scope)
  scope.abort_waiting = false
  return delete_now(end_scope(scope))
end

-- Deletes items ({id =, settings =} each) from a timer (log_by_lua has no cosockets); when no
-- timer can be had (too many pending), the queue of sessions to delete and the worker's
-- sweep take them.
local function delete_later(items)
  local ok, err = ngx.timer.at(0, function() delete_now(items) end)
  if ok then return end
  for _, item in ipairs(items) do dropped.enqueue(item.id, item.settings) end
  ngx.log(ngx.WARN, "airlock: could not start the timer deleting ", #items, " sessions: ", err)
end

-- airlock.ngx.finish() → n: for log_by_lua*: the request is over; its sessions still open
-- are deleted by a timer (log_by_lua has no cosockets). Returns how many.
function M.finish()
  local scope = ngx.ctx[CTX_KEY]
  if not scope then return 0 end
  ngx.ctx[CTX_KEY] = nil
  -- creates and closes the request's end cut short never report: their sessions are due now
  counters.creating = counters.creating - scope.creating
  scope.creating = 0
  local cut = false
  for item in pairs(scope.held) do
    if item.lease then
      dropped.release(item)
      cut = true
    end
  end
  if cut then wake_queue(0) end
  local items = end_scope(scope)
  if #items == 0 then return 0 end
  counters.cleanups = counters.cleanups + 1
  delete_later(items)
  return #items
end

local function on_abort()
  local ok, err = pcall(M.abort)
  if not ok then ngx.log(ngx.ERR, "airlock: deleting the aborted request's sessions failed: ", tostring(err)) end
  ngx.exit(M.ABORT_STATUS)
end

local function count_open()
  local n = 0
  for state in pairs(open_sessions) do
    if state.id then n = n + 1 end
  end
  return n
end

-- The open sessions (those for which keep(state) says so) as DELETE items, taken.
local function take_open(keep)
  local items = {}
  for state in pairs(open_sessions) do
    if state.id and (keep == nil or keep(state)) then
      items[#items + 1] = { id = state.id, settings = state.settings }
      state.id = nil
    end
  end
  return items
end

-- A session whose request or timer is over (its scope was collected).
local function orphaned(state)
  return scope_of[state] == nil
end

-- The worker's timer: every SWEEP_SECONDS the collector's queue. At worker exit (a graceful
-- stop or reload runs it early, "premature"): at once the sessions of requests that are over,
-- and those of requests still running once they had EXIT_GRACE_SECONDS to close them.
local function sweep(premature)
  local exchange = require "airlock.exchange"
  if not premature then
    exchange.delete_dropped(true)
    return
  end
  local waited = 0
  while true do
    collectgarbage()   -- forget the scopes of requests that are over
    delete_now(take_open(orphaned))
    exchange.delete_dropped(true, true)   -- the last chance: whatever their backoff
    if count_open() == 0 or waited >= M.EXIT_GRACE_SECONDS then break end
    ngx.sleep(0.25)
    waited = waited + 0.25
  end
  delete_now(take_open())
end

local function start_sweeper()
  if sweeper_started then return end
  local ok, err = ngx.timer.every(M.SWEEP_SECONDS, sweep)
  if ok then
    sweeper_started = true
  else
    ngx.log(ngx.WARN, "airlock: could not start the worker's session timer: ", err)
  end
end

-- Registers the SDK's abort callback for the scope's request (once; handler phases only).
local function hook_abort(scope)
  if scope.abort_hooked or not HANDLER_PHASES[phase()] then return end
  scope.abort_hooked = true
  -- nil, "lua_check_client_abort is off" (then aborts are not noticed, the handler runs to
  -- its end and closes its sandboxes) or nil, "duplicate call" (the request has its own
  -- callback, which should call airlock.ngx.abort())
  ngx.on_abort(on_abort)
end

-- dropped_sessions' tracker: a session being created, opened, closed by the code running now.
local tracker = {}

function tracker.creating()
  local scope = M.scope()
  if not scope then return nil end
  hook_abort(scope)   -- before the create: a client leaving during it is noticed
  scope.creating = scope.creating + 1
  counters.creating = counters.creating + 1
  return function(state)
    scope.creating = scope.creating - 1
    counters.creating = counters.creating - 1
    if scope.created then scope.created:post(1) end
    -- the abort's deletes are done already (its wait ran out): this one goes at once
    if state and state.id and scope.aborted and not scope.abort_waiting then
      delete_later(take_sessions(scope))
    end
  end
end

function tracker.holding(item)
  local scope = M.scope(false)
  if scope then scope.held[item] = true end
end

function tracker.opened(state)
  open_sessions[state] = true
  start_sweeper()
  local scope = M.scope()
  if not scope then return end
  scope_of[state] = scope
  scope.sessions[state] = true
  hook_abort(scope)
end

function tracker.closed(state)
  open_sessions[state] = nil
  local scope = scope_of[state]
  if scope then scope.sessions[state] = nil end
end

local installed = false

-- Sets the host up (the transport does it when it loads; idempotent; nothing outside nginx):
-- a scheduler per request or timer, and the tracking of open sessions.
function M.install()
  if installed or type(rawget(_G, "ngx")) ~= "table" then return end
  installed = true
  tasks.set_context(function()
    local scope = M.scope()
    return scope and scope.scheduler
  end)
  dropped.set_tracker(tracker)
  dropped.clock = ngx.now
  dropped.set_waker(wake_queue)
end

-- airlock.ngx.stats() → counters of this worker: open_sessions, creating (creates in
-- flight), scopes (requests and timers that used the SDK), cleanups (requests whose sessions
-- finish() deleted), aborts, deleted.
function M.stats()
  return { open_sessions = count_open(), creating = counters.creating, scopes = counters.scopes,
           cleanups = counters.cleanups, aborts = counters.aborts, deleted = counters.deleted }
end

return M
