-- What examples/agent_openai.lua, examples/agent_anthropic.lua and the OpenResty example
-- (examples/openresty/) share: the task (a small Python module with a bug and the unittest
-- that catches it), the prompts, settings from the environment, the transcript, and the run
-- itself: a sandbox seeded with the workspace, the example's own model loop, then the tests
-- run once more as the final check. Each example loads this file from its own directory.
-- Runs on Lua 5.1/LuaJIT too (no <close>).
local airlock = require "airlock"

local M = {}

M.TEST_COMMAND = "python3 -m unittest -q"

-- The workspace.
M.SEED = {
  -- The bug's fix changes the file's size: Python's bytecode cache trusts a .pyc whose source
  -- has the same size and the same mtime second, and a fast model rewrites within a second.
  { "calc.py", "def add(a, b):\n    total = a - b\n    return total\n" },
  { "test_calc.py", "import unittest\n\nfrom calc import add\n\n\n"
    .. "class AddTest(unittest.TestCase):\n    def test_add(self):\n"
    .. "        self.assertEqual(add(2, 3), 5)\n\n\nif __name__ == \"__main__\":\n"
    .. "    unittest.main()\n" },
}

M.SYSTEM = "You are a careful software engineer. You work in an isolated Linux sandbox "
  .. "(bash, Python 3.11) through the tools write_file, read_file and run_command; paths are "
  .. "relative to the workspace. Fix code, not tests. When you are done, answer with one "
  .. "short sentence saying what you changed."
M.TASK = "Make the failing test in this workspace pass. Run the tests with `"
  .. M.TEST_COMMAND .. "`."

-- The environment variable name, or default when it is unset or empty.
function M.env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  return v
end

-- Ends the program: "<program>: <message>" on stderr, exit status 1.
function M.fail(program, message)
  io.stderr:write(program, ": ", message, "\n")
  os.exit(1)
end

-- Ends the run from inside the sandbox scope: airlock.with deletes the sandbox first.
local Abort = { __tostring = function(e) return e.message end }
function M.abort(message)
  error(setmetatable({ message = message }, Abort), 0)
end

local function stdout(text) io.write(text) end

-- One transcript entry: label, then text with its continuation lines indented under it,
-- given to write (default: stdout).
function M.show(label, text, write)
  text = tostring(text)
  ;(write or stdout)(label .. (text:gsub("\n", "\n" .. string.rep(" ", #label))) .. "\n")
end

-- Writes the workspace into the sandbox and starts the transcript with the task.
function M.seed(sbx, model, write)
  write = write or stdout
  for _, file in ipairs(M.SEED) do sbx.files:write(file[1], file[2]) end
  write("sandbox " .. sbx.session_id .. ": seeded " .. #M.SEED .. " files; model " .. model .. "\n")
  M.show("user: ", M.TASK, write)
end

-- For a loop that ran out of steps; returns false (not finished).
function M.step_limit_reached(max_steps)
  print("stopped: the step limit (" .. max_steps .. ") was reached")
  return false
end

-- Runs run_agent(sbx) in a fresh sandbox (deleted at the end, whatever happens), then the
-- tests as the final check, and prints the outcome. Exits 0 only when run_agent returned
-- true (the model finished) and the tests pass; an error ends it with "<program>: <error>".
function M.run(program, run_agent)
  local ok, finished_and_passed = pcall(airlock.with, {}, function(sbx)
    local finished = run_agent(sbx)
    local check = sbx:run(M.TEST_COMMAND, { timeout = 30 })
    print("-- check: " .. M.TEST_COMMAND)
    M.show("", check.output)
    print("calc.py now:")
    io.write(sbx.files:read("calc.py"))
    print(check.ok and "RESULT: the tests pass" or "RESULT: the tests still fail")
    return finished and check.ok
  end)
  if not ok then M.fail(program, tostring(finished_and_passed)) end
  if finished_and_passed ~= true then os.exit(1) end
end

return M
