-- A data analyst agent on the OpenAI Chat Completions API with a stateful Python kernel: the
-- model gets the sandbox tools, among them run_python, whose variables live from one call to
-- the next. It loads a CSV once, then answers three questions about it, the last with a
-- chart, without reading the file again. Prints a transcript; exits 0 when the model finished
-- and its cells ran in one kernel (the CSV loaded once, a chart among the results).
--
--   OPENAI_API_KEY=sk-... SANDBOX_API_URL=... SANDBOX_API_KEY=... lua5.4 examples/agent_kernel.lua
--
-- Settings as examples/agent_openai.lua: OPENAI_API_KEY (required), OPENAI_BASE_URL (default
-- https://api.openai.com/v1), OPENAI_MODEL (default gpt-4o-mini), AGENT_MAX_STEPS (default 12),
-- SANDBOX_API_URL / SANDBOX_API_KEY. Runs on Lua 5.1/LuaJIT too (airlock.with, no <close>).
-- The loop is examples/openai_loop.lua. Kernels need airlockd (docs/api.md, "Kernels").
package.path = (arg and arg[0] or ""):match("^(.-)[^/]*$") .. "?.lua;" .. package.path
local airlock = require "airlock"
local task = require "agent_task"
local loop = require "openai_loop"

local env = task.env
local function fail(message) task.fail("agent_kernel", message) end

local API_KEY = env("OPENAI_API_KEY") or fail("set OPENAI_API_KEY")
local BASE_URL = env("OPENAI_BASE_URL", "https://api.openai.com/v1"):gsub("/+$", "")
local MODEL = env("OPENAI_MODEL", "gpt-4o-mini")
local MAX_STEPS = tonumber(env("AGENT_MAX_STEPS", "12")) or fail("AGENT_MAX_STEPS must be a number")

local SYSTEM = "You are a careful data analyst working in an isolated Linux sandbox through "
  .. "tools. run_python runs Python in one persistent session, like a notebook: load data once "
  .. "into a variable and reuse it in later calls instead of reading the file again; the value "
  .. "of a cell's last expression is shown to you. Show charts with matplotlib's plt.show(). "
  .. "Answer each question in one short sentence."
local TASK = "The workspace has sales.csv (columns month, region, product, units, revenue). "
  .. "Load it once with run_python, then answer: 1. How many sales are there, and what is the "
  .. "total revenue? 2. Which region has the highest revenue? 3. How did revenue change month "
  .. "by month? Answer the third with a bar chart."

-- sales.csv: 12 months x 4 regions x 3 products, the same figures on every run.
local function sales_csv()
  local lines = { "month,region,product,units,revenue" }
  local prices = { widget = 2.5, gadget = 12, gizmo = 40 }
  local n = 0
  for month = 1, 12 do
    for _, region in ipairs({ "north", "south", "east", "west" }) do
      for _, product in ipairs({ "widget", "gadget", "gizmo" }) do
        n = n + 1
        local units = (n * 37 % 23) + month + (region == "west" and 6 or 0)
        lines[#lines + 1] = string.format("2025-%02d,%s,%s,%d,%.2f", month, region, product, units,
          units * prices[product])
      end
    end
  end
  return table.concat(lines, "\n") .. "\n"
end

-- The transcript as it is written, also kept to judge the run by.
local transcript = {}
local function write(text)
  transcript[#transcript + 1] = text
  io.write(text)
end

local ok, outcome = pcall(airlock.with, {}, function(sbx)
  sbx.files:write("sales.csv", sales_csv())
  write("sandbox " .. sbx.session_id .. ": sales.csv written; model " .. MODEL .. "\n")
  task.show("user: ", TASK, write)
  local finished = loop.run(sbx, { api_key = API_KEY, base_url = BASE_URL, model = MODEL,
    max_steps = MAX_STEPS, system = SYSTEM, task = TASK, abort = task.abort, write = write })
  if not finished then return task.step_limit_reached(MAX_STEPS) end
  return { kernels = #sbx:kernels() }
end)
if not ok then fail(tostring(outcome)) end
if not outcome then os.exit(1) end

local text = table.concat(transcript)
local _, reads = text:gsub("open%('sales%.csv'%)", "")
local _, charts = text:gsub("%[image/png: %d+ bytes%]", "")
print(string.format("-- kernels: %d; sales.csv read by %d cell(s); charts: %d", outcome.kernels, reads, charts))
if outcome.kernels == 1 and reads == 1 and charts >= 1 then
  print("RESULT: answered from data loaded once, with a chart")
else
  print("RESULT: the cells did not share one kernel's data, or drew no chart")
  os.exit(1)
end
