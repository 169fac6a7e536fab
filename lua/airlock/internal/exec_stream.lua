-- The SDK side of the streaming exec (an airlock extension, docs/api.md "Streaming exec"):
-- decodes the NDJSON events of POST .../exec with "stream": true as their bytes arrive,
-- calls on_stdout / on_stderr with each piece, and keeps the final event. A kernel's
-- streamed execute (docs/api.md "Kernels") has the same framing, plus `display` events
-- (a result's mime data, to on_result). A response that is
-- not a stream (an error status, or a server without the extension answering the plain
-- JSON) is kept whole, as the plain route's body. Lua 5.1-compatible.
local json = require "airlock.internal.json"

local M = {}

local Decoder = {}
Decoder.__index = Decoder

-- A decoder for one call: on_stdout(text), on_stderr(text) and on_result(data) (any may be nil).
function M.new(on_stdout, on_stderr, on_result)
  return setmetatable({ on_stdout = on_stdout, on_stderr = on_stderr, on_result = on_result }, Decoder):reset()
end

-- Forgets what an earlier attempt of the same call received (a retried 503, say).
function Decoder:reset()
  self.mode = nil       -- nil until known, "events", or "raw"
  self.pending = {}     -- raw: the whole body; events: the start of an unfinished line
  self.final = nil
  self.bad = nil
  return self
end

function Decoder:event(line)
  local ev = json.decode(line)
  if type(ev) ~= "table" or type(ev.type) ~= "string" then
    self.bad = self.bad or line:sub(1, 80)
    return
  end
  if self.final then return end
  local kind = ev.type
  if kind == "stdout" and self.on_stdout and type(ev.data) == "string" then
    self.on_stdout(ev.data)
  elseif kind == "stderr" and self.on_stderr and type(ev.data) == "string" then
    self.on_stderr(ev.data)
  elseif kind == "display" and self.on_result and type(ev.data) == "table" then
    self.on_result(ev.data)
  elseif kind == "result" or kind == "error" then
    self.final = ev
  end
end

-- Takes the next piece of the body (status: the answer's HTTP status, when known).
function Decoder:feed(chunk, status)
  local pending = self.pending
  pending[#pending + 1] = chunk
  if self.mode == nil and status and status ~= 200 then self.mode = "raw" end
  if self.mode == "raw" or not chunk:find("\n", 1, true) then return end
  local text = table.concat(pending)
  local start = 1
  while true do
    local nl = text:find("\n", start, true)
    if not nl then break end
    local line = text:sub(start, nl - 1)
    if self.mode == nil then
      -- the first line says which: an event object, or the plain answer of another server
      local first = json.decode(line)
      if type(first) ~= "table" or type(first.type) ~= "string" then
        self.mode = "raw"
        self.pending = { text }
        return
      end
      self.mode = "events"
    end
    self:event(line)
    start = nl + 1
  end
  self.pending = { text:sub(start) }
end

-- The response the call decodes as the plain route's, once the transport is done: the final
-- result as its body, an error event as the error answer it stands for; nil, message when
-- the stream ended without a final event (the connection dropped).
function Decoder:finish(res)
  if res == nil or res.status == nil then return res end
  if self.mode ~= "events" then
    res.body = table.concat(self.pending)
    return res
  end
  local final = self.final
  if final and final.type == "result" and type(final.result) == "table" then
    res.body = json.encode(final.result)
    return res
  end
  if final and final.type == "error" then
    return { status = tonumber(final.status) or 500, reason = "", headers = {},
             body = json.encode({ detail = final.detail }) }
  end
  if self.bad then return nil, "the server's stream has a line that is not an event: " .. self.bad end
  return nil, "the stream ended before the command's result (the connection dropped)"
end

return M
