-- Runs inside a host (nvim, LÖVE): hands a result back to the harness that started it, by
-- writing it to the file named by $AIRLOCK_HOST_RESULT (the harness returns it as .result).
-- Plain Lua 5.1 (the hosts' LuaJIT).
local M = {}

-- Writes text (a string) as the result, replacing any earlier one.
function M.write(text)
  local path = os.getenv("AIRLOCK_HOST_RESULT")
  assert(path and path ~= "", "AIRLOCK_HOST_RESULT is not set: run this from support.hosts")
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

return M
