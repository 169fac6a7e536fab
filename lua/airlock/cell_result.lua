-- The result of k:run(code): one cell of a kernel (airlockd's execute answer, docs/api.md
-- "Kernels"), with `text` (its last result's text/plain: the last expression's value) and
-- `tostring(r)`, the LLM-ready text in the shape of a command's output.
local errors = require "airlock.errors"
local json = require "airlock.internal.json"

local M = {}

local CellResult = {}
CellResult.__name = "airlock.CellResult"
M.CellResult = CellResult

function CellResult.__index(self, key)
  if key == "ok" then
    return self.error == nil and not self.timed_out and not self.oom_killed
  end
  return CellResult[key]
end

local function present(v)
  if v == nil or v == json.null then return nil end
  return v
end

local function strip(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- The bytes base64 text stands for.
local function base64_bytes(b64)
  local n = #b64:gsub("[^%w%+/]", "")
  return math.floor(n * 3 / 4)
end

-- How a result reads in the text: images and other binary forms by kind and size, else its
-- text/plain (a table's HTML has its plain form beside it).
local function result_text(data)
  local notes = {}
  for _, mime in ipairs({ "image/png", "image/jpeg", "image/svg+xml" }) do
    local v = data[mime]
    if type(v) == "string" then
      local size = mime == "image/svg+xml" and #v or base64_bytes(v)
      notes[#notes + 1] = string.format("[%s: %d bytes]", mime, size)
    end
  end
  if #notes > 0 then return table.concat(notes, "\n") end
  if type(data["text/plain"]) == "string" then return data["text/plain"] end
  for mime, v in pairs(data) do
    if type(v) == "string" then notes[#notes + 1] = string.format("[%s: %d bytes]", mime, #v) end
  end
  table.sort(notes)
  return table.concat(notes, "\n")
end

-- The text form: [STDOUT]:, [STDERR]:, a [RESULT]: per result, [ERROR]: (the traceback),
-- [WARNING]:, [TIMEOUT]:, [OUT OF MEMORY]:, [KERNEL RESTARTED]:, [EXECUTION COUNT]:.
local function format(r)
  local parts = {}
  local function part(label, body) parts[#parts + 1] = label .. body end
  if strip(r.stdout) ~= "" then part("[STDOUT]:\n", strip(r.stdout)) end
  if strip(r.stderr) ~= "" then part("[STDERR]:\n", strip(r.stderr)) end
  for _, data in ipairs(r.results) do part("[RESULT]:\n", result_text(data)) end
  if r.error then
    local tb = r.error.traceback
    if type(tb) ~= "string" or tb == "" then tb = tostring(r.error.name) .. ": " .. tostring(r.error.value) end
    part("[ERROR]:\n", strip(tb))
  end
  for _, w in ipairs(r.warnings) do part("[WARNING]: ", tostring(w)) end
  if r.timed_out then
    part("[TIMEOUT]: ", r.kernel_restarted
      and "The cell did not stop when interrupted; the kernel was restarted and its state is gone."
      or "The cell was interrupted at its time limit; the kernel's state is kept.")
  end
  if r.oom_killed then
    part("[OUT OF MEMORY]: ", "The kernel ran out of memory and was restarted; its state is gone.")
  elseif r.kernel_restarted and not r.timed_out then
    part("[KERNEL RESTARTED]: ", "The kernel was restarted before this cell; earlier state is gone.")
  end
  part("[EXECUTION COUNT]: ", tostring(r.execution_count or 0))
  return table.concat(parts, "\n")
end

-- A result from the decoded execute answer (code: the cell's source).
function M.from_response(code, data)
  data = type(data) == "table" and data or {}
  local results = {}
  for i, v in ipairs(type(data.results) == "table" and data.results or {}) do results[i] = v end
  local warnings = {}
  for i, w in ipairs(type(data.warnings) == "table" and data.warnings or {}) do warnings[i] = w end
  local err = present(data.error)
  local last = results[#results]
  local r = setmetatable({
    code = code,
    stdout = type(data.stdout) == "string" and data.stdout or "",
    stderr = type(data.stderr) == "string" and data.stderr or "",
    results = results,
    text = last and type(last["text/plain"]) == "string" and last["text/plain"] or nil,
    error = type(err) == "table" and err or nil,
    execution_count = present(data.execution_count),
    timed_out = data.timed_out == true,
    oom_killed = data.oom_killed == true,
    kernel_restarted = data.kernel_restarted == true,
    duration_ms = present(data.duration_ms),
    warnings = warnings,
  }, CellResult)
  r.output = format(r)
  return r
end

function CellResult.__tostring(self)
  return self.output
end

-- r:images([mime]) → list of the results' images as bytes-free records {mime =, base64 =}
-- (image/png by default; "*" for every image kind), in order.
function CellResult:images(mime)
  local out = {}
  for _, data in ipairs(self.results) do
    for _, m in ipairs({ "image/png", "image/jpeg" }) do
      if (mime == nil and m == "image/png") or mime == "*" or mime == m then
        if type(data[m]) == "string" then out[#out + 1] = { mime = m, base64 = data[m] } end
      end
    end
  end
  return out
end

-- r:check() → self when ok, else raises CommandError (with .result): the error's name and
-- value, or why the cell stopped, then the text form.
function CellResult:check()
  if self.ok then return self end
  local reason
  if self.timed_out then
    reason = "timed out"
  elseif self.oom_killed then
    reason = "ran out of memory"
  else
    reason = "raised " .. tostring(self.error.name) .. ": " .. tostring(self.error.value)
  end
  errors.raise("CommandError", "Cell " .. tostring(self.execution_count) .. " " .. reason .. ".\n"
    .. self.output, { result = self })
end

return M
