--- Agent tools: the three sandbox tools an LLM can call (write_file, read_file,
-- run_command), their definitions in OpenAI and Anthropic formats, and one function that
-- runs a tool call against a sandbox and always returns a text for the model.
--
--   local tools = require "airlock.tools"
--   request.tools = tools.openai_tools()        -- or tools.anthropic_tools()
--   local text = tools.handle_tool_call(sbx, call.name, call.arguments)
--
-- Names, parameters, schemas and result texts match the reference Python SDK
-- (airlock_sandbox.tools). Runs on Lua 5.1/LuaJIT through 5.4.
local cjson_safe = require "cjson.safe"

local M = {}

M.MAX_TOOL_OUTPUT_CHARS = 8000
M.TOOL_NAMES = { "write_file", "read_file", "run_command" }

-- The tool definitions, in the order the models see them. The JSON schemas have no empty
-- tables, so lua-cjson encodes `properties` as an object and `required` as an array.
local function definitions()
  return {
    {
      name = "write_file",
      description = "Create or overwrite a text file in the sandbox workspace.",
      parameters = {
        type = "object",
        properties = {
          path = { type = "string", description = "Path relative to the workspace, e.g. 'src/main.py'" },
          content = { type = "string", description = "Full file content" },
        },
        required = { "path", "content" },
      },
    },
    {
      name = "read_file",
      description = "Read a text file from the sandbox workspace.",
      parameters = {
        type = "object",
        properties = {
          path = { type = "string", description = "Path relative to the workspace" },
        },
        required = { "path" },
      },
    },
    {
      name = "run_command",
      description = "Run a shell command in an isolated Linux sandbox (bash, Python 3.11). "
        .. "Files in the workspace persist between commands; processes do not. "
        .. "Returns stdout, stderr and the exit code.",
      parameters = {
        type = "object",
        properties = {
          command = { type = "string", description = "Shell command, e.g. 'python3 -m pytest -q'" },
          timeout_seconds = { type = "integer", description = "1-60, default 15", minimum = 1, maximum = 60 },
        },
        required = { "command" },
      },
    },
  }
end

--- Tool definitions for the OpenAI Chat Completions `tools` field (a new table each call).
function M.openai_tools()
  local out = {}
  for i, d in ipairs(definitions()) do
    out[i] = {
      type = "function",
      ["function"] = { name = d.name, description = d.description, parameters = d.parameters },
    }
  end
  return out
end

--- Tool definitions for the Anthropic Messages API `tools` field (a new table each call).
function M.anthropic_tools()
  local out = {}
  for i, d in ipairs(definitions()) do
    out[i] = { name = d.name, description = d.description, input_schema = d.parameters }
  end
  return out
end

-- UTF-8 helpers. A character starts at every byte that is not a continuation byte
-- (0x80-0xBF); a stray continuation byte belongs to the character before it (or starts the
-- text). Invalid UTF-8 is therefore never split further than it already is.
local function is_start(text, i)
  if i == 1 then return true end
  local b = text:byte(i)
  return b < 0x80 or b > 0xBF
end

--- Number of characters (UTF-8 code points) in `text`.
function M.char_count(text)
  local n = 0
  for i = 1, #text do
    if is_start(text, i) then n = n + 1 end
  end
  return n
end

-- Byte position where character number `k` (1-based) starts; #text + 1 past the end.
local function char_offset(text, k)
  local n = 0
  for i = 1, #text do
    if is_start(text, i) then
      n = n + 1
      if n == k then return i end
    end
  end
  return #text + 1
end

--- Shortens `text` to `limit` characters (default 8000) keeping the head (2/5) and the tail
-- (3/5) around a marker that says how many characters were left out. Counts code points and
-- never cuts a multi-byte character. Text within the limit is returned unchanged.
function M.truncate(text, limit)
  if type(text) == "number" then text = tostring(text) end
  if type(text) ~= "string" then
    error("airlock.tools.truncate: text must be a string, got " .. type(text), 2)
  end
  if limit == nil then limit = M.MAX_TOOL_OUTPUT_CHARS end
  if type(limit) ~= "number" or limit < 0 or limit ~= math.floor(limit) then
    error("airlock.tools.truncate: limit must be a non-negative integer, got " .. tostring(limit), 2)
  end
  -- Fast path: a byte count within the limit means the character count is too.
  if #text <= limit then return text end
  local n = M.char_count(text)
  if n <= limit then return text end
  local head = math.floor(limit * 2 / 5)
  local tail = limit - head
  local head_end = char_offset(text, head + 1) - 1
  local tail_start = char_offset(text, n - tail + 1)
  return text:sub(1, head_end)
    .. string.format("\n\n... [TRUNCATED: %d characters omitted] ...\n\n", n - limit)
    .. text:sub(tail_start)
end

-- Error objects from the SDK are tables; find their class name and test their class
-- without depending on how errors.lua spells it internally (airlock.mcp uses these too).
local errors_ok, errors = pcall(require, "airlock.errors")
if not errors_ok or type(errors) ~= "table" then errors = nil end

local function class_name(err)
  if type(err) == "table" then
    local mt = getmetatable(err)
    local candidates = { err.name, err.class, mt and mt.__name }
    for i = 1, 3 do
      local v = candidates[i]
      if type(v) == "string" and v ~= "" then return v end
    end
  end
  return nil
end

-- The SDK's error classes (all SandboxError), for when airlock.errors cannot say.
local SANDBOX_CLASSES = {
  SandboxError = true, APIConnectionError = true, AuthenticationError = true,
  PermissionDeniedError = true, NotFoundError = true, QuotaExceededError = true,
  ValidationError = true, RateLimitError = true, CapacityError = true, CommandError = true,
  FileNotFoundError = true,
}

local function is_a(err, class)
  if type(err) ~= "table" then return false end
  if errors and type(errors.is) == "function" then
    local ok, yes = pcall(errors.is, err, class)
    if ok and yes then return true end
  end
  local name = class_name(err)
  if class == "SandboxError" then return SANDBOX_CLASSES[name] == true end
  return name == class
end

-- For airlock.mcp, not public (hence the underscore): the class name of an error object (its
-- name, class or metatable __name) or nil, and whether err is an SDK error of class
-- ("SandboxError" matches every SDK error class).
M._error_class = class_name
M._is_error = is_a

local function message_of(err)
  if type(err) == "table" then
    if err.message ~= nil then return tostring(err.message) end
    local ok, s = pcall(tostring, err)
    if ok then return s end
  end
  return tostring(err)
end

local function is_null(v)
  return v == nil or v == cjson_safe.null
end

-- Python's int() of a JSON value, as the reference does with timeout_seconds:
-- integers and floats (truncated), booleans, and strings of an integer; otherwise a
-- ValueError (bad string) or TypeError (null, object, array).
local function to_int(v)
  if type(v) == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      return nil, "ValueError", "cannot convert float " .. tostring(v) .. " to integer"
    end
    return v >= 0 and math.floor(v) or math.ceil(v)
  elseif type(v) == "boolean" then
    return v and 1 or 0
  elseif type(v) == "string" then
    local s = v:match("^%s*([+-]?%d+)%s*$")
    if s then return tonumber(s) end
    return nil, "ValueError", string.format("invalid literal for int() with base 10: '%s'", v)
  end
  local kind = is_null(v) and "NoneType" or (type(v) == "table" and "dict" or type(v))
  return nil, "TypeError",
    "int() argument must be a string, a bytes-like object or a real number, not '" .. kind .. "'"
end

-- Decodes the arguments: JSON text, a table, or nil. Returns the table or an error text.
local function decode_arguments(arguments)
  if arguments == nil or arguments == cjson_safe.null then return {} end
  if type(arguments) == "string" then
    if not arguments:find("%S") then return {} end
    local value, err = cjson_safe.decode(arguments)
    if value == nil and err then
      return nil, "Error: tool arguments were not valid JSON: " .. tostring(err)
    end
    -- lua-cjson decodes both {} and [] to a table: an object is what starts with "{".
    if type(value) ~= "table" or not arguments:match("^%s*{") then
      return nil, "Error: tool arguments must be a JSON object."
    end
    return value
  end
  if type(arguments) == "table" then
    local array_mt = cjson_safe.array_mt
    if arguments[1] ~= nil or (array_mt ~= nil and getmetatable(arguments) == array_mt) then
      return nil, "Error: tool arguments must be a JSON object."
    end
    return arguments
  end
  return nil, "Error: tool arguments must be a JSON object."
end

local REQUIRED = {
  write_file = { "path", "content" },
  read_file = { "path" },
  run_command = { "command" },
}

-- A failure that is not a SandboxError, reported as `failed (<Class>)`.
local Failure = {}
Failure.__index = Failure

local function fail(class, message)
  error(setmetatable({ class = class, message = message }, Failure), 0)
end

local RUNNERS = {}

function RUNNERS.write_file(sandbox, args)
  sandbox.files:write(args.path, args.content)
  return string.format("Wrote %d characters to %s", M.char_count(args.content), args.path)
end

function RUNNERS.read_file(sandbox, args)
  return sandbox.files:read(args.path)
end

function RUNNERS.run_command(sandbox, args)
  local timeout = 15
  if args.timeout_seconds ~= nil then
    local t, class, msg = to_int(args.timeout_seconds)
    if t == nil then fail(class, msg) end
    timeout = t
  end
  local result = sandbox:run(args.command, { timeout = timeout })
  return result.output
end

--- Runs the tool `name` with `arguments` (JSON text, a table, or nil) on `sandbox` and
-- returns the text to send back to the model. Never raises: every failure becomes an
-- `Error...` text the model can read and act on.
function M.handle_tool_call(sandbox, name, arguments)
  local ok, text = pcall(function()
    local args, problem = decode_arguments(arguments)
    if not args then return problem end
    local required = REQUIRED[name]
    if not required then
      return string.format("Error: unknown tool '%s'. Available: ['write_file', 'read_file', 'run_command']",
        tostring(name))
    end
    for _, key in ipairs(required) do
      if is_null(args[key]) then
        return string.format("Error: missing required argument '%s' for %s.", key, name)
      end
      if type(args[key]) ~= "string" then
        return string.format("Error: argument '%s' for %s must be a string, not %s.", key, name,
          type(args[key]) == "table" and "an object or array" or ("a " .. type(args[key])))
      end
    end
    local run_ok, result = pcall(RUNNERS[name], sandbox, args)
    if run_ok then
      if type(result) ~= "string" then result = tostring(result) end
      return M.truncate(result)
    end
    local err = result
    if getmetatable(err) == Failure then
      return string.format("Error: %s failed (%s): %s", name, err.class, err.message)
    elseif is_a(err, "FileNotFoundError") then
      return "Error: file not found: " .. args.path
    elseif is_a(err, "SandboxError") then
      return string.format("Error from sandbox (%s): %s", class_name(err) or "SandboxError", message_of(err))
    end
    return string.format("Error: %s failed (%s): %s", name, class_name(err) or "LuaError", message_of(err))
  end)
  if ok then return text end
  return "Error: " .. tostring(name) .. " failed (LuaError): " .. message_of(text)
end

return M
