-- The result of sbx:run(): the reference SDK's CommandResult (contract 3.5).
local errors = require "airlock.errors"

local M = {}

local Result = {}
Result.__name = "airlock.Result"
M.Result = Result

function Result.__index(self, key)
  if key == "ok" then
    return self.exit_code == 0 and not self.timed_out and not self.oom_killed
  end
  return Result[key]
end

function Result.__tostring(self)
  return self.output
end

-- Python's repr() of a str (for the CommandError message): single quotes unless the text
-- contains a single quote and no double quote; escapes backslash, the quote and controls.
function M.python_repr(s)
  local q = "'"
  if s:find("'", 1, true) and not s:find('"', 1, true) then q = '"' end
  local named = { ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
  local out = s:gsub("[%c\\'\"]", function(c)
    if named[c] then return named[c] end
    if c == q then return "\\" .. c end
    if c == "'" or c == '"' then return c end
    return string.format("\\x%02x", c:byte())
  end)
  return q .. out .. q
end

local function new(fields)
  return setmetatable({
    command = fields.command or "",
    stdout = fields.stdout or "",
    stderr = fields.stderr or "",
    exit_code = fields.exit_code,
    timed_out = fields.timed_out or false,
    oom_killed = fields.oom_killed or false,
    warnings = fields.warnings or {},
    output = fields.output or "",
    stdout_file = fields.stdout_file,   -- ours (spill): nil unless asked for
    stderr_file = fields.stderr_file,
  }, Result)
end
M.new = new

local MARKERS = { STDOUT = true, STDERR = true, WARNING = true, TIMEOUT = true, ["EXIT CODE"] = true }

local function split_lines(text)
  local lines, start = {}, 1
  while true do
    local i = text:find("\n", start, true)
    if not i then
      lines[#lines + 1] = text:sub(start)
      return lines
    end
    lines[#lines + 1] = text:sub(start, i - 1)
    start = i + 1
  end
end

local function strip(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- Parse the text-only output of old servers exactly as the Python SDK does (contract 3.5).
function M.parse_text(command, output)
  local sections = { STDOUT = {}, STDERR = {} }
  local current, warnings, exit_code, timed_out = nil, {}, -1, false
  for _, line in ipairs(split_lines(output)) do
    local marker, text = line:match("^%[([%u ]+)%]:(.*)$")
    if marker and MARKERS[marker] then
      text = text:gsub("^%s", "", 1)
      current = nil
      if marker == "STDOUT" or marker == "STDERR" then
        current = marker
      elseif marker == "WARNING" then
        warnings[#warnings + 1] = text
      elseif marker == "TIMEOUT" then
        warnings[#warnings + 1] = text
        timed_out = true
      else
        local t = strip(text)
        if t:match("^%-?%d+$") then exit_code = tonumber(t) end
      end
    elseif current then
      local lines = sections[current]
      lines[#lines + 1] = line
    end
  end
  local function joined(lines)
    if #lines == 0 then return "" end
    return table.concat(lines, "\n") .. "\n"
  end
  local oom = false
  for _, w in ipairs(warnings) do
    if w:find("Memory limit", 1, true) then oom = true end
  end
  return new({
    command = command, stdout = joined(sections.STDOUT), stderr = joined(sections.STDERR),
    exit_code = exit_code, timed_out = timed_out, oom_killed = oom, warnings = warnings,
    output = output,
  })
end

-- Build a result from the decoded exec response: structured when it has exit_code.
function M.from_response(data)
  data = data or {}
  if data.exit_code ~= nil then
    local warnings = {}
    for i, w in ipairs(type(data.warnings) == "table" and data.warnings or {}) do warnings[i] = w end
    return new({
      command = data.command, stdout = data.stdout, stderr = data.stderr,
      exit_code = data.exit_code, timed_out = data.timed_out == true,
      oom_killed = data.oom_killed == true, warnings = warnings, output = data.output,
      -- ours, with spill = true: where the whole output went in the workspace
      stdout_file = data.stdout_file, stderr_file = data.stderr_file,
    })
  end
  return M.parse_text(data.command or "", data.output or "")
end

-- result:check() → self when ok, else raises CommandError (with .result).
function Result:check()
  if self.ok then return self end
  local reason
  if self.timed_out then
    reason = "timed out"
  elseif self.oom_killed then
    reason = "was killed for using too much memory"
  else
    reason = "exited with code " .. tostring(self.exit_code)
  end
  errors.raise("CommandError",
    "Command " .. M.python_repr(self.command) .. " " .. reason .. ".\n" .. self.output,
    { result = self })
end

return M
