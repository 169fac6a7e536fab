-- A raw file read written to a local file as its bytes arrive (files:download): the same
-- interface as the streaming exec's decoder (feed, reset, finish), so every transport hands it
-- the body piece by piece and nothing holds the whole file. The bytes go to a temporary file
-- beside the target, renamed over it once the answer is complete: a failed or interrupted
-- download leaves no partial file. An error answer's body is kept (bounded) for its message.
-- Lua 5.1-compatible.
local M = {}

local ERROR_BODY_MAX = 65536
local GC_EVERY = 4 * 1024 * 1024

local Sink = {}
Sink.__index = Sink

local counter = 0

-- A sink for local_path (its directory must exist and be writable).
function M.new(local_path)
  counter = counter + 1
  local tmp = string.format("%s.airlock-part-%d-%d", local_path, os.time(), counter)
  return setmetatable({ path = local_path, tmp = tmp }, Sink):reset()
end

function Sink:discard()
  if self.file then
    self.file:close()
    self.file = nil
  end
  if self.opened then
    os.remove(self.tmp)
    self.opened = false
  end
end

-- Forgets an earlier attempt of the same call (a retried 503, say).
function Sink:reset()
  self:discard()
  self.bytes = 0
  self.error_body = {}
  self.error_len = 0
  self.failure = nil
  return self
end

-- Never raises: a local write failure is kept and reported by finish.
function Sink:feed(chunk, status)
  if status ~= 200 then
    if self.error_len < ERROR_BODY_MAX then
      self.error_body[#self.error_body + 1] = chunk:sub(1, ERROR_BODY_MAX - self.error_len)
      self.error_len = self.error_len + #chunk
    end
    return
  end
  if self.failure then return end
  if not self.file then
    local f, err = io.open(self.tmp, "wb")
    if not f then
      self.failure = "Cannot write the local file " .. self.path .. ": " .. tostring(err)
      return
    end
    self.file, self.opened = f, true
  end
  local ok, err = self.file:write(chunk)
  if not ok then
    self.failure = "Cannot write the local file " .. self.path .. ": " .. tostring(err)
    return
  end
  self.bytes = self.bytes + #chunk
  -- the pieces are garbage at once; a collector step per few MiB keeps the process's peak
  -- flat on LuaJIT too (its pacing lets tens of MiB of them pile up otherwise)
  self.unswept = (self.unswept or 0) + #chunk
  if self.unswept >= GC_EVERY then
    self.unswept = 0
    collectgarbage("step", 0)
  end
end

-- The response as the call decodes it: a complete 200 renamed into place (body ""), an error
-- answer with its body; nil, message when the local file could not be written.
function Sink:finish(res)
  if res == nil or res.status == nil then
    self:discard()
    return res
  end
  if res.status ~= 200 then
    self:discard()
    res.body = table.concat(self.error_body)
    return res
  end
  if self.failure then
    self:discard()
    return nil, self.failure
  end
  if not self.file then   -- an empty file: no chunk arrived
    self:feed("", 200)
    if self.failure then return nil, self.failure end
  end
  local closed, cerr = self.file:close()
  self.file = nil
  if closed then closed, cerr = os.rename(self.tmp, self.path) end
  if not closed then
    self:discard()
    self.failure = "Cannot write the local file " .. self.path .. ": " .. tostring(cerr)
    return nil, self.failure
  end
  self.opened = false
  res.body = ""
  return res
end

return M
