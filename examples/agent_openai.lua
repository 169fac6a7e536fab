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
local airlock = require "airlock"
local tools = require "airlock.tools"
local http = require "airlock.http"

local function env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  return v
end

local function fail(message)
  io.stderr:write("agent_openai: ", message, "\n")
  os.exit(1)
end

-- Ends the run from inside the sandbox scope: airlock.with deletes the sandbox first.
local Abort = { __tostring = function(e) return e.message end }
local function abort(message)
  error(setmetatable({ message = message }, Abort), 0)
end

local API_KEY = env("OPENAI_API_KEY") or fail("set OPENAI_API_KEY")
local BASE_URL = env("OPENAI_BASE_URL", "https://api.openai.com/v1"):gsub("/+$", "")
local MODEL = env("OPENAI_MODEL", "gpt-4o-mini")
local MAX_STEPS = tonumber(env("AGENT_MAX_STEPS", "12")) or fail("AGENT_MAX_STEPS must be a number")

-- The workspace: a small module with a bug and the unittest that catches it.
local SEED = {
  -- The bug's fix changes the file's size: Python's bytecode cache trusts a .pyc whose source
  -- has the same size and the same mtime second, and a fast model rewrites within a second.
  { "calc.py", "def add(a, b):\n    total = a - b\n    return total\n" },
  { "test_calc.py", "import unittest\n\nfrom calc import add\n\n\n"
    .. "class AddTest(unittest.TestCase):\n    def test_add(self):\n"
    .. "        self.assertEqual(add(2, 3), 5)\n\n\nif __name__ == \"__main__\":\n"
    .. "    unittest.main()\n" },
}
local TEST_COMMAND = "python3 -m unittest -q"

local SYSTEM = "You are a careful software engineer. You work in an isolated Linux sandbox "
  .. "(bash, Python 3.11) through the tools write_file, read_file and run_command; paths are "
  .. "relative to the workspace. Fix code, not tests. When you are done, answer with one "
  .. "short sentence saying what you changed."
local TASK = "Make the failing test in this workspace pass. Run the tests with `"
  .. TEST_COMMAND .. "`."

local function show(label, text)
  text = tostring(text)
  io.write(label, (text:gsub("\n", "\n" .. string.rep(" ", #label))), "\n")
end

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
  for _, file in ipairs(SEED) do sbx.files:write(file[1], file[2]) end
  print("sandbox " .. sbx.session_id .. ": seeded " .. #SEED .. " files; model " .. MODEL)
  show("user: ", TASK)

  local messages = {
    { role = "system", content = SYSTEM },
    { role = "user", content = TASK },
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
  print("stopped: the step limit (" .. MAX_STEPS .. ") was reached")
  return false
end

local ok, finished_and_passed = pcall(airlock.with, {}, function(sbx)
  local finished = run_agent(sbx)
  local check = sbx:run(TEST_COMMAND, { timeout = 30 })
  print("-- check: " .. TEST_COMMAND)
  show("", check.output)
  print("calc.py now:")
  io.write(sbx.files:read("calc.py"))
  print(check.ok and "RESULT: the tests pass" or "RESULT: the tests still fail")
  return finished and check.ok
end)
if not ok then fail(tostring(finished_and_passed)) end
if finished_and_passed ~= true then os.exit(1) end
