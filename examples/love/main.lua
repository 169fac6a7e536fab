-- examples/love: a LÖVE 11 game that runs commands in Airlock sandboxes while it keeps
-- drawing frames. Five commands are in flight at once (one waits in the SDK's client-side
-- line: airlockd runs 4 per tenant by default); each result shows up the frame it arrives.
-- LÖVE has no libuv loop, so the SDK's curl transport is used and the game moves it with one
-- airlock.poll(0) per frame, which never blocks.
--
--   SANDBOX_API_URL=http://127.0.0.1:8080 SANDBOX_API_KEY=ak_... love examples/love
--
-- The SDK must be on LuaJIT's paths: LUA_PATH="<checkout>/lua/?.lua;<checkout>/lua/?/init.lua;;"
-- LUA_CPATH="<checkout>/build/luajit/?.so;;" (make luajit-core), or the rock for LuaJIT.
-- Headless (no display needed, results on stdout): AIRLOCK_LOVE_HEADLESS=1, or automatic when
-- there is no display (conf.lua). AIRLOCK_LOVE_QUIT_WHEN_DONE=1 quits once every result is
-- in (spec/hosts/love_spec.lua).
local airlock = require "airlock"

local COMMANDS = {
  { "python", "python3 -c 'print(sum(range(10 ** 6)))'" },
  { "shell", "echo hello from $(uname -s)" },
  { "slow", "sleep 1; echo slept 1 s" },
  { "fails", "echo oops >&2; exit 3" },
  { "files", "ls / | wc -l" },
}

local jobs = {}
local frame = 0
local all_in_at             -- the frame the last result arrived
local creating = 0          -- sandboxes being created
local open = {}             -- sandboxes of commands still running → true

-- One command in a sandbox of its own, as a task: every SDK call in it yields to the game.
local function start(job)
  job.task = airlock.spawn(function()
    creating = creating + 1
    local ok, sbx = airlock.pcall(airlock.sandbox)
    creating = creating - 1
    if not ok then error(sbx, 0) end
    open[sbx] = true
    local ran, result = airlock.pcall(sbx.run, sbx, job.command)
    open[sbx] = nil
    sbx:close()
    if not ran then error(result, 0) end
    return result
  end)
end

local function describe(ok, result)
  if not ok then return "error: " .. tostring(result) end
  local text = (result.stdout .. result.stderr):gsub("%s+$", ""):gsub("\n", " | ")
  return string.format("exit %d  %s", result.exit_code, text)
end

function love.load()
  if not love.window then print("headless: no window, results on stdout") end
  for i, c in ipairs(COMMANDS) do
    jobs[i] = { label = c[1], command = c[2] }
    start(jobs[i])
  end
end

function love.update()
  frame = frame + 1
  airlock.poll(0)                     -- 0: advance what is ready, never wait
  local running = 0
  for _, job in ipairs(jobs) do
    if job.task.status == "running" then
      running = running + 1
    elseif not job.text then
      job.text, job.frame = describe(job.task:result()), frame
      print(string.format("frame %d: %s: %s", frame, job.label, job.text))
    end
  end
  if running == 0 and not all_in_at then
    all_in_at = frame
    print(string.format("all %d results in by frame %d", #jobs, frame))
    if os.getenv("AIRLOCK_LOVE_QUIT_WHEN_DONE") == "1" then love.event.quit(0) end
  end
end

function love.draw()
  love.graphics.print("frame " .. frame, 10, 10)
  for i, job in ipairs(jobs) do
    love.graphics.print(string.format("%-7s %s", job.label, job.text or "running..."), 10, 20 + 24 * i)
  end
end

function love.keypressed(key)
  if key == "escape" then love.event.quit() end
end

-- Quitting with commands in flight: let the sandboxes being created come into being (3 s at
-- most), then delete every sandbox still open, so none is left on the server.
function love.quit()
  local deadline = love.timer.getTime() + 3
  while creating > 0 and love.timer.getTime() < deadline do airlock.poll(20) end
  for sbx in pairs(open) do pcall(sbx.close, sbx, { timeout = 2 }) end
  return false
end
