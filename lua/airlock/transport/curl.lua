-- The libcurl transport, on the C core airlock.core. send() starts one transfer and waits for
-- it: inside a task by yielding to the scheduler (whose poll steps the core), elsewhere by
-- stepping the core itself (a blocking call). sleep() is a timer the same way. The C core
-- never yields; this module does.
local core = require "airlock.core"
local json = require "airlock.internal.json"
local tasks = require "airlock.tasks"

-- the core walks decoded answers faster than Lua does
json.set_native_walk(core.strip_nulls)

local M = { name = "curl", core = core }

-- Set by a transport that drives the same core from a host loop (airlock.transport.uv):
-- called with the number of finished transfers after every step here, so that the loop's
-- watchers follow the sockets libcurl opened or closed meanwhile.
M.after_step = nil

-- Every step of the core goes through here, so that the completions of transfers are
-- counted whoever stepped (a blocking call may finish a task's transfer).
local completions = 0
local progressed = 0   -- the core's count of body arrivals of streamed requests, last seen
-- Counts what a step (or a host loop's action) of the core reported: a streamed request's
-- new body bytes count as a completion, so that its task looks at them.
local function count(finished, _, moved)
  completions = completions + finished
  if moved and moved ~= progressed then
    progressed = moved
    completions = completions + 1
  end
end
local function step(ms, idle_wait)
  local finished, live, moved = core.step(ms, idle_wait)
  count(finished, live, moved)
  if M.after_step then M.after_step(finished, live, moved) end
end

-- Deadlines (core.now() ms) of the timers tasks sleep on, until seen expired.
local timers = {}

-- The scheduler's driver (see airlock.tasks): waits at most ms, less when a task's timer is
-- due first, returning early when a transfer finished.
M.driver = {
  completions = function() return completions end,
  step = function(ms)
    local now, next_at = core.now(), nil
    for i = 1, #timers do
      if next_at == nil or timers[i] < next_at then next_at = timers[i] end
    end
    if next_at and next_at - now < ms then ms = math.max(0, next_at - now) end
    step(ms, true)
    now = core.now()
    for i = #timers, 1, -1 do
      if timers[i] <= now then
        table.remove(timers, i)
        completions = completions + 1
      end
    end
  end,
}

local Transfer = {}
Transfer.__index = Transfer
Transfer.driver = M.driver
function Transfer:ready() return self.req:done() end

local Timer = {}
Timer.__index = Timer
Timer.driver = M.driver
function Timer:ready() return core.now() >= self.at end
function Timer:remaining_ms() return math.max(0, self.at - core.now()) end

-- A streamed transfer's waitable is ready once the transfer is done or has body bytes to hand
-- out (taken into w.chunk).
local Streamed = {}
Streamed.__index = Streamed
function Streamed:ready()
  if self.chunk or self.req:done() then return true end
  local chunk, status = self.req:take()
  if chunk ~= "" then
    self.chunk, self.status = chunk, status
    return true
  end
  return false
end

-- Hands a streamed request's body to on_chunk(chunk, status) as it arrives; wait(w) returns
-- once w:ready() (a yield inside a task, else a blocking wait). w starts as fields (the
-- waitable's driver or notifies). Shared with the uv transport (the same core); "_": not
-- part of the transport interface.
function M._stream_body(req, on_chunk, wait, fields)
  local w = setmetatable(fields, Streamed)
  w.req = req
  while true do
    wait(w)
    local chunk, status = w.chunk, w.status
    w.chunk = nil
    if not chunk then chunk, status = req:take() end
    if chunk ~= "" then
      -- a callback that raises ends the transfer (the server then stops the command)
      local ok, err = tasks.pcall(on_chunk, chunk, status)
      if not ok then
        req:cancel()
        error(err, 0)
      end
    end
    if req:done() and w.chunk == nil and chunk == "" then return end
  end
end

-- The request for the core: stream = true when the body goes to request.on_chunk. Shared
-- with the uv transport; "_": not part of the transport interface.
function M._core_request(request)
  if not request.on_chunk then return request end
  local copy = {}
  for k, v in pairs(request) do copy[k] = v end
  copy.on_chunk, copy.stream = nil, true
  return copy
end

local function curl_wait(w)
  if not tasks.await(w) then
    while not w:ready() do step(1000) end
  end
end

-- The core's result as send's answer: response | nil, failure. Shared with the uv
-- transport; "_": not part of the transport interface.
local function response(r)
  if r.status then return r end   -- {status, reason, headers, body} (and the core's connects)
  return nil, { message = r.error, sent = r.sent, tls = r.tls, too_large = r.too_large, code = r.code }
end
M._response = response

-- t:send(request) → response | nil, failure (see airlock.transport). With request.on_chunk
-- the body goes to it as it arrives (response.body is then "").

function M:send(request)   -- luacheck: ignore 212
  if request.on_chunk then
    local req = core.request(M._core_request(request))
    M._stream_body(req, request.on_chunk, curl_wait, { driver = M.driver })
    return response(req:result())
  end
  if not tasks.can_wait() then
    -- a blocking call: the core waits (the other transfers advance) and answers in one call
    local r, finished = core.perform(request)
    if r then
      completions = completions + finished
      if M.after_step then M.after_step(finished) end
      return response(r)
    end
  end
  local req = core.request(request)
  if not tasks.await(setmetatable({ req = req }, Transfer)) then
    while not req:done() do step(1000) end
  end
  return response(req:result())
end

-- t:sleep(seconds): transfers in flight keep advancing meanwhile.
function M:sleep(seconds)   -- luacheck: ignore 212
  if seconds ~= seconds or seconds <= 0 then return end
  local timer = setmetatable({ at = core.now() + seconds * 1000 }, Timer)
  if tasks.current_task() then
    timers[#timers + 1] = timer.at
    tasks.await(timer)
    return
  end
  while not timer:ready() do step(timer:remaining_ms(), true) end
end

-- t:close_idle() → true, or false while transfers are in flight.
function M:close_idle()   -- luacheck: ignore 212
  local closed = core.close_connections()
  if M.after_step then M.after_step(0) end
  return closed
end

function M:stats()   -- luacheck: ignore 212
  return core.stats()
end

return M
