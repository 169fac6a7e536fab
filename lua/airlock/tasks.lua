-- Tasks and the schedulers that own them. A task is a coroutine whose SDK calls wait by
-- yielding a "waitable" to its scheduler instead of blocking. A scheduler belongs to one
-- owner (the plain Lua program, one OpenResty request, one libuv host) and its poll() resumes
-- only its own tasks, so no code ever resumes a coroutine that belongs to someone else.
--
-- A waitable is any table with
--   w:ready()        → true once the task may go on (a transfer finished, a timer expired)
-- and one of
--   w.driver         what makes it ready: driver.step(ms) advances the I/O, waiting at most ms
--                    milliseconds (less when a timer of its own is due) and returning early
--                    when something finished; driver.completions() is a count that grows
--                    whenever one of its waitables may have become ready (by any caller)
--   w.notifies       true: whoever makes it ready calls tasks.notify(w)
-- A waitable with neither is checked at every poll.
-- poll looks at its tasks only when something may have changed, so a frame with many tasks
-- in flight and nothing finished costs one driver step.
local M = {}

local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local WAIT = {}                                   -- what a waiting task yields
local task_of = setmetatable({}, { __mode = "k" }) -- coroutine → task (also its pcall children)

local function running_coroutine()
  local co, main = coroutine.running()
  if co == nil or main then return nil end        -- 5.1 answers nil, 5.2+ (co, true) in main
  return co
end

-- The task running now, or nil (plain blocking code).
function M.current_task()
  local co = running_coroutine()
  return co and task_of[co] or nil
end

---------------------------------------------------------------- coroutine-safe pcall

-- Whether pcall lets a yield through (Lua 5.2+, LuaJIT); PUC Lua 5.1's does not. Known from
-- the version, not probed with a coroutine: inside an nginx request, require must not
-- resume a coroutine (nginx's coroutine.resume yields, across require's C boundary).
local PCALL_YIELDS = _VERSION ~= "Lua 5.1" or rawget(_G, "jit") ~= nil
M.PCALL_YIELDS = PCALL_YIELDS

-- pcall(fn, ...) that a task may yield through on every Lua version: on PUC 5.1, inside a
-- task, fn runs in a coroutine of its own (counted as the same task) whose yields are passed
-- on to the scheduler and whose error ends up in the resume result.
function M.pcall(fn, ...)
  local task = not PCALL_YIELDS and M.current_task()
  if not task then return pcall(fn, ...) end
  local co = coroutine.create(fn)
  task_of[co] = task
  local r = pack(coroutine.resume(co, ...))
  while true do
    if not r[1] then
      task_of[co] = nil
      return false, r[2]
    end
    if coroutine.status(co) == "dead" then
      task_of[co] = nil
      return true, unpack(r, 2, r.n)
    end
    r = pack(coroutine.resume(co, coroutine.yield(unpack(r, 2, r.n))))
  end
end

---------------------------------------------------------------- tasks

local Task = {}
Task.__index = Task
Task.__name = "airlock.Task"
M.Task = Task

function Task:__tostring()
  return "airlock.Task (" .. self.status .. ")"
end

-- task:result() → true, values... | false, error | nil, "running"
function Task:result()
  if self.status == "running" then return nil, "running" end
  if self.status == "failed" then return false, self.error end
  return true, unpack(self.values, 1, self.values.n)
end

---------------------------------------------------------------- schedulers

local Scheduler = {}
Scheduler.__index = Scheduler
Scheduler.__name = "airlock.Scheduler"
M.Scheduler = Scheduler

-- tasks.new_scheduler([name]) → a scheduler: an owner of tasks.
function M.new_scheduler(name)
  return setmetatable({ name = name or "scheduler", tasks = {}, background = {}, drivers = {},
    dirty = false, go = {} }, Scheduler)
end

function Scheduler:__tostring()
  return "airlock.Scheduler (" .. self.name .. ", " .. #self.tasks .. " tasks)"
end

local function remove(list, item)
  for i = #list, 1, -1 do
    if list[i] == item then table.remove(list, i) return end
  end
end

local function resume(task, ...)
  local owner = task.owner
  local r = pack(coroutine.resume(task.co, ...))
  if not r[1] then
    task.status, task.error, task.waiting = "failed", r[2], nil
    -- a host where no caller looks at results (Neovim) shows the error: scheduler.on_failed
    if owner.on_failed then pcall(owner.on_failed, owner, task, r[2]) end
  elseif coroutine.status(task.co) == "dead" then
    task.status, task.waiting = "done", nil
    task.values = pack(unpack(r, 2, r.n))
  elseif r[2] == WAIT then
    local w = r[3]
    task.waiting = w
    local d = w.driver
    if d then
      if owner.drivers[d] == nil then owner.drivers[d] = false end  -- new: look next poll
    elseif not w.notifies then
      owner.dirty = true            -- only looking tells whether it is ready
    end
    return
  else
    task.waiting = nil              -- a plain yield: resumed at the next poll
    owner.dirty = true
    return
  end
  remove(task.background and owner.background or owner.tasks, task)
end

-- tasks.new_task(owner, background) → a running Task of owner, not bound to a coroutine yet:
-- for a scheduler that runs its tasks on coroutines of its own (OpenResty light threads),
-- which calls tasks.bind(task, co) from inside that coroutine.
function M.new_task(owner, background)
  return setmetatable({ status = "running", owner = owner, background = background or nil }, Task)
end

-- tasks.bind(task, co): co runs task (tasks.current_task() inside co answers task).
function M.bind(task, co)
  task.co = co
  task_of[co] = task
end

local function spawn(self, background, fn, ...)
  if type(fn) ~= "function" then error("airlock.spawn: bad argument 'fn': expected a function, got " .. type(fn), 3) end
  local task = M.new_task(self, background)
  M.bind(task, coroutine.create(fn))
  local list = background and self.background or self.tasks
  list[#list + 1] = task
  resume(task, ...)
  return task
end

-- scheduler:spawn(fn, ...) → Task. fn runs at once until its first wait.
function Scheduler:spawn(fn, ...)
  return spawn(self, false, fn, ...)
end

-- scheduler:spawn_background(fn, ...): a task the program did not ask for (the DELETE of a
-- dropped session): not counted by poll's answer.
function Scheduler:spawn_background(fn, ...)
  return spawn(self, true, fn, ...)
end

-- Number of the program's tasks still running.
function Scheduler:running()
  return #self.tasks
end

local function ready(task)
  if task.status ~= "running" or coroutine.status(task.co) ~= "suspended" then return false end
  local w = task.waiting
  return w == nil or w:ready()
end

-- Whether a driver finished something since this scheduler last looked at its tasks.
local function drivers_moved(self)
  for d, seen in pairs(self.drivers) do
    if d.completions() ~= seen then return true end
  end
  return false
end

-- Resumes, once each, the tasks that can go on (in spawn order, program's first).
local function run_ready(self)
  self.dirty = false
  for d in pairs(self.drivers) do self.drivers[d] = d.completions() end
  local go, n, unknown = self.go, 0, false
  for _, list in ipairs({ self.tasks, self.background }) do
    for _, task in ipairs(list) do
      if ready(task) then
        n = n + 1
        go[n] = task
      else
        local w = task.waiting
        if w and not w.driver and not w.notifies then unknown = true end
      end
    end
  end
  for i = 1, n do
    local task = go[i]
    go[i] = nil
    if ready(task) then resume(task) end
  end
  -- a waitable nobody reports on is looked at again next poll
  if unknown then self.dirty = true end
end

-- scheduler:poll([ms]) → number of the program's tasks still running. Advances the I/O its
-- tasks wait on (waiting at most ms milliseconds when none can go on; 0, the default, never
-- blocks) and resumes, once each, the tasks that can go on.
function Scheduler:poll(ms)
  ms = ms or 0
  if #self.tasks == 0 and #self.background == 0 then return 0 end
  local wait = (self.dirty or drivers_moved(self)) and 0 or ms
  local first = next(self.drivers)
  if first ~= nil and next(self.drivers, first) == nil then
    first.step(wait)
  elseif first ~= nil then
    -- several kinds of I/O (a test transport beside libcurl): share the wait in slices
    local slice = wait > 0 and math.min(wait, 10) or 0
    for d in pairs(self.drivers) do d.step(slice) end
  end
  if self.dirty or drivers_moved(self) then run_ready(self) end
  return #self.tasks
end

local context                                     -- function() → scheduler or nil

-- The scheduler the host names for code outside tasks (tasks.set_context), or nil.
local function context_scheduler()
  return context and context() or nil
end

-- How a task waits: inside a task, yield w to the scheduler until w:ready() and return true;
-- outside a task return false (the caller blocks its own way). A scheduler with an await
-- method waits its own way (an OpenResty request: a semaphore, the request yields to nginx),
-- also for the code outside tasks it is the context of.
function M.await(w)
  local task = M.current_task()
  local owner = task and task.owner or context_scheduler()
  if owner and owner.await then return owner:await(w, task) end
  if not task then return false end
  while not w:ready() do
    w.task = task
    coroutine.yield(WAIT, w)
  end
  w.task = nil
  return true
end

-- w (a `notifies` waitable) became ready. Its task's next poll looks at it; a scheduler that
-- resumes on notification has an on_ready(task) method (which may call resume_if_ready at
-- once, or schedule it: a libuv host, Neovim's vim.schedule).
function M.notify(w)
  local waker = w.waker           -- set by a scheduler's own await
  if waker then waker(w) end
  local task = w.task
  if not task then return end
  task.owner.dirty = true
  if task.owner.on_ready then task.owner:on_ready(task) end
end

-- scheduler:resume_if_ready(task): resumes one of its own tasks if it can go on.
function Scheduler:resume_if_ready(task)
  if task.owner ~= self then error("airlock: a scheduler resumes only its own tasks", 2) end
  if ready(task) then resume(task) end
end

---------------------------------------------------------------- which scheduler is ours

local default = M.new_scheduler("default")
M.default = default

-- tasks.set_context(fn): fn() names the scheduler of the code running now when it is not
-- inside a task (e.g. the OpenResty request's, kept in ngx.ctx); nil goes back to one
-- default scheduler per Lua state.
function M.set_context(fn)
  if fn ~= nil and type(fn) ~= "function" then error("tasks.set_context: a function or nil expected", 2) end
  context = fn
end

-- The scheduler that owns the code running now: the running task's owner, else the one the
-- context names, else the default one.
function M.current()
  local task = M.current_task()
  if task then return task.owner end
  return context_scheduler() or default
end

-- Whether the code running now can wait without blocking its host: inside a task, or where
-- the host's scheduler waits on its own (an OpenResty request handler).
function M.can_wait()
  if M.current_task() then return true end
  local s = context_scheduler()
  return s ~= nil and s.await ~= nil
end

M.WAIT = WAIT
return M
