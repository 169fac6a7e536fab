-- Runs inside `nvim --headless` for bench/nvim_loop.lua (via spec/support/hosts/nvim.lua):
-- measures, side by side in one editor,
--   1. a 10 ms vim.loop timer's lateness in windows of WINDOW_MS, ROUNDS times each in turn:
--      the editor idle; 8 requests in flight to a loopback server that never answers
--      ($AIRLOCK_BENCH_STALL_URL: the SDK's own share, no sandbox running); 8 long sandbox
--      commands in flight (started 1.5 s before the window,
--      so the sandboxes have booted and sleep: the machine is quiet); 8 tasks running short
--      commands back to back (a sandbox boots every few tens of milliseconds: the 2 cores
--      are busy with runsc too). Also the time the loop's thread spent in the transport's
--      callbacks and in resuming tasks, per second of window;
--   2. wakeups of the idle editor over IDLE_MS: before the SDK is loaded, and with the SDK
--      loaded, its libuv transport installed and 8 sessions open (kept-alive connections).
--      Counted as context switches of nvim's threads (/proc/self/task/*/status), and as the
--      transport's own callbacks.
-- Hands a JSON report to the driver (support.hosts.report). Needs SANDBOX_API_URL/KEY of an
-- airlockd that runs 8 commands at once.
local report = require "support.hosts.report"
local cjson = require "cjson"
local uv = vim.loop

local ROUNDS = tonumber(os.getenv("AIRLOCK_BENCH_ROUNDS") or "") or 3
local WINDOW_MS = tonumber(os.getenv("AIRLOCK_BENCH_WINDOW_MS") or "") or 2000
local IDLE_MS = tonumber(os.getenv("AIRLOCK_BENCH_IDLE_MS") or "") or 5000
local IN_FLIGHT = 8
local TICK_MS = 10

-- Context switches (voluntary + involuntary) of every thread of this process.
local function context_switches()
  local total = 0
  local dir = uv.fs_scandir("/proc/self/task")
  while dir do
    local tid = uv.fs_scandir_next(dir)
    if not tid then break end
    local f = io.open("/proc/self/task/" .. tid .. "/status", "r")
    if f then
      local text = f:read("*a")
      f:close()
      for n in text:gmatch("_ctxt_switches:%s*(%d+)") do total = total + tonumber(n) end
    end
  end
  return total
end

-- Calls done() after ms, the only timer armed meanwhile (it costs one wakeup itself).
local function after(ms, done)
  local t = uv.new_timer()
  t:start(ms, 0, function()
    t:close()
    done()
  end)
end

-- A 10 ms one-shot timer re-armed for ms: the lateness (ms) of each tick beyond its due
-- time, into samples.
local function ticks(ms, samples, done)
  local t = uv.new_timer()
  local finish_at = uv.hrtime() + ms * 1e6
  local due
  local function arm()
    due = uv.hrtime() + TICK_MS * 1e6
    t:start(TICK_MS, 0, function()
      local now = uv.hrtime()
      samples[#samples + 1] = math.max(0, (now - due) / 1e6)
      if now >= finish_at then
        t:close()
        done()
      else
        arm()
      end
    end)
  end
  arm()
end

local function idle_window(ms, done)
  local c0, w0 = context_switches(), nil
  local transport = package.loaded["airlock.transport.uv"]
  if transport then w0 = transport:stats().wakeups end
  after(ms, function()
    local c1 = context_switches()
    local result = { switches_per_s = (c1 - c0) / (ms / 1000) }
    if transport then result.callbacks_per_s = (transport:stats().wakeups - w0) / (ms / 1000) end
    done(result)
  end)
end

local out = { rounds = ROUNDS, window_ms = WINDOW_MS, idle_ms = IDLE_MS, in_flight = IN_FLIGHT,
              idle = {}, stalled = {}, long = {}, busy = {}, sdk_ms_per_s = { stalled = {}, long = {}, busy = {} },
              long_all_in_flight = true, stalled_all_in_flight = true }

local function finish(err)
  out.error = err
  report.write(cjson.encode(out))
  vim.schedule(function() vim.cmd("qa!") end)
end

-- The steps, one after the other (each calls the next when done).
local airlock, boxes
local steps = {}

steps[1] = function(next_step)     -- the editor alone, the SDK not loaded: idle wakeups
  after(500, function()
    idle_window(IDLE_MS, function(r)
      out.idle_editor = r
      next_step()
    end)
  end)
end

steps[2] = function(next_step)     -- the SDK and 8 sessions
  airlock = require "airlock"
  boxes = {}
  local task = airlock.spawn(function()
    for i = 1, IN_FLIGHT do boxes[i] = airlock.sandbox() end
  end)
  local check = uv.new_timer()
  check:start(20, 20, function()
    if task.status == "running" then return end
    check:close()
    if task.status == "failed" then return finish("creating sessions: " .. tostring(task.error)) end
    out.transport = airlock.stats().transport
    next_step()
  end)
end

-- The loop's time in the transport (callbacks and task resumes), in ms since the start.
local function sdk_ms()
  local st = airlock.stats()
  return st.callback_ms + st.resume_ms
end

-- Calls next_step once `pending()` is 0 (checked every 20 ms).
local function when_zero(pending, next_step)
  local wait = uv.new_timer()
  wait:start(20, 20, function()
    if pending() > 0 then return end
    wait:close()
    next_step()
  end)
end

-- A window with the given samples list while `kind` commands run (started by start()).
local function measured(kind, next_step)
  local t0 = sdk_ms()
  ticks(WINDOW_MS, out[kind], function()
    table.insert(out.sdk_ms_per_s[kind], (sdk_ms() - t0) / (WINDOW_MS / 1000))
    next_step()
  end)
end

local function stalled_window(next_step)
  local running = 0
  local stalled = { base_url = os.getenv("AIRLOCK_BENCH_STALL_URL"), api_key = "stall",
                    timeout = WINDOW_MS / 1000 + 1, max_retries = 0 }
  for _ = 1, IN_FLIGHT do
    running = running + 1
    airlock.spawn(function()
      airlock.pcall(airlock.list_sessions, stalled)    -- ends with a timeout, as meant
      running = running - 1
    end)
  end
  after(300, function()
    measured("stalled", function()
      if running < IN_FLIGHT then out.stalled_all_in_flight = false end
      when_zero(function() return running end, next_step)
    end)
  end)
end

local function long_window(next_step)
  local running = 0
  for i = 1, IN_FLIGHT do
    running = running + 1
    airlock.spawn(function()
      boxes[i]:run(string.format("sleep %.1f", WINDOW_MS / 1000 + 2.5))
      running = running - 1
    end)
  end
  after(1500, function()
    measured("long", function()
      if running < IN_FLIGHT then out.long_all_in_flight = false end
      when_zero(function() return running end, next_step)
    end)
  end)
end

local function busy_window(next_step)
  -- IN_FLIGHT tasks, each running short commands back to back until the window ends
  local busy, running, commands = true, 0, 0
  for i = 1, IN_FLIGHT do
    running = running + 1
    airlock.spawn(function()
      while busy do
        boxes[i]:run("sleep 0.3")
        commands = commands + 1
      end
      running = running - 1
    end)
  end
  after(300, function()            -- the commands are in flight
    measured("busy", function()
      busy = false
      when_zero(function() return running end, function()
        out.commands = (out.commands or 0) + commands
        next_step()
      end)
    end)
  end)
end

steps[3] = function(next_step)     -- idle, stalled requests, long commands, short commands, in turn
  local round = 0
  local function one()
    round = round + 1
    if round > ROUNDS then return next_step() end
    after(200, function()
      ticks(WINDOW_MS, out.idle, function()
        stalled_window(function() long_window(function() busy_window(one) end) end)
      end)
    end)
  end
  one()
end

steps[4] = function(next_step)     -- idle again: SDK loaded, transport installed, sessions open
  after(500, function()
    local s = airlock.stats()
    out.idle_sdk_state = { watched = s.watched, timer_armed = s.timer_armed, sessions_open = #boxes,
                           connects = s.connects, callback_max_ms = s.callback_max_ms,
                           resume_max_ms = s.resume_max_ms }
    idle_window(IDLE_MS, function(r)
      out.idle_sdk = r
      next_step()
    end)
  end)
end

steps[5] = function()
  for _, b in ipairs(boxes) do pcall(b.close, b) end   -- blocking: the bench is over
  finish(nil)
end

local function run_from(i)
  if steps[i] then steps[i](function() run_from(i + 1) end) end
end
run_from(1)
