-- An agent on the OpenAI Chat Completions API: the model gets the three sandbox tools
-- (write_file, read_file, run_command), and this loop runs its tool calls in an Airlock
-- sandbox until it answers without calling a tool. The task: make the failing test in the
-- workspace pass. Prints a transcript; exits 0 when the model finished and the tests pass.
--
--   OPENAI_API_KEY=sk-... SANDBOX_API_URL=... SANDBOX_API_KEY=... lua5.4 examples/agent_openai.lua
--
-- Settings: OPENAI_API_KEY (required), OPENAI_BASE_URL (default https://api.openai.com/v1),
-- OPENAI_MODEL (default gpt-4o-mini), AGENT_MAX_STEPS (default 12), and the sandbox's
-- SANDBOX_API_URL / SANDBOX_API_KEY. Runs on Lua 5.1/LuaJIT too (airlock.with, no <close>).
-- The task, its workspace, the transcript and the final check are shared with the other
-- agent example: examples/agent_task.lua, next to this file.
package.path = (arg and arg[0] or ""):match("^(.-)[^/]*$") .. "?.lua;" .. package.path
local task = require "agent_task"
local tools = require "airlock.tools"
local http = require "airlock.http"

local env, show, abort = task.env, task.show, task.abort
local function fail(message) task.fail("agent_openai", message) end

local API_KEY = env("OPENAI_API_KEY") or fail("set OPENAI_API_KEY")
local BASE_URL = env("OPENAI_BASE_URL", "https://api.openai.com/v1"):gsub("/+$", "")
local MODEL = env("OPENAI_MODEL", "gpt-4o-mini")
local MAX_STEPS = tonumber(env("AGENT_MAX_STEPS", "12")) or fail("AGENT_MAX_STEPS must be a number")

-- One Chat Completions call; returns the first choice.
local function complete(messages)
  local status, data = http.request{
    method = "POST",
    url = BASE_URL .. "/chat/completions",
    headers = { Authorization = "Bearer " .. API_KEY },
    body = { model = MODEL, messages = messages, tools = tools.openai_tools() },
    timeout = 300,
  }
  if status ~= 200 then abort("the model API answered " .. status .. ": " .. http.error_message(data)) end
  local choice = type(data) == "table" and type(data.choices) == "table" and data.choices[1]
  if type(choice) ~= "table" or type(choice.message) ~= "table" then abort("unexpected answer from the model API") end
  return choice
end

local function run_agent(sbx)
  task.seed(sbx, MODEL)

  local messages = {
    { role = "system", content = task.SYSTEM },
    { role = "user", content = task.TASK },
  }
  for step = 1, MAX_STEPS do
    local choice = complete(messages)
    local msg = choice.message
    local calls = type(msg.tool_calls) == "table" and msg.tool_calls or {}
    local text = type(msg.content) == "string" and msg.content or nil
    print(string.format("-- step %d (finish_reason %s)", step, tostring(choice.finish_reason)))
    if text and text ~= "" then show("assistant: ", text) end
    if #calls == 0 or choice.finish_reason == "stop" then return true end

    -- Send the assistant turn back as it was (only the fields the API takes as input).
    local echoed = {}
    for i, call in ipairs(calls) do
      echoed[i] = { id = call.id, type = "function",
        ["function"] = { name = call["function"].name, arguments = call["function"].arguments } }
    end
    messages[#messages + 1] = { role = "assistant", content = text or http.null, tool_calls = echoed }

    for _, call in ipairs(calls) do
      local name, args = call["function"].name, call["function"].arguments
      show("tool call: ", name .. " " .. tostring(args))
      local result = tools.handle_tool_call(sbx, name, args)
      show("result: ", result)
      messages[#messages + 1] = { role = "tool", tool_call_id = call.id, content = result }
    end
  end
  return task.step_limit_reached(MAX_STEPS)
end

task.run("agent_openai", run_agent)
