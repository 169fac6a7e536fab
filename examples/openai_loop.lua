-- The agent loop on the OpenAI Chat Completions API, shared by examples/agent_openai.lua (a
-- script) and examples/openresty/ (an nginx endpoint, on cosockets): the model gets the three
-- sandbox tools (write_file, read_file, run_command) and the loop runs its tool calls in the
-- sandbox until it answers without calling a tool. The same code runs in both homes because
-- the SDK picks its transport (libcurl in a script, cosockets in nginx).
--
--   local loop = require "openai_loop"
--   local finished = loop.run(sbx, { api_key = ..., base_url = ..., model = ..., max_steps = 12,
--                                    system = ..., task = ..., write = io.write })
--
-- run returns true when the model finished, false when it ran out of steps; a model API
-- failure raises (opts.abort(message), default error). The transcript goes to opts.write.
local tools = require "airlock.tools"
local http = require "airlock.http"
local show = require("agent_task").show

local M = {}

-- One Chat Completions call; returns the first choice.
local function complete(opts, messages)
  local status, data = http.request{
    method = "POST",
    url = opts.base_url .. "/chat/completions",
    headers = { Authorization = "Bearer " .. opts.api_key },
    body = { model = opts.model, messages = messages, tools = tools.openai_tools() },
    timeout = 300,
  }
  if status ~= 200 then opts.abort("the model API answered " .. status .. ": " .. http.error_message(data)) end
  local choice = type(data) == "table" and type(data.choices) == "table" and data.choices[1]
  if type(choice) ~= "table" or type(choice.message) ~= "table" then
    opts.abort("unexpected answer from the model API")
  end
  return choice
end

function M.run(sbx, opts)
  local write = opts.write or io.write
  opts.abort = opts.abort or function(message) error(message, 0) end
  local messages = {
    { role = "system", content = opts.system },
    { role = "user", content = opts.task },
  }
  for step = 1, opts.max_steps do
    local choice = complete(opts, messages)
    local msg = choice.message
    local calls = type(msg.tool_calls) == "table" and msg.tool_calls or {}
    local text = type(msg.content) == "string" and msg.content or nil
    write(string.format("-- step %d (finish_reason %s)\n", step, tostring(choice.finish_reason)))
    if text and text ~= "" then show("assistant: ", text, write) end
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
      show("tool call: ", name .. " " .. tostring(args), write)
      local result = tools.handle_tool_call(sbx, name, args)
      show("result: ", result, write)
      messages[#messages + 1] = { role = "tool", tool_call_id = call.id, content = result }
    end
  end
  return false
end

return M
