-- An agent on the OpenAI Chat Completions API: the model gets the three sandbox tools
-- (write_file, read_file, run_command), and the loop runs its tool calls in an Airlock
-- sandbox until it answers without calling a tool. The task: make the failing test in the
-- workspace pass. Prints a transcript; exits 0 when the model finished and the tests pass.
--
--   OPENAI_API_KEY=sk-... SANDBOX_API_URL=... SANDBOX_API_KEY=... lua5.4 examples/agent_openai.lua
--
-- Settings: OPENAI_API_KEY (required), OPENAI_BASE_URL (default https://api.openai.com/v1),
-- OPENAI_MODEL (default gpt-4o-mini), AGENT_MAX_STEPS (default 12), and the sandbox's
-- SANDBOX_API_URL / SANDBOX_API_KEY. Runs on Lua 5.1/LuaJIT too (airlock.with, no <close>).
-- The loop itself is examples/openai_loop.lua (also run by the OpenResty example); the task,
-- its workspace, the transcript and the final check are examples/agent_task.lua (shared with
-- the Anthropic example). Both next to this file.
package.path = (arg and arg[0] or ""):match("^(.-)[^/]*$") .. "?.lua;" .. package.path
local task = require "agent_task"
local loop = require "openai_loop"

local env = task.env
local function fail(message) task.fail("agent_openai", message) end

local API_KEY = env("OPENAI_API_KEY") or fail("set OPENAI_API_KEY")
local BASE_URL = env("OPENAI_BASE_URL", "https://api.openai.com/v1"):gsub("/+$", "")
local MODEL = env("OPENAI_MODEL", "gpt-4o-mini")
local MAX_STEPS = tonumber(env("AGENT_MAX_STEPS", "12")) or fail("AGENT_MAX_STEPS must be a number")

task.run("agent_openai", function(sbx)
  task.seed(sbx, MODEL)
  local finished = loop.run(sbx, { api_key = API_KEY, base_url = BASE_URL, model = MODEL,
    max_steps = MAX_STEPS, system = task.SYSTEM, task = task.TASK, abort = task.abort })
  return finished or task.step_limit_reached(MAX_STEPS)
end)
