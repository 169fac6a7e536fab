-- The libcurl transport: submit a request to airlock.core and wait for it. Waiting steps the
-- driver (blocking use) or, inside a task started by spawn(), yields to poll(). The C core
-- never yields; this module does. Also drains the queue of dropped sessions.
local core = require "airlock.core"
local engine = require "airlock.engine"

local M = { core = core }

local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local unpack = table.unpack or unpack  -- luacheck: ignore 143

local WAIT = {}                                -- the value a waiting task yields
local tasks = {}                               -- running tasks, in spawn order
local by_co = setmetatable({}, { __mode = "k" })
local background = {}                          -- fire-and-forget requests (dropped sessions)

local function current_task()
  local co = coroutine.running()
  return co and by_co[co] or nil
end
M.current_task = current_task

function M.submit(spec)
  return core.request(spec)
end

-- Wait for a request; returns its result table.
function M.wait(req)
  if current_task() then
    while not req:done() do coroutine.yield(WAIT, req) end
  else
    while not req:done() do core.step(1000) end
  end
  return req:result()
end

local function prune_background()
  local keep = {}
  for _, req in ipairs(background) do
    if not req:done() then keep[#keep + 1] = req end
  end
  background = keep
end

-- Send DELETE for every session whose owning handle was garbage-collected unclosed.
-- wait=true: return when they are answered (blocking calls, and calls inside tasks).
function M.drain(wait)
  if core.pending_count() == 0 then
    if #background > 0 then prune_background() end
    return 0
  end
  local reqs = {}
  for _, item in ipairs(core.take_pending()) do
    local settings = item.settings
    if settings then
      local spec = engine.build(settings, "DELETE", engine.session_path(item.id), nil,
        { timeout = math.min(settings.timeout, 10), max_retries = 1 })
      local ok, req = pcall(core.request, spec)
      if ok then reqs[#reqs + 1] = req end
    end
  end
  for _, req in ipairs(reqs) do
    if wait then M.wait(req) else background[#background + 1] = req end
  end
  return #reqs
end

-- One request, start to finish: true, data | false, error object.
function M.call(settings, method, path, body, opts)
  M.drain(true)
  local req = M.submit(engine.build(settings, method, path, body, opts))
  return engine.decode(settings, M.wait(req))
end

---------------------------------------------------------------- tasks

local Task = {}
Task.__index = Task
Task.__name = "airlock.Task"

function Task:__tostring()
  return "airlock.Task (" .. self.status .. ")"
end

-- task:result() → true, values... | false, error (nil, "running" while it runs)
function Task:result()
  if self.status == "running" then return nil, "running" end
  if self.status == "failed" then return false, self.error end
  return true, unpack(self.values, 1, self.values.n)
end

local function finish(task)
  for i, t in ipairs(tasks) do
    if t == task then table.remove(tasks, i) break end
  end
end

local function resume(task, ...)
  local r = pack(coroutine.resume(task.co, ...))
  if not r[1] then
    task.status, task.error, task.waiting = "failed", r[2], nil
    finish(task)
  elseif coroutine.status(task.co) == "dead" then
    task.status, task.waiting = "done", nil
    task.values = pack(unpack(r, 2, r.n))
    finish(task)
  elseif r[2] == WAIT then
    task.waiting = r[3]
  else
    task.waiting = nil   -- a plain yield: resumed at the next poll
  end
end

-- spawn(fn, ...) → task. fn runs at once until its first SDK call, which yields; poll()
-- carries it on. An error ends the task (task.status "failed", task.error).
function M.spawn(fn, ...)
  if type(fn) ~= "function" then engine.bad_argument("fn", "a function", fn) end
  local task = setmetatable({ co = coroutine.create(fn), status = "running" }, Task)
  by_co[task.co] = task
  tasks[#tasks + 1] = task
  resume(task, ...)
  return task
end

local function ready(task)
  return task.status == "running" and (task.waiting == nil or task.waiting:done())
end

-- poll([ms]) → number of tasks still running. Advances every transfer (waiting at most ms
-- milliseconds, 0 never blocks) and resumes the tasks whose request finished.
function M.poll(ms)
  ms = ms or 0
  if type(ms) ~= "number" or ms < 0 then engine.bad_argument("ms", "a number >= 0", ms) end
  M.drain(false)
  local any_ready = false
  for _, task in ipairs(tasks) do
    if ready(task) then any_ready = true break end
  end
  core.step(any_ready and 0 or ms)
  local snapshot = {}
  for i, task in ipairs(tasks) do snapshot[i] = task end
  for _, task in ipairs(snapshot) do
    if ready(task) then resume(task) end
  end
  if #background > 0 then prune_background() end
  return #tasks
end

-- Number of tasks still running.
function M.pending_tasks()
  return #tasks
end

return M
