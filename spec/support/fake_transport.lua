-- A scripted in-memory transport for unit specs (the transport interface of airlock.transport):
-- answer(request, transport) gives each response (or nil, failure). Inside a task, send
-- waits `polls` scheduler rounds before answering, like a transfer in flight; sleep records
-- the wait (and, inside a task, yields one round) instead of sleeping.
local tasks = require "airlock.tasks"

local M = {}

function M.new(answer, polls)
  local t = { name = "fake", sent = {}, slept = {}, steps = 0 }
  t.driver = { step = function() t.steps = t.steps + 1 end, completions = function() return t.steps end }
  local function rounds(n)
    local w = { left = n, driver = t.driver }
    function w.ready(self)
      self.left = self.left - 1
      return self.left < 0
    end
    tasks.await(w)
  end
  function t.send(self, request)
    self.sent[#self.sent + 1] = request
    return answer(request, self, function() rounds(polls or 1) end)
  end
  function t.sleep(self, seconds)
    self.slept[#self.slept + 1] = seconds
    rounds(0)
  end
  return t
end

-- A JSON answer.
function M.answer(status, body, headers)
  return { status = status, reason = "", headers = headers or {}, body = body or "{}" }
end

return M
