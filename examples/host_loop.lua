-- A host loop (a game's frame, an editor's timer) that must never block: three sandboxes
-- run their commands at the same time from one thread, and the loop keeps ticking.
-- Runs on Lua 5.4 and LuaJIT. Needs SANDBOX_API_URL and SANDBOX_API_KEY.
local airlock = require "airlock"

local tasks = {}
for i = 1, 3 do
  tasks[i] = airlock.spawn(function()
    return airlock.with({}, function(sbx)
      local r = sbx:run(string.format("sleep 1; echo task %d", i))
      return (r.stdout:gsub("%s+$", ""))
    end)
  end)
end

local frames = 0
while airlock.poll(0) > 0 do      -- 0: advance what is ready, never wait
  frames = frames + 1             -- the host's own work for this frame goes here
  airlock.poll(10)                -- or sleep until the next frame; 10 ms here
end

for i, task in ipairs(tasks) do
  local ok, value = task:result()
  print(i, ok and value or ("failed: " .. tostring(value)))
end
print("frames while waiting: " .. (frames > 0 and "yes" or "no"))
