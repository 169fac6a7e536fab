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
local airlock = require "airlock"
local tools = require "airlock.tools"
local http = require "airlock.http"
local cjson = require "cjson"

local function env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  return v
end

local function fail(message)
  io.stderr:write("agent_anthropic: ", message, "\n")
  os.exit(1)
end

-- Ends the run from inside the sandbox scope: airlock.with deletes the sandbox first.
local Abort = { __tostring = function(e) return e.message end }
local function abort(message)
  error(setmetatable({ message = message }, Abort), 0)
end

local API_KEY = env("ANTHROPIC_API_KEY") or fail("set ANTHROPIC_API_KEY")
local BASE_URL = env("ANTHROPIC_BASE_URL", "https://api.anthropic.com"):gsub("/+$", "")
local MODEL = env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
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

-- One Messages API call; returns the message.
local function create_message(messages)
  local status, data = http.request{
    method = "POST",
    url = BASE_URL .. "/v1/messages",
    headers = { ["x-api-key"] = API_KEY, ["anthropic-version"] = "2023-06-01" },
    body = { model = MODEL, max_tokens = 4096, system = SYSTEM, tools = tools.anthropic_tools(),
      messages = messages },
    timeout = 300,
  }
  if status ~= 200 then abort("the model API answered " .. status .. ": " .. http.error_message(data)) end
  if type(data) ~= "table" or type(data.content) ~= "table" then abort("unexpected answer from the model API") end
  return data
end

local function run_agent(sbx)
  for _, file in ipairs(SEED) do sbx.files:write(file[1], file[2]) end
  print("sandbox " .. sbx.session_id .. ": seeded " .. #SEED .. " files; model " .. MODEL)
  show("user: ", TASK)

  local messages = { { role = "user", content = TASK } }
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
