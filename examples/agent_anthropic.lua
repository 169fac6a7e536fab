-- An agent on the Anthropic Messages API: the model gets the three sandbox tools
-- (write_file, read_file, run_command), and this loop runs its tool_use blocks in an Airlock
-- sandbox and sends back tool_result blocks until the model ends its turn. The task: make
-- the failing test in the workspace pass. Prints a transcript; exits 0 when the model
-- finished and the tests pass.
--
--   ANTHROPIC_API_KEY=sk-ant-... SANDBOX_API_URL=... SANDBOX_API_KEY=... lua5.4 examples/agent_anthropic.lua
--
-- Settings: ANTHROPIC_API_KEY (required), ANTHROPIC_BASE_URL (default
-- https://api.anthropic.com), ANTHROPIC_MODEL (default claude-sonnet-4-5), AGENT_MAX_STEPS
-- (default 12), and the sandbox's SANDBOX_API_URL / SANDBOX_API_KEY. Runs on Lua
-- 5.1/LuaJIT too (airlock.with, no <close>).
-- The task, its workspace, the transcript and the final check are shared with the other
-- agent example: examples/agent_task.lua, next to this file.
package.path = (arg and arg[0] or ""):match("^(.-)[^/]*$") .. "?.lua;" .. package.path
local task = require "agent_task"
local tools = require "airlock.tools"
local http = require "airlock.http"
local cjson = require "cjson"

local env, show, abort = task.env, task.show, task.abort
local function fail(message) task.fail("agent_anthropic", message) end

local API_KEY = env("ANTHROPIC_API_KEY") or fail("set ANTHROPIC_API_KEY")
local BASE_URL = env("ANTHROPIC_BASE_URL", "https://api.anthropic.com"):gsub("/+$", "")
local MODEL = env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
local MAX_STEPS = tonumber(env("AGENT_MAX_STEPS", "12")) or fail("AGENT_MAX_STEPS must be a number")

-- One Messages API call; returns the message.
local function create_message(messages)
  local status, data = http.request{
    method = "POST",
    url = BASE_URL .. "/v1/messages",
    headers = { ["x-api-key"] = API_KEY, ["anthropic-version"] = "2023-06-01" },
    body = { model = MODEL, max_tokens = 4096, system = task.SYSTEM, tools = tools.anthropic_tools(),
      messages = messages },
    timeout = 300,
  }
  if status ~= 200 then abort("the model API answered " .. status .. ": " .. http.error_message(data)) end
  if type(data) ~= "table" or type(data.content) ~= "table" then abort("unexpected answer from the model API") end
  return data
end

local function run_agent(sbx)
  task.seed(sbx, MODEL)

  local messages = { { role = "user", content = task.TASK } }
  for step = 1, MAX_STEPS do
    local msg = create_message(messages)
    print(string.format("-- step %d (stop_reason %s)", step, tostring(msg.stop_reason)))

    -- Send the assistant turn back with its text and tool_use blocks as they were.
    local blocks, uses = {}, {}
    for _, block in ipairs(msg.content) do
      if block.type == "text" then
        blocks[#blocks + 1] = { type = "text", text = block.text }
        if block.text ~= "" then show("assistant: ", block.text) end
      elseif block.type == "tool_use" then
        blocks[#blocks + 1] = { type = "tool_use", id = block.id, name = block.name, input = block.input }
        uses[#uses + 1] = block
      end
    end
    if msg.stop_reason ~= "tool_use" or #uses == 0 then return msg.stop_reason == "end_turn" end
    messages[#messages + 1] = { role = "assistant", content = blocks }

    local results = {}
    for i, use in ipairs(uses) do
      local ok_json, shown = pcall(cjson.encode, use.input)
      show("tool call: ", use.name .. " " .. (ok_json and shown or "?"))
      local result = tools.handle_tool_call(sbx, use.name, use.input)
      show("result: ", result)
      results[i] = { type = "tool_result", tool_use_id = use.id, content = result }
    end
    messages[#messages + 1] = { role = "user", content = results }
  end
  return task.step_limit_reached(MAX_STEPS)
end

task.run("agent_anthropic", run_agent)
