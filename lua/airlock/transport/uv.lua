-- The libuv transport: the C core's transfers driven by a host's libuv loop (Neovim's
-- vim.loop, luv), so that nothing polls. libcurl names the sockets it wants watched and the
-- timeout it wants (core.socket_events, core.timeout); this module keeps one uv poll handle
-- per socket and one uv timer, and their callbacks hand the events back (core.action). A
-- finished transfer notifies the task that waits for it, and the task is resumed later,
-- outside libuv's callback: through vim.schedule in Neovim (so task code may use the editor
-- API), from a uv idle handle elsewhere. With nothing in flight no handle is active: an idle
-- host does no work.
--
--   require("airlock.transport.uv").install(vim.loop)   -- or automatic inside Neovim
--
-- Outside tasks send() blocks like the curl transport (the core waits on its own sockets).
local core = require "airlock.core"
local dropped = require "airlock.dropped_sessions"
local tasks = require "airlock.tasks"
local transports = require "airlock.transport"

local M = { name = "uv", core = core }

local uv                 -- the loop module (vim.loop or luv) once installed
local defer              -- function(fn): runs fn soon, outside libuv callbacks
local idle_handle        -- the handle behind the default defer outside Neovim
local owner              -- the scheduler whose tasks the loop resumes
local made_default       -- install made this transport the automatic choice
local report_error       -- function(message): an error raised inside one of our callbacks
local timeout_timer      -- libcurl's timeout
local fallback_timer     -- ticks while a socket could not get a poll handle
local retry_timer        -- the queue of sessions to delete: when a failed DELETE is due again
local retry_at           -- (loop ms) when retry_timer goes off, while it is armed
local polls = {}         -- fd → { handle, mode, callback }
local fallback = {}      -- fd → events, sockets without a poll handle (checked every 10 ms)
local waiting = {}       -- Transfer waitables of tasks → true
local counters = { wakeups = 0, reused_fds = 0, fallback_fds = 0, callback_errors = 0,
                   callback_ms = 0, callback_max_ms = 0, resume_ms = 0, resume_max_ms = 0,
                   watched_most = 0 }
local nwatched = 0       -- poll handles open (the size of polls)

local MODES = { ["in"] = "r", out = "w", inout = "rw" }
local FALLBACK_MS = 10

-- What a poll callback saw, in core.action's words.
local function seen_events(err, events)
  if err then return "err" end
  events = events or ""
  local r, w = events:find("r", 1, true), events:find("w", 1, true)
  if r and w then return "inout" end
  if w then return "out" end
  return "in"
end

---------------------------------------------------------------- keeping the loop in step

local sync, settle

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- Adds the milliseconds since t0 (uv.hrtime) to the counters total_name and max_name: how
-- long the loop's thread was busy with us.
local function account(t0, total_name, max_name)
  local ms = (uv.hrtime() - t0) / 1e6
  counters[total_name] = counters[total_name] + ms
  if ms > counters[max_name] then counters[max_name] = ms end
end

-- A callback body never raises into libuv (plain luv ends the process on an uncaught error).
local function guarded(fn, ...)
  counters.wakeups = counters.wakeups + 1
  local t0 = uv.hrtime()
  local ok, err = pcall(fn, ...)
  account(t0, "callback_ms", "callback_max_ms")
  if not ok then
    counters.callback_errors = counters.callback_errors + 1
    report_error("airlock.transport.uv: " .. tostring(err))
  end
end

local function on_socket(fd, err, events)
  settle(core.action(fd, seen_events(err, events)))
end

local function on_timeout()
  settle(core.action())
end

local function on_fallback_tick()
  local finished, moved = 0, nil
  for fd, events in pairs(fallback) do
    local f, _, m = core.action(fd, events)
    finished, moved = finished + f, m
  end
  settle(finished, nil, moved)
end

local function unwatch(fd)
  local p = polls[fd]
  if p then
    -- close stops the handle at once: the descriptor number may be watched anew right away
    p.handle:close()
    polls[fd] = nil
    nwatched = nwatched - 1
  end
  fallback[fd] = nil
end

local function watch(fd, events)
  local mode = MODES[events]
  local p = polls[fd]
  if not p then
    local handle, err = uv.new_socket_poll(fd)
    if not handle then
      -- another watcher holds this descriptor (EEXIST) or no memory: look at it every 10 ms
      counters.fallback_fds = counters.fallback_fds + 1
      fallback[fd] = events
      report_error("airlock.transport.uv: cannot watch socket " .. fd .. " (" .. tostring(err) ..
        "); checking it every " .. FALLBACK_MS .. " ms")
      return
    end
    p = { handle = handle }
    p.callback = function(e, seen) guarded(on_socket, fd, e, seen) end
    polls[fd] = p
    nwatched = nwatched + 1
    if nwatched > counters.watched_most then counters.watched_most = nwatched end
  end
  if p.mode ~= mode then
    p.handle:start(mode, p.callback)
    p.mode = mode
  end
end

-- Brings the poll handles and the timer in line with what libcurl wants now. Called after
-- every core call: libcurl may have closed a socket and opened another with the same number
-- meanwhile (`fresh`), whose old handle must go before the new one can be made.
function sync()
  for _, e in ipairs(core.socket_events()) do
    if e.fresh then counters.reused_fds = counters.reused_fds + 1 end
    if e.fresh or e.events == "remove" then unwatch(e.fd) end
    if e.events ~= "remove" then watch(e.fd, e.events) end
  end
  local ms = core.timeout()
  if ms then
    timeout_timer:start(ms, 0, M._on_timeout)
  else
    timeout_timer:stop()
  end
  if next(fallback) then
    if not fallback_timer:is_active() then fallback_timer:start(FALLBACK_MS, FALLBACK_MS, M._on_fallback) end
  elseif fallback_timer:is_active() then
    fallback_timer:stop()
  end
end

-- After a core call that finished `finished` transfers: sync, then notify their tasks.
local progressed = 0   -- the core's count of streamed body arrivals, last seen
function settle(finished, _, moved)
  sync()
  if moved and moved ~= progressed then
    progressed = moved
    finished = finished + 1   -- a streamed transfer has bytes for its task
  end
  if finished == 0 then return end
  local done = {}
  for w in pairs(waiting) do
    if w:ready() then
      waiting[w] = nil
      done[#done + 1] = w
    end
  end
  for i = 1, #done do tasks.notify(done[i]) end
end

---------------------------------------------------------------- resuming tasks

-- The default way to resume tasks outside libuv callbacks with plain luv: a queue drained by
-- an idle handle, active only while the queue has something.
local function idle_queue(loop)
  local queue, idle = {}, loop.new_idle()
  idle_handle = idle
  local function drain()
    local batch = queue
    queue = {}
    for i = 1, #batch do
      local ok, err = pcall(batch[i])
      if not ok then report_error("airlock.transport.uv: " .. tostring(err)) end
    end
    if #queue == 0 then idle:stop() end
  end
  return function(fn)
    queue[#queue + 1] = fn
    if #queue == 1 then idle:start(function() guarded(drain) end) end
  end
end

-- scheduler.on_ready (see airlock.tasks): the task's transfer or timer is ready.
local function on_ready(scheduler, task)
  defer(function()
    local t0 = uv.hrtime()
    scheduler:resume_if_ready(task)
    account(t0, "resume_ms", "resume_max_ms")
  end)
end

---------------------------------------------------------------- the queue of sessions to delete

-- dropped_sessions' waker: a failed DELETE is due again in `seconds`. One timer, armed for
-- the earliest; unreferenced, so it never keeps the loop alive (a program that stops its
-- loop early calls airlock.drain()). Its run is a background task of the loop's scheduler.
local function wake_queue(seconds)
  if not uv then return end
  local ms = math.floor(seconds * 1000 + 0.5)
  local at = uv.now() + ms
  if retry_at and retry_at <= at then return end
  retry_at = at
  retry_timer:start(ms, 0, function()
    retry_at = nil
    guarded(function()
      owner:spawn_background(function()
        require("airlock.internal.exchange").delete_dropped(true)
        local wait = dropped.next_wait()
        if wait then wake_queue(math.max(wait, 0.1)) end
      end)
    end)
  end)
end

---------------------------------------------------------------- installing

-- uv.install(loop [, opts]) → the transport. Hands the core's sockets and timeout to loop
-- (vim.loop, or the luv module), makes this transport the automatic choice
-- (airlock.transport.set_default) and lets the loop resume the tasks of opts.scheduler
-- (default: the Lua state's default scheduler, which airlock.spawn uses). opts:
--   defer      function(fn) that runs fn soon outside libuv callbacks (default: vim.schedule
--              in Neovim, an idle handle elsewhere)
--   on_error   function(message) for an error inside a callback (default: vim.notify in
--              Neovim, stderr elsewhere); in Neovim also for a task that failed (its error
--              raised out of the task's function), which nobody would see otherwise
--   default    false: do not make it the automatic choice
-- Installing again on the same loop only changes the options given.
function M.install(loop, opts)
  if type(loop) ~= "table" and type(loop) ~= "userdata" then
    error("airlock.transport.uv.install: a libuv loop module expected (vim.loop or require \"luv\"), got "
      .. type(loop), 2)
  end
  if type(loop.new_socket_poll) ~= "function" or type(loop.new_timer) ~= "function" then
    error("airlock.transport.uv.install: the loop has no new_socket_poll/new_timer (not luv?)", 2)
  end
  opts = opts or {}
  if type(opts) ~= "table" then error("airlock.transport.uv.install: options must be a table", 2) end
  for _, name in ipairs({ "defer", "on_error" }) do
    if opts[name] ~= nil and type(opts[name]) ~= "function" then
      error("airlock.transport.uv.install: option '" .. name .. "' must be a function", 2)
    end
  end
  if uv and uv ~= loop then
    error("airlock.transport.uv.install: already installed on another loop", 2)
  end
  local neovim = transports.in_neovim() and loop == rawget(_G, "vim").loop
  if not uv then
    uv = loop
    timeout_timer = loop.new_timer()
    fallback_timer = loop.new_timer()
    retry_timer = loop.new_timer()
    retry_timer:unref()
    dropped.set_waker(wake_queue)
    defer = neovim and rawget(_G, "vim").schedule or idle_queue(loop)
    report_error = function(message) io.stderr:write(message, "\n") end
    if neovim then
      local vim = rawget(_G, "vim")
      report_error = function(message)
        vim.schedule(function() vim.notify(message, vim.log.levels.ERROR) end)
      end
    end
    owner = opts.scheduler or tasks.default
    owner.on_ready = on_ready
    if neovim then
      owner.on_failed = function(_, _, err)
        report_error("airlock: a task failed: " .. tostring(err))
      end
    end
    -- the curl transport steps the same core (airlock.poll, explicit transport = "curl")
    require("airlock.transport.curl").after_step = settle
    sync()                 -- the first socket_events() puts the core in host mode
  end
  if opts.defer then defer = opts.defer end
  if opts.on_error then report_error = opts.on_error end
  if opts.default ~= false then
    transports.set_default(M)
    made_default = true
  end
  return M
end

-- uv.uninstall() → true, or false (and nothing changes) while tasks wait on the loop. Closes
-- the handles (the loop finishes closing them on its next turn), gives the scheduler back
-- to airlock.poll and the automatic choice back to the default. Then install may take
-- another loop.
function M.uninstall()
  if not uv then return true end
  if next(waiting) then return false end
  for fd in pairs(polls) do unwatch(fd) end
  fallback = {}
  timeout_timer:close()
  fallback_timer:close()
  retry_timer:close()
  dropped.set_waker(nil)
  if idle_handle then idle_handle:close() end
  owner.on_ready, owner.on_failed = nil, nil
  require("airlock.transport.curl").after_step = nil
  if made_default then transports.set_default(nil) end
  uv, defer, idle_handle, made_default, timeout_timer, fallback_timer = nil, nil, nil, nil, nil, nil
  retry_timer, retry_at = nil, nil
  return true
end

-- Installs on the host's loop if nothing was installed: vim.loop in Neovim, else luv's.
local function ensure_installed()
  if uv then return end
  if transports.in_neovim() then
    M.install(rawget(_G, "vim").loop, { default = false })
    return
  end
  local ok, luv = pcall(require, "luv")
  if not ok then
    error("airlock: the uv transport needs a libuv loop: call require(\"airlock.transport.uv\").install(loop)"
      .. " (luv is not installed: " .. tostring(luv) .. ")", 0)
  end
  M.install(luv, { default = false })
end

-- The loop this transport runs on (nil before install).
function M.loop()
  return uv
end

M._on_timeout = function() guarded(on_timeout) end
M._on_fallback = function() guarded(on_fallback_tick) end

---------------------------------------------------------------- the transport interface

local Transfer = { notifies = true }
Transfer.__index = Transfer
function Transfer:ready() return self.req:done() end

local Sleep = { notifies = true }
Sleep.__index = Sleep
function Sleep:ready() return self.expired end

-- Blocks until ready() (outside tasks): the core waits on its own sockets; whatever else
-- finished meanwhile is notified, and the loop's watchers follow.
local function block_until(ready, deadline)
  while not ready() do
    local ms = 1000
    if deadline then ms = math.max(0, math.min(ms, deadline - core.now())) end
    settle(core.step(ms, deadline ~= nil))
  end
end

-- t:send(request) → response | nil, failure (see airlock.transport).
function M:send(request)   -- luacheck: ignore 212
  ensure_installed()
  local curl = require "airlock.transport.curl"
  local req = core.request(curl._core_request(request))
  if request.on_chunk then
    curl._stream_body(req, request.on_chunk, function(w)
      if tasks.current_task() then
        if w:ready() then return end
        waiting[w] = true
        sync()
        tasks.await(w)
        waiting[w] = nil
      else
        block_until(function() return w:ready() end)
      end
    end, { notifies = true })
  elseif tasks.current_task() then
    local w = setmetatable({ req = req }, Transfer)
    waiting[w] = true
    sync()                 -- libcurl asked for a timeout action to start the transfer
    tasks.await(w)
    waiting[w] = nil
  else
    block_until(function() return req:done() end)
  end
  return curl._response(req:result())
end

-- t:sleep(seconds): a uv timer inside a task; outside, transfers keep advancing meanwhile.
function M:sleep(seconds)   -- luacheck: ignore 212
  if seconds ~= seconds or seconds <= 0 then return end
  ensure_installed()
  if tasks.current_task() then
    local w = setmetatable({ expired = false }, Sleep)
    local timer = uv.new_timer()
    -- libuv timers count from the loop's cached time, which is old when the loop has not
    -- run for a while (a task's first part runs where it was spawned): refresh it first
    uv.update_time()
    timer:start(math.ceil(seconds * 1000), 0, function()
      guarded(function()
        timer:close()
        w.expired = true
        tasks.notify(w)
      end)
    end)
    tasks.await(w)
    return
  end
  local deadline = core.now() + seconds * 1000
  block_until(function() return core.now() >= deadline end, deadline)
end

-- t:close_idle() → true, or false while transfers are in flight.
function M:close_idle()   -- luacheck: ignore 212
  local closed = core.close_connections()
  if uv then sync() end
  return closed
end

-- t:stats(): the core's counters, plus wakeups (callbacks run), watched (poll handles),
-- watched_most (the most poll handles open at once so far),
-- reused_fds (sockets whose number libcurl reused before the loop saw the old one go),
-- fallback_fds, callback_errors, and how long the loop's thread spent in the transport's
-- callbacks (callback_ms, callback_max_ms) and in resuming tasks (resume_ms,
-- resume_max_ms: the task's own code until its next wait included).
function M:stats()   -- luacheck: ignore 212
  local s = core.stats()
  for k, v in pairs(counters) do s[k] = v end
  s.watched = count(polls)
  s.waiting = count(waiting)
  s.timer_armed = timeout_timer ~= nil and timeout_timer:is_active() or false
  return s
end

return M
