-- Runs inside LÖVE (headless, via spec/support/hosts/love.lua) for bench/love_frames.lua:
-- the cost of airlock.poll(0) in real love.update frames, in three phases one after the
-- other: idle (no task); 50 requests in flight (a loopback server that never answers:
-- $AIRLOCK_BENCH_STALL_URL); 50 `sleep 1` commands through 5 sandboxes on airlockd
-- ($SANDBOX_API_URL/KEY, 8 at once). Hands the poll(0) times (microseconds) of each phase and
-- a few facts to the driver as JSON (support.hosts.report). Quits when done.
local airlock = require "airlock"
local cjson = require "cjson"
local report = require "support.hosts.report"

local FRAMES = tonumber(os.getenv("AIRLOCK_BENCH_FRAMES") or "") or 500
local out = { idle = {}, in_flight = {}, commands = {} }
local phase = "idle"
local frames_in_phase = 0
local stall_tasks, command_tasks, boxes, commands_started_at = {}, {}, {}, nil

local function now() return love.timer.getTime() end

local function running(list)
  local n = 0
  for _, t in ipairs(list) do if t.status == "running" then n = n + 1 end end
  return n
end

local function start_in_flight()
  local opts = { api_key = "stall", base_url = os.getenv("AIRLOCK_BENCH_STALL_URL"), timeout = 5, max_retries = 0 }
  for i = 1, 50 do
    stall_tasks[i] = airlock.spawn(function() return airlock.pcall(airlock.list_sessions, opts) end)
  end
end

local function start_commands()
  local opts = { max_concurrent_exec = 8 }
  for i = 1, 5 do boxes[i] = airlock.sandbox(opts) end        -- blocking, before the phase
  for i = 1, 50 do
    command_tasks[i] = airlock.spawn(function() return boxes[i % 5 + 1]:run("sleep 1").exit_code end)
  end
  commands_started_at = now()
end

local function finish()
  local failed = 0
  for _, t in ipairs(command_tasks) do
    local ok, code = t:result()
    if not ok or code ~= 0 then failed = failed + 1 end
  end
  for _, b in ipairs(boxes) do b:close() end
  out.commands_failed = failed
  out.commands_wall_s = now() - commands_started_at
  report.write(cjson.encode(out))
  love.event.quit(0)
end

function love.update()
  local t0 = now()
  local left = airlock.poll(0)
  local us = (now() - t0) * 1e6
  frames_in_phase = frames_in_phase + 1
  if phase == "idle" then
    out.idle[#out.idle + 1] = us
    if frames_in_phase == FRAMES then
      phase, frames_in_phase = "in_flight", 0
      start_in_flight()
    end
  elseif phase == "in_flight" then
    out.in_flight[#out.in_flight + 1] = us
    if frames_in_phase == FRAMES then
      out.live_in_flight = airlock.stats().live
      phase = "draining"               -- the stalled requests time out (5 s)
    end
  elseif phase == "draining" then
    if running(stall_tasks) == 0 then
      phase, frames_in_phase = "commands", 0
      start_commands()
    end
  elseif phase == "commands" then
    out.commands[#out.commands + 1] = us
    if left == 0 then finish() end
  end
end
