--- Agent tools: the four sandbox tools an LLM can call (write_file, read_file,
-- run_command, and run_python: one kernel per sandbox, its state kept between calls), their
-- definitions in OpenAI and Anthropic formats, and one function that
-- runs a tool call against a sandbox and always returns a text for the model.
--
--   local tools = require "airlock.tools"
--   request.tools = tools.openai_tools()        -- or tools.anthropic_tools()
--   local text = tools.handle_tool_call(sbx, call.name, call.arguments)
--
-- Names, parameters, schemas and result texts of the first three match the reference Python
-- SDK (airlock_sandbox.tools); they live in the agent catalogue (airlock.internal.agent.catalogue), shared
-- with the MCP server. Runs on Lua 5.1/LuaJIT through 5.4, also inside airlock.spawn tasks.
local json = require "airlock.internal.json"
local catalogue = require "airlock.internal.agent.catalogue"
local text = require "airlock.internal.agent.text"
local tasks = require "airlock.tasks"

local M = {}

local SURFACE = "sdk"
local TEXTS = catalogue.TEXTS.sdk

M.MAX_TOOL_OUTPUT_CHARS = text.MAX_TOOL_OUTPUT_CHARS
M.TOOL_NAMES = {}
for i, t in ipairs(catalogue.tools(SURFACE)) do M.TOOL_NAMES[i] = t.name end

--- Number of characters (UTF-8 code points) in `text`.
M.char_count = text.char_count

--- Shortens `text` to `limit` characters (default 8000) keeping the head (2/5) and the tail
-- (3/5) around a marker; counts code points and never cuts a multi-byte character.
M.truncate = text.truncate

--- Tool definitions for the OpenAI Chat Completions `tools` field (a new table each call).
function M.openai_tools()
  local out = {}
  for i, t in ipairs(catalogue.tools(SURFACE)) do
    out[i] = {
      type = "function",
      ["function"] = { name = t.name, description = t.sdk.description, parameters = catalogue.schema(t, SURFACE) },
    }
  end
  return out
end

--- Tool definitions for the Anthropic Messages API `tools` field (a new table each call).
function M.anthropic_tools()
  local out = {}
  for i, t in ipairs(catalogue.tools(SURFACE)) do
    out[i] = { name = t.name, description = t.sdk.description, input_schema = catalogue.schema(t, SURFACE) }
  end
  return out
end

-- Decodes the arguments: JSON text, a table, or nil. Returns the table or an error text.
local function decode_arguments(arguments)
  if arguments == nil or arguments == json.null then return {} end
  if type(arguments) == "string" then
    if not arguments:find("%S") then return {} end
    local value, err = json.decode(arguments)
    if value == nil and err then return nil, string.format(TEXTS.not_json, tostring(err)) end
    -- lua-cjson decodes both {} and [] to a table: an object is what starts with "{".
    if type(value) ~= "table" or not arguments:match("^%s*{") then return nil, TEXTS.not_object end
    return value
  end
  if type(arguments) == "table" then
    if json.is_array(arguments) then return nil, TEXTS.not_object end
    return arguments
  end
  return nil, TEXTS.not_object
end

-- The text for an error a tool raised.
local function error_text(name, args, err)
  if getmetatable(err) == catalogue.Failure then
    return string.format(TEXTS.failed, name, err.class, err.message)
  elseif text.is_error(err, "FileNotFoundError") then
    return string.format(TEXTS.not_found, args.path)
  elseif text.is_error(err, "SandboxError") then
    return string.format(TEXTS.sandbox_error, text.error_class(err) or "SandboxError", text.message_of(err))
  end
  return string.format(TEXTS.failed, name, text.error_class(err) or "LuaError", text.message_of(err))
end

--- Runs the tool `name` with `arguments` (JSON text, a table, or nil) on `sandbox` and
-- returns the text to send back to the model. Never raises: every failure becomes an
-- `Error...` text the model can read and act on.
function M.handle_tool_call(sandbox, name, arguments)
  local ok, result = tasks.pcall(function()
    local args, problem = decode_arguments(arguments)
    if not args then return problem end
    local tool = catalogue.find(SURFACE, name)
    if not tool then return string.format(TEXTS.unknown, tostring(name)) end
    local checked
    checked, problem = catalogue.check(tool, SURFACE, args)
    if not checked then return problem end
    local run_ok, out = tasks.pcall(catalogue.run, tool, SURFACE, sandbox, checked)
    if not run_ok then return error_text(name, checked, out) end
    if type(out) ~= "string" then out = tostring(out) end
    return text.truncate(out)
  end)
  if ok then return result end
  return string.format(TEXTS.failed, tostring(name), "LuaError", text.message_of(result))
end

return M
