-- The scheduler of one nginx request or timer (OpenResty): the owner of the tasks that code
-- spawns. A task is a light thread of that request (ngx.thread.spawn), so nginx itself
-- resumes it when its cosocket or timer is ready, inside its own request; nothing here ever
-- resumes a coroutine, and no request can touch another's tasks. poll waits on a semaphore
-- that each ending task posts; waits in the client-side command line (exec_gate) use a
-- semaphore too, posted by whichever request frees a place.
local tasks = require "airlock.tasks"

local M = {}

local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack  -- luacheck: ignore 143

M.POLL_MIN_SECONDS = 0.001   -- poll(0) yields this long: ngx.sleep(0) logs a warning on Debian's nginx
M.CHECK_SECONDS = 0.01       -- how often a wait looks at a waitable nobody reports on

local Scheduler = {}
Scheduler.__index = Scheduler
Scheduler.__name = "airlock.ngx.Scheduler"
M.Scheduler = Scheduler

-- scheduler.new(name) → a scheduler for one request or timer.
function M.new(name)
  return setmetatable({ name = name or "ngx", tasks = {}, background = {}, cancelled = false },
    Scheduler)
end

function Scheduler:__tostring()
  return "airlock.ngx.Scheduler (" .. self.name .. ", " .. #self.tasks .. " tasks)"
end

local function semaphore()
  return require("ngx.semaphore").new()
end

local function remove(list, item)
  for i = #list, 1, -1 do
    if list[i] == item then table.remove(list, i) return end
  end
end

local function spawn(self, background, fn, ...)
  if type(fn) ~= "function" then
    error("airlock.spawn: bad argument 'fn': expected a function, got " .. type(fn), 3)
  end
  local task = tasks.new_task(self, background)
  local list = background and self.background or self.tasks
  list[#list + 1] = task
  local args = pack(...)
  local function run()
    tasks.bind(task, coroutine.running())
    local r = pack(pcall(fn, unpack(args, 1, args.n)))
    if r[1] then
      task.status, task.values = "done", pack(unpack(r, 2, r.n))
    else
      task.status, task.error = "failed", r[2]
    end
    remove(list, task)
    if self.ended then self.ended:post(1) end
  end
  local thread, err = ngx.thread.spawn(run)
  if not thread then
    remove(list, task)
    task.status, task.error = "failed", "airlock.spawn: ngx.thread.spawn failed: " .. tostring(err)
  end
  task.thread = thread
  return task
end

-- scheduler:spawn(fn, ...) → Task: fn runs at once, as a light thread, until its first wait.
function Scheduler:spawn(fn, ...)
  return spawn(self, false, fn, ...)
end

-- scheduler:spawn_background(fn, ...): the SDK's own work (DELETEs), not counted by poll.
function Scheduler:spawn_background(fn, ...)
  return spawn(self, true, fn, ...)
end

function Scheduler:running()
  return #self.tasks
end

-- scheduler:poll([ms]) → tasks still running. The tasks run by themselves (nginx resumes
-- them); poll lets the request wait for them: at most ms milliseconds, less when one ends.
-- poll(0) yields the shortest time nginx can (1 ms) so that a `while poll(0) > 0` loop lets
-- them run instead of spinning.
function Scheduler:poll(ms)
  if #self.tasks == 0 then return 0 end
  if not self.ended then self.ended = semaphore() end
  local seconds = (ms or 0) / 1000
  self.ended:wait(seconds > M.POLL_MIN_SECONDS and seconds or M.POLL_MIN_SECONDS)
  return #self.tasks
end

-- Light threads resume themselves: nothing to do but refuse another scheduler's task.
function Scheduler:resume_if_ready(task)
  if task.owner ~= self then error("airlock: a scheduler resumes only its own tasks", 2) end
end

-- scheduler:await(w) → true: waits (yielding to nginx) until w:ready(). A waitable that
-- notifies is woken by tasks.notify (through w.waker); one with a driver (the curl transport,
-- asked for explicitly) is stepped without blocking; others are looked at every 10 ms.
function Scheduler:await(w)   -- luacheck: ignore 212
  if w:ready() then return true end
  local wake = semaphore()
  w.waker = function() wake:post(1) end
  local driver = w.driver
  while not w:ready() do
    if w.cancelled then
      w.waker = nil
      error("airlock: the request ended while this call waited for a place in the command line", 0)
    end
    if driver then driver.step(0) end
    wake:wait(w.notifies and not driver and 1 or M.CHECK_SECONDS)
  end
  w.waker = nil
  return true
end

-- The request or timer ended early: its waits in the command line give up.
function Scheduler:cancel()
  self.cancelled = true
end

return M
