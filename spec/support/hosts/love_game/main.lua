-- LÖVE entry point for support.hosts.love: runs the game script named by
-- $AIRLOCK_HOST_SCRIPT (which defines love.load / love.update / ... as a main.lua would), with
-- its own directory first on package.path. With $AIRLOCK_HOST_FRAMES, LÖVE quits (exit
-- status 0) after that many love.update calls. An error ends LÖVE with exit status 1 and the
-- traceback on stdout (LÖVE's own handler does that when there is no window).
local script = os.getenv("AIRLOCK_HOST_SCRIPT")
local script_dir = script:match("^(.*)/[^/]*$") or "."
package.path = script_dir .. "/?.lua;" .. script_dir .. "/?/init.lua;" .. package.path

dofile(script)

local frames = tonumber(os.getenv("AIRLOCK_HOST_FRAMES") or "")
if frames then
  local game_update = love.update
  local count = 0
  love.update = function(dt)
    if game_update then game_update(dt) end
    count = count + 1
    if count == frames then love.event.quit(0) end
  end
end
