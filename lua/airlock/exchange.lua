-- One API call over a transport: the engine builds the request, the transport sends it, the
-- engine's retry policy decides whether and when to send it again (the transport only
-- sleeps), the engine decodes the answer. Commands (exec, import) first take a place in
-- their server's line (exec_gate.lua). Also the DELETEs of the queued sessions
-- (dropped_sessions.lua): each reports back to the queue, which keeps a session until its
-- DELETE succeeded or answered 404.
local engine = require "airlock.engine"
local errors = require "airlock.errors"
local exec_gate = require "airlock.exec_gate"
local dropped = require "airlock.dropped_sessions"
local tasks = require "airlock.tasks"
local transports = require "airlock.transport"

local M = {}

local counters = { requests = 0, retries = 0, requeued = 0 }

-- Sends request (engine.build's shape; max_retries is the policy's) and retries per the
-- policy: response | nil, failure. A failure with tls set is never retried.
function M.perform(transport, request, gate)
  local attempt = 0
  while true do
    local ticket = gate and gate:acquire(request.timeout_ms and request.timeout_ms / 1000)
    counters.requests = counters.requests + 1
    if request.on_attempt then request.on_attempt() end
    local ok, res, failure = tasks.pcall(transport.send, transport, request)
    if not ok then
      if ticket then gate:done(ticket) end
      error(res, 0)
    end
    local server_limit = ticket and res and engine.concurrency_limit(res)
    local again = false
    if server_limit then
      again = gate:refused(ticket, server_limit)
      if again then counters.requeued = counters.requeued + 1 end
    elseif ticket then
      gate:done(ticket)
    end
    if not again then
      local wait
      if not (failure and failure.tls) and engine.may_retry(res) then
        wait = engine.retry_wait({
          attempt = attempt, max_retries = request.max_retries, method = request.method,
          status = res and res.status, retry_after = res and res.headers and res.headers["retry-after"],
        })
      end
      if wait == nil then return res, failure end
      counters.retries = counters.retries + 1
      transport:sleep(wait)
      attempt = attempt + 1
    end
  end
end

-- Whether err says the session is gone already (the DELETE's 404).
local function gone(err)
  return type(err) == "table" and err.status == 404
end

-- Sends the DELETE of one queued session (dropped_sessions item) and reports to the queue:
-- true | false, error object, whether it stays queued (false: left to the server's idle
-- TTL). opts: engine.build's (default: a short timeout and no retry: the queue's backoff is
-- the retry, so a due DELETE never sleeps inside the caller's next call).
function M.delete_item(item, opts)
  local s = item.settings
  local ok, res, failure = tasks.pcall(function()
    local request = engine.build(s, "DELETE", engine.session_path(item.id), nil,
      opts or { timeout = math.min(s.timeout, 10), max_retries = 0 })
    return M.perform(transports.resolve(s.transport), request)
  end)
  local deleted, err
  if ok then
    deleted, err = engine.decode(s, res, failure)
  else
    err = errors.is(res, "SandboxError") and res or errors.new("SandboxError", tostring(res))
  end
  if deleted or gone(err) then
    dropped.done(item)
    return true
  end
  return false, err, dropped.failed(item)
end

local function delete_quietly(item)
  M.delete_item(item)
end

-- Sends the DELETE of every queued session that is due (all: every one not in flight).
-- wait: return when they are answered (blocking, or yielding inside a task); else each runs
-- as a background task of the current scheduler (poll). Failures stay queued for a later
-- try. Returns how many are gone now (waiting) or were sent (background).
function M.delete_dropped(wait, all)
  local items = dropped.take(all)
  local gone_now = 0
  for _, item in ipairs(items) do
    if wait then
      if M.delete_item(item) then gone_now = gone_now + 1 end
    else
      tasks.current():spawn_background(delete_quietly, item)
    end
  end
  return wait and gone_now or #items
end

-- Queues the sessions in items ({id =, settings =} each, e.g. a host's request that ended
-- with sessions open) and sends their DELETEs as delete_dropped does. Returns how many.
function M.delete_sessions(items, wait)
  local held = {}
  for i, item in ipairs(items) do held[i] = dropped.hold(item.id, item.settings) end
  for _, item in ipairs(held) do
    if wait then
      M.delete_item(item)
    else
      tasks.current():spawn_background(delete_quietly, item)
    end
  end
  return #items
end

-- One call, start to finish: true, data | false, error object. opts: engine.build's, plus
-- command = true for exec and import (they wait in the server's line).
-- opts.stream: a decoder that gets the body as it arrives (the streaming exec's, or a
-- download's file sink): feed(chunk, status), reset() per attempt, finish(res).
function M.call(settings, method, path, body, opts)
  M.delete_dropped(true)   -- the queued sessions that are due first (usually none: no walk)
  local request = engine.build(settings, method, path, body, opts)
  local gate = opts and opts.command and exec_gate.for_settings(settings) or nil
  local decoder = opts and opts.stream
  if decoder then
    request.on_chunk = function(chunk, status) decoder:feed(chunk, status) end
    request.on_attempt = function() decoder:reset() end
  end
  local res, failure = M.perform(transports.resolve(settings.transport), request, gate)
  if decoder then   -- also after a failure: a download's temporary file goes
    local message
    res, message = decoder:finish(res)
    if not res and message then failure = { message = message } end
  end
  return engine.decode(settings, res, failure, opts and opts.raw_response)
end

-- Counters: requests sent, retries, commands sent again after a full server.
function M.stats()
  return { requests = counters.requests, retries = counters.retries, requeued = counters.requeued }
end

return M
