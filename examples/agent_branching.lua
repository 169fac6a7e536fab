-- An agent that branches (airlockd snapshots): the workspace is seeded once and snapshotted,
-- then three attempts at the task each start from that snapshot in a sandbox of their own, at
-- the same time (airlock.spawn tasks), each an OpenAI tool-calling loop; the tests score each
-- attempt and the best one is kept (the first that passes in the fewest model steps). Prints
-- one line per attempt, the best one's calc.py, and exits 0 when the best attempt passes.
-- Every sandbox and the snapshot are deleted at the end, whatever happens.
--
--   OPENAI_API_KEY=sk-... SANDBOX_API_URL=... SANDBOX_API_KEY=... lua5.4 examples/agent_branching.lua
--
-- Settings: OPENAI_API_KEY (required), OPENAI_BASE_URL (default https://api.openai.com/v1),
-- OPENAI_MODEL (default gpt-4o-mini), AGENT_MAX_STEPS (default 12), AGENT_ATTEMPTS (default
-- 3), and the sandbox's SANDBOX_API_URL / SANDBOX_API_KEY. Runs on Lua 5.1/LuaJIT too. The
-- task and its workspace are examples/agent_task.lua, the loop examples/openai_loop.lua.
package.path = (arg and arg[0] or ""):match("^(.-)[^/]*$") .. "?.lua;" .. package.path
local airlock = require "airlock"
local task = require "agent_task"
local loop = require "openai_loop"

local env = task.env
local function fail(message) task.fail("agent_branching", message) end

local API_KEY = env("OPENAI_API_KEY") or fail("set OPENAI_API_KEY")
local BASE_URL = env("OPENAI_BASE_URL", "https://api.openai.com/v1"):gsub("/+$", "")
local MODEL = env("OPENAI_MODEL", "gpt-4o-mini")
local MAX_STEPS = tonumber(env("AGENT_MAX_STEPS", "12")) or fail("AGENT_MAX_STEPS must be a number")
local ATTEMPTS = tonumber(env("AGENT_ATTEMPTS", "3")) or fail("AGENT_ATTEMPTS must be a number")

-- One attempt in a new sandbox from the snapshot: its score and what it ended with.
local function attempt(snapshot_id, n)
  local sbx = airlock.sandbox{ from_snapshot = snapshot_id }
  local steps = 0
  -- airlock.pcall: the loop yields inside its task, which a plain pcall cannot carry on 5.1
  local ok, err = airlock.pcall(loop.run, sbx, { api_key = API_KEY, base_url = BASE_URL, model = MODEL,
    max_steps = MAX_STEPS, system = task.SYSTEM,
    task = task.TASK .. " (Attempt " .. n .. " of " .. ATTEMPTS .. ": try your own approach.)",
    write = function(text) if text:find("^%-%- step") then steps = steps + 1 end end })
  local out = { n = n, session = sbx.session_id, steps = steps, error = not ok and tostring(err) or nil }
  if ok then
    local check = sbx:run(task.TEST_COMMAND, { timeout = 30 })
    out.passed, out.calc = check.ok, sbx.files:read("calc.py")
  end
  sbx:close()
  return out
end

local snapshot_id
local ok, err = pcall(airlock.with, {}, function(sbx)
  for _, file in ipairs(task.SEED) do sbx.files:write(file[1], file[2]) end
  snapshot_id = sbx:snapshot{ name = "seeded" }
  print(string.format("seeded %d files and took snapshot %s; %d attempts from it", #task.SEED, snapshot_id, ATTEMPTS))
end)
if not ok then fail(tostring(err)) end

local running = {}
for n = 1, ATTEMPTS do running[n] = airlock.spawn(attempt, snapshot_id, n) end
while airlock.poll(50) > 0 do end

local best
for n, t in ipairs(running) do
  local done, r = t:result()
  if not done then r = { n = n, steps = 0, error = tostring(r) } end
  print(string.format("attempt %d: %s in %d model steps", n,
    r.error and ("failed: " .. r.error) or (r.passed and "tests pass" or "tests fail"), r.steps))
  if r.passed and (not best or r.steps < best.steps) then best = r end
end
pcall(airlock.snapshots.delete, snapshot_id)

if not best then
  print("RESULT: no attempt passed")
  os.exit(1)
end
print(string.format("best: attempt %d; its calc.py:", best.n))
io.write(best.calc)
print("RESULT: kept attempt " .. best.n)
