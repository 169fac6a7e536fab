-- The client-side line for commands (exec and import), one per server and API key: at most
-- `limit` of this program's commands in flight, the others wait in line (first come, first
-- served) inside their tasks. The limit comes from the `max_concurrent_exec` option or from
-- the server's own answer ("429 Too many commands running at once: <n> allowed"), so a host
-- with more commands than the server has slots gets them all run, none failed.
--
-- Blocking callers (outside tasks) never wait in line: they take a place at once and, if the
-- server is full, the retry policy's backoff handles it. Code that waits without blocking
-- (tasks, and an OpenResty request handler) waits in line.
--
-- A place is held at most for its request's timeout (a lease): a holder that can never
-- give it back (an nginx request killed in the middle of a command) does not shrink the
-- line for good. A host ending an owner's work early gives its places back with
-- release_owner.
local tasks = require "airlock.tasks"

local M = {}

local gates = {}

local Gate = {}
Gate.__index = Gate

local Ticket = {}
Ticket.__index = Ticket
Ticket.notifies = true            -- pump() calls tasks.notify when it grants one
function Ticket:ready() return self.granted end

-- The gate of settings' server and key (created on first use); the option, when given, caps
-- its limit.
function M.for_settings(settings)
  local key = settings.base_url .. "\0" .. settings.api_key
  local gate = gates[key]
  if not gate then
    gate = setmetatable({ running = 0, line = {}, waited = 0, refusals = 0, held = {} }, Gate)
    gates[key] = gate
  end
  local option = settings.max_concurrent_exec
  if option and option ~= gate.option then
    gate.option = option
    gate.limit = math.min(option, gate.server_limit or option)
  end
  return gate
end

local function cap(gate)
  if gate.option and gate.server_limit then return math.min(gate.option, gate.server_limit) end
  return gate.option or gate.server_limit
end

local function release(gate, ticket)
  if not ticket.granted or ticket.released then return end
  ticket.released = true
  gate.held[ticket] = nil
  gate.running = gate.running - 1
end

-- Takes back the places whose lease ran out (their holders can no longer give them back).
local function reclaim_expired(gate)
  local now = os.time()
  for ticket in pairs(gate.held) do
    if ticket.expires < now then release(gate, ticket) end
  end
end

local function has_room(gate)
  if gate.limit == nil or gate.running < gate.limit then return true end
  reclaim_expired(gate)
  return gate.running < gate.limit
end

local function grant(gate, ticket)
  ticket.granted = true
  ticket.expires = os.time() + ticket.lease
  gate.held[ticket] = true
  gate.running = gate.running + 1
end

-- Whether the one waiting with ticket still wants its place.
local function wanted(ticket)
  if ticket.cancelled then return false end
  return ticket.task == nil or ticket.task.status == "running"
end

-- Gives the free places to those in line, in order (skipping those that gave up meanwhile).
local function pump(gate)
  while #gate.line > 0 and has_room(gate) do
    local ticket = table.remove(gate.line, 1)
    if wanted(ticket) then
      grant(gate, ticket)
      tasks.notify(ticket)
    end
  end
end

-- gate:acquire([lease]) → ticket: a place for one command, held at most lease seconds
-- (default 1 hour). Where the caller can wait without blocking (tasks.can_wait) it waits in
-- line when the limit is reached; elsewhere it never waits.
function Gate:acquire(lease)
  local task = tasks.current_task()
  local ticket = setmetatable({ gate = self, granted = false, task = task, owner = tasks.current(),
    lease = math.ceil(lease or 3600) + 2 }, Ticket)
  if (#self.line == 0 and has_room(self)) or not tasks.can_wait() then
    grant(self, ticket)
    return ticket
  end
  self.line[#self.line + 1] = ticket
  self.waited = self.waited + 1
  tasks.await(ticket)
  return ticket
end

-- gate:done(ticket): the command got its answer (or failed); the place goes to the next in
-- line. A limit lowered by a refusal grows back by one per finished command.
function Gate:done(ticket)
  release(self, ticket)
  local top = cap(self)
  if self.limit and top and self.limit < top then self.limit = self.limit + 1 end
  pump(self)
end

-- gate:refused(ticket, server_limit) → whether to wait in line again. The server was full:
-- it allows server_limit commands and ours still running fill it, so the limit drops to
-- those. Wait in line again only when one of ours will free a place (and the caller is a
-- task); otherwise someone else holds the places and the retry policy decides.
function Gate:refused(ticket, server_limit)
  self.refusals = self.refusals + 1
  if server_limit then self.server_limit = server_limit end
  release(self, ticket)
  local ours = self.running
  local top = cap(self) or ours
  self.limit = math.max(1, math.min(top, ours))
  pump(self)
  return ours > 0 and tasks.can_wait()
end

-- exec_gate.release_owner(owner): the work of owner (a scheduler) ended early (an nginx
-- request that was aborted): its places go back to the line and its waiting tickets leave it.
function M.release_owner(owner)
  for _, gate in pairs(gates) do
    for i = #gate.line, 1, -1 do
      local ticket = gate.line[i]
      if ticket.owner == owner then
        ticket.cancelled = true
        table.remove(gate.line, i)
      end
    end
    for ticket in pairs(gate.held) do
      if ticket.owner == owner then release(gate, ticket) end
    end
    pump(gate)
  end
end

-- Counters over every gate: commands in flight, waiting, ever queued, refusals seen.
function M.stats()
  local s = { running = 0, waiting = 0, queued = 0, refusals = 0 }
  for _, gate in pairs(gates) do
    s.running = s.running + gate.running
    s.waiting = s.waiting + #gate.line
    s.queued = s.queued + gate.waited
    s.refusals = s.refusals + gate.refusals
  end
  return s
end

return M
