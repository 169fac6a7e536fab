-- The libcurl transport, on the C core airlock.core. send() starts one transfer and waits for
-- it: inside a task by yielding to the scheduler (whose poll steps the core), elsewhere by
-- stepping the core itself (a blocking call). sleep() is a timer the same way. The C core
-- never yields; this module does.
local core = require "airlock.core"
local tasks = require "airlock.tasks"

local M = { name = "curl", core = core }

-- What advances libcurl's transfers for a scheduler: wait at most ms, return early when a
-- transfer finished (sleeping the whole ms when none is in flight: timers may be waiting).
M.driver = {
  step = function(ms) core.step(ms, true) end,
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

-- t:send(request) → response | nil, failure (see airlock.transport).
function M:send(request)   -- luacheck: ignore 212
  local req = core.request(request)
  if not tasks.await(setmetatable({ req = req }, Transfer)) then
    while not req:done() do core.step(1000) end
  end
  local r = req:result()
  if r.status then
    return { status = r.status, reason = r.reason, headers = r.headers, body = r.body }
  end
  return nil, { message = r.error, sent = r.sent, tls = r.tls, code = r.code }
end

-- t:sleep(seconds): transfers in flight keep advancing meanwhile.
function M:sleep(seconds)   -- luacheck: ignore 212
  if seconds ~= seconds or seconds <= 0 then return end
  local timer = setmetatable({ at = core.now() + seconds * 1000 }, Timer)
  if tasks.await(timer) then return end
  while not timer:ready() do core.step(timer:remaining_ms(), true) end
end

-- t:close_idle() → true, or false while transfers are in flight.
function M:close_idle()   -- luacheck: ignore 212
  return core.close_connections()
end

function M:stats()   -- luacheck: ignore 212
  return core.stats()
end

return M
