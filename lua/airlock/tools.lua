--- Agent tools: the four sandbox tools an LLM can call (write_file, read_file,
-- run_command, and run_python: one kernel per sandbox, its state kept between calls), their
-- definitions in OpenAI and Anthropic formats, and one function that
-- runs a tool call against a sandbox and always returns a text for the model.
--
--   local tools = require "airlock.tools"
--   request.tools = tools.openai_tools()        -- or tools.anthropic_tools()
--   local text = tools.handle_tool_call(sbx, call.name, call.arguments)
--
-- Ours (airlockd), for agents that branch: the same tools and snapshot / restore, on a box
-- that follows the sandbox restore switches to.
--
--   local box = tools.branching(sbx)
--   request.tools = box:openai_tools()          -- or box:anthropic_tools()
--   local text = box:handle_tool_call(call.name, call.arguments)   -- box.sandbox: the current one
--   box:close()                                 -- deletes the sandboxes restore made
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
local BRANCH = "branch"

M.MAX_TOOL_OUTPUT_CHARS = text.MAX_TOOL_OUTPUT_CHARS
M.TOOL_NAMES = {}
for i, t in ipairs(catalogue.tools(SURFACE)) do M.TOOL_NAMES[i] = t.name end

--- Number of characters (UTF-8 code points) in `text`.
M.char_count = text.char_count

--- Shortens `text` to `limit` characters (default 8000) keeping the head (2/5) and the tail
-- (3/5) around a marker; counts code points and never cuts a multi-byte character.
M.truncate = text.truncate

local function openai_tools(surface)
  local out = {}
  for i, t in ipairs(catalogue.tools(surface)) do
    out[i] = {
      type = "function",
      ["function"] = { name = t.name, description = t[surface].description, parameters = catalogue.schema(t, surface) },
    }
  end
  return out
end

local function anthropic_tools(surface)
  local out = {}
  for i, t in ipairs(catalogue.tools(surface)) do
    out[i] = { name = t.name, description = t[surface].description, input_schema = catalogue.schema(t, surface) }
  end
  return out
end

--- Tool definitions for the OpenAI Chat Completions `tools` field (a new table each call).
function M.openai_tools() return openai_tools(SURFACE) end

--- Tool definitions for the Anthropic Messages API `tools` field (a new table each call).
function M.anthropic_tools() return anthropic_tools(SURFACE) end

-- Decodes the arguments: JSON text, a table, or nil. Returns the table or an error text.
local function decode_arguments(arguments, texts)
  texts = texts or TEXTS
  if arguments == nil or arguments == json.null then return {} end
  if type(arguments) == "string" then
    if not arguments:find("%S") then return {} end
    local value, err = json.decode(arguments)
    if value == nil and err then return nil, string.format(texts.not_json, tostring(err)) end
    -- lua-cjson decodes both {} and [] to a table: an object is what starts with "{".
    if type(value) ~= "table" or not arguments:match("^%s*{") then return nil, texts.not_object end
    return value
  end
  if type(arguments) == "table" then
    if json.is_array(arguments) then return nil, texts.not_object end
    return arguments
  end
  return nil, texts.not_object
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

-- handle_tool_call on a surface; server: what a tool that switches sandboxes calls (restore).
local function handle(surface, sandbox, name, arguments, server)
  local texts = catalogue.TEXTS[surface]
  local ok, result = tasks.pcall(function()
    local args, problem = decode_arguments(arguments, texts)
    if not args then return problem end
    local tool = catalogue.find(surface, name)
    if not tool then return string.format(texts.unknown, tostring(name)) end
    local checked
    checked, problem = catalogue.check(tool, surface, args)
    if not checked then return problem end
    local run_ok, out = tasks.pcall(catalogue.run, tool, surface, sandbox, checked, server)
    if not run_ok then return error_text(name, checked, out) end
    if type(out) ~= "string" then out = tostring(out) end
    return text.truncate(out)
  end)
  if ok then return result end
  return string.format(texts.failed, tostring(name), "LuaError", text.message_of(result))
end

--- Runs the tool `name` with `arguments` (JSON text, a table, or nil) on `sandbox` and
-- returns the text to send back to the model. Never raises: every failure becomes an
-- `Error...` text the model can read and act on.
function M.handle_tool_call(sandbox, name, arguments)
  return handle(SURFACE, sandbox, name, arguments)
end

---------------------------------------------------------------- branching (ours)

local Box = {}
Box.__index = Box
Box.__name = "airlock.tools.Box"

--- tools.branching(sbx) → a box whose tools run on box.sandbox (sbx at first): the module's
-- (write_file, read_file, run_command, run_python), snapshot and restore. restore makes a new
-- sandbox from a snapshot and the next calls run there; the box deletes the sandboxes it made
-- when the next restore replaces them and at box:close() (sbx stays the caller's).
function M.branching(sbx)
  if type(sbx) ~= "table" or type(sbx.snapshot) ~= "function" then
    error("airlock.tools.branching: expected a Sandbox, got " .. type(sbx), 2)
  end
  return setmetatable({ sandbox = sbx, original = sbx }, Box)
end

function Box.openai_tools(_) return openai_tools(BRANCH) end
function Box.anthropic_tools(_) return anthropic_tools(BRANCH) end

function Box:handle_tool_call(name, arguments)
  return handle(BRANCH, self.sandbox, name, arguments, self)
end

-- The restore tool: a new sandbox from the snapshot replaces the current one (deleted when the
-- box made it; a failed restore keeps it).
function Box:restore(snapshot_id)
  local new = self.original:from_snapshot(snapshot_id)
  local old = self.sandbox
  self.sandbox = new
  if old ~= self.original then tasks.pcall(old.close, old) end
  return new
end

--- Deletes the sandbox restore made, if any (box.sandbox is the original one again).
function Box:close()
  local current = self.sandbox
  self.sandbox = self.original
  if current ~= self.original then tasks.pcall(current.close, current) end
  return true
end

return M
